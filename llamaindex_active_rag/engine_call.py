"""One question's run of the engine, as the LlamaIndex query engine and workflow use it: :class:`EngineCall`,
and :class:`FixedRouter` (a routing verdict already taken).

The engine loop is never reimplemented here. For each question, :class:`EngineCall` takes a shallow
copy of the configured ``ActiveRAG`` (sharing its model, trigger, query formulator and prompt) and
only swaps two of its public attributes:

- ``retriever``: a fresh :class:`~llamaindex_active_rag.retriever.LlamaIndexRetrieverAdapter` (or a
  caller-supplied stand-in, e.g. the workflow's retrieve-step bridge) that remembers this question's
  nodes, so concurrent questions never share state;
- ``router``: e.g. a :class:`FixedRouter` holding the workflow's route step's verdict.

``ActiveRAG.stream`` yields every ``TriggerDecision``; ``EngineCall.events`` passes on the ones that
let a segment through (a fired decision is reported by the ``Retrieval`` that follows it), so that
*every* trigger decision becomes an instrumentation event (and a workflow stream event), and
dispatches the LlamaIndex instrumentation events as it goes: the active-retrieval events and, through
:class:`~llamaindex_active_rag.generation.GenerationTrace`, the LLM completion events of the generation.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from llama_index.core.schema import NodeWithScore

from active_rag.loop import ActiveRAG
from active_rag.types import ActiveRAGResult, Retrieval, RouteDecision, TokenEvent, TriggerDecision

from .events import ActiveRetrievalEvent, ActiveRouteEvent, dispatch
from .generation import GenerationTrace
from .retriever import LlamaIndexRetrieverAdapter

CallEvent = TokenEvent | Retrieval | RouteDecision | ActiveRAGResult | TriggerDecision


class FixedRouter:
    """A router that returns a verdict already taken (the workflow's route step), so the engine applies
    it exactly as it applies its own router's (no retrieval at all when ``retrieve`` is false)."""

    def __init__(self, decision: RouteDecision) -> None:
        self.decision = decision

    def decide(self, question: str) -> RouteDecision:
        return self.decision


@dataclass
class EngineCall:
    """The engine run for one question; build with :meth:`start`, iterate :meth:`events`."""

    rag: ActiveRAG
    adapter: LlamaIndexRetrieverAdapter | None
    question: str
    retrievals: list[Retrieval] = field(default_factory=list)
    route: RouteDecision | None = None
    result: ActiveRAGResult | None = None
    accepted: int = 0  # output tokens accepted so far (the position of a non-firing decision)
    trace: GenerationTrace | None = None  # LLM instrumentation events (None: not reported)
    _stream: Iterator[CallEvent] | None = field(default=None, repr=False)  # the engine run, once started
    _primed: list[CallEvent] = field(default_factory=list, repr=False)  # events run ahead by prime(), not yet read

    @classmethod
    def start(
        cls,
        base: ActiveRAG,
        question: str,
        *,
        adapter: LlamaIndexRetrieverAdapter | None = None,
        retriever: Any = None,
        router: Any = None,
        model_dict: dict[str, Any] | None = None,
    ) -> EngineCall:
        """A per-question copy of ``base``. ``adapter`` (fresh per question) records nodes; ``retriever``
        replaces what the engine calls (default: the adapter); ``router`` replaces the engine's router;
        ``model_dict`` (the LLM's ``to_dict()``) turns on the LLM completion events."""
        rag = copy.copy(base)
        if retriever is not None or adapter is not None:
            rag.retriever = retriever if retriever is not None else adapter
        if router is not None:
            rag.router = router
        call = cls(rag=rag, adapter=adapter, question=question)
        if model_dict is not None:
            call.trace = GenerationTrace(rag, question.strip(), model_dict)
        return call

    @property
    def method(self) -> str:
        return self.rag.method

    def prime(self) -> None:
        """Run the engine up to its first answer token (or its end): the route and every retrieval before the first
        token are done, so :meth:`source_nodes` and :meth:`metadata` hold them; :meth:`events` gives these events
        first, then goes on."""
        if self._stream is None:
            self._stream = self._run()
        for event in self._stream:
            self._primed.append(event)
            if isinstance(event, (TokenEvent, ActiveRAGResult)):
                break

    def events(self) -> Iterator[CallEvent]:
        """The engine's stream events, plus each non-firing :class:`TriggerDecision`, in order (those that
        :meth:`prime` ran ahead first).

        Dispatches an :class:`ActiveRetrievalEvent` per decision, an :class:`ActiveRouteEvent` per route and
        the LLM completion events (when :attr:`trace` is set).
        Raises the engine's errors (``EmptyQuestionError``, ``RetrieverError``, ...) unchanged.
        """
        if self._stream is None:
            self._stream = self._run()
        while self._primed:
            yield self._primed.pop(0)
        yield from self._stream

    def _run(self) -> Iterator[CallEvent]:
        for event in self.rag.stream(self.question):
            if isinstance(event, TriggerDecision):
                if not event.fire:  # a fired decision is reported by the Retrieval that follows it
                    position = self.decision_position(event)
                    dispatch(ActiveRetrievalEvent.from_decision(event, question=self.question, method=self.method, position=position))
                    yield event
                continue
            trace = self.trace
            if isinstance(event, TokenEvent):
                self.accepted += 1
                if trace is not None:
                    trace.token(event)
            elif isinstance(event, Retrieval):
                self.retrievals.append(event)
                if trace is not None:
                    trace.retrieval(event)
                dispatch(ActiveRetrievalEvent.from_retrieval(event, question=self.question, method=self.method))
            elif isinstance(event, RouteDecision):
                self.route = event
                if trace is not None:
                    trace.route(event)
                dispatch(ActiveRouteEvent.from_decision(event, question=self.question))
            elif isinstance(event, ActiveRAGResult):
                self.result = event
                if trace is not None:
                    trace.close()
            yield event

    def decision_position(self, decision: TriggerDecision) -> int:
        """Output tokens before the segment a decision checked (``TriggerDecision.output_start`` when the
        engine sets it; otherwise the tokens accepted so far, which is the same number)."""
        start = getattr(decision, "output_start", None)
        return start if isinstance(start, int) else self.accepted

    # -- what the LlamaIndex objects report -------------------------------------------------------
    def source_nodes(self) -> list[NodeWithScore]:
        """The nodes behind every passage the engine retrieved so far (deduplicated, first retrieval first)."""
        if self.adapter is None:
            return []
        ids: list[str] = []
        for r in self.retrievals:
            ids.extend(i for i in r.passage_ids if i not in ids)
        return self.adapter.source_nodes(ids)

    def metadata(self) -> dict[str, Any]:
        """The retrieval trace: method, ``Retrieval.to_dict()`` per retrieval, route, and (when done) the rest."""
        meta: dict[str, Any] = {
            "method": self.method,
            "retrievals": [r.to_dict() for r in self.retrievals],
            "route": self.route.to_dict() if self.route else None,
            "complete": self.result is not None,
        }
        if self.result is not None:
            meta["warnings"] = list(self.result.warnings)
            meta["generated_tokens"] = self.result.generated_tokens
            meta["decisions"] = len(self.result.decisions)
            meta["short_answer"] = self.result.short_answer
        return meta
