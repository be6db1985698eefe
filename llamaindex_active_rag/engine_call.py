"""One question's run of the engine, and everything the LlamaIndex objects report of it, in one place:
:class:`EngineCall` (and :class:`FixedRouter`, a routing verdict already taken). The query engine, its streaming
responses and the workflow each hold one ``EngineCall`` per question and read from it; an engine event passes
through this module once, which dispatches its instrumentation events (:mod:`llamaindex_active_rag.events`) and
says what each consumer shows of it: the answer text a streaming response sends (:meth:`EngineCall.answer_text`),
the source nodes and metadata, and a decision's fields for the workflow's stream (:meth:`EngineCall.fields_of`).

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
its :class:`GenerationTrace`, the LLM completion events of the generation.

**The generation as LLM calls**, for observability tools. LlamaIndex tools (Arize Phoenix / OpenInference, Langfuse, custom ``BaseEventHandler`` s) see an LLM's work
through ``LLMCompletionStartEvent`` / ``LLMCompletionInProgressEvent`` / ``LLMCompletionEndEvent``. The
active retrieval loop does not call an LLM object: it decodes with the engine. :class:`GenerationTrace`
reports what the engine did in those terms, from the engine's own stream:

- one completion per *generation segment*: the answer tokens the engine accepted from one prompt. Where a segment
  begins and ends (a retrieval, even one that FL-RAG / FS-RAG make after a segment and stream before its tokens; an
  answer written again from its first word, ``reanswer`` or an answer check; a kept draft streamed once more, which
  was not generated again and is not reported twice) is decided once, for every adapter, by
  :class:`active_rag.event_segments.EventSegmenter`. ``prompt`` is the text the model
  continued: the chat template around the method's prompt with the passages that prompt held (each token's
  ``passage_ids``; ``PromptTemplate.render``),
  followed by the answer accepted so far; ``additional_kwargs`` of the start event names the method,
  the segment number, the output position it starts at and the passage ids in the prompt.
- one ``LLMCompletionInProgressEvent`` per accepted token (``delta`` = the token, ``text`` = the
  segment so far, ``logprobs`` = the token's), and an ``LLMCompletionEndEvent`` with the segment's text,
  logprobs, ``token_ids`` and ``entropies``.
- a router verdict (TA-ARE / vanilla) is a completion of its own: the router's prompt and raw output.

Tokens are reported as the engine accepts them. Tokens the engine generated and then discarded (a
segment FLARE regenerates after a retrieval, a sentence cut back by a trigger) never reach its stream,
so they are in no event; ``ActiveRAGResult.generated_tokens`` counts them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from llama_index.core.base.llms.types import CompletionResponse, LogProb
from llama_index.core.instrumentation.events.llm import (
    LLMCompletionEndEvent,
    LLMCompletionInProgressEvent,
    LLMCompletionStartEvent,
)
from llama_index.core.schema import NodeWithScore

from active_rag.answer_stream import AnswerStream
from active_rag.event_segments import EventSegmenter, RouterCall, SegmentEnd, SegmentEvent, SegmentStart, SegmentToken
from active_rag.engine import ActiveRAG
from active_rag.per_call import engine_for_call
from active_rag.types import ActiveRAGResult, Passage, Retrieval, RouteDecision, TokenEvent, TriggerDecision

from .events import ActiveRetrievalEvent, ActiveRouteEvent, decision_fields, dispatch, retrieval_fields
from .retriever import LlamaIndexRetrieverAdapter

__all__ = ["EngineCall", "FixedRouter", "GenerationTrace"]

CallEvent = TokenEvent | Retrieval | RouteDecision | ActiveRAGResult | TriggerDecision


def _logprob(event: TokenEvent) -> LogProb:
    return LogProb(token=event.text, logprob=event.logprob, bytes=list(event.text.encode("utf-8")))


class GenerationTrace:
    """Turns one question's engine events into LlamaIndex LLM completion events (see the module docstring).

    ``model_dict`` identifies the LLM in the start events (``ActiveHFLLM.to_dict()``: class, model name,
    settings). :meth:`feed` it the engine's events in order (or call :meth:`token`, :meth:`retrieval`, :meth:`route`
    as the engine streams, then :meth:`close`). Where a completion begins and ends is
    :class:`~active_rag.event_segments.EventSegmenter`'s to say; this class dispatches its events.
    """

    def __init__(self, rag: ActiveRAG, question: str, model_dict: dict[str, Any]) -> None:
        self.rag = rag
        self.question = question
        self.model_dict = model_dict
        self.segments = EventSegmenter()
        self.prompt: str | None = None  # the open segment's prompt (None: no segment open)

    def segment_prompt(self, start: SegmentStart) -> str:
        """The text the model continued in the segment ``start`` begins: the chat template around the method's prompt
        with the segment's passages, then the answer accepted before it."""
        user = self.rag.prompt.render(self.question, list(start.passages))
        before, after = self.rag.model.chat_parts(user)
        return before + user + after + start.prefix

    def feed(self, event: CallEvent) -> None:
        """Dispatch the completion events that the engine's next ``event`` completes."""
        for segment_event in self.segments.feed(event):
            self._dispatch(segment_event)

    def token(self, event: TokenEvent) -> None:
        self.feed(event)

    def retrieval(self, retrieval: Retrieval) -> None:
        """The tokens from ``retrieval.position`` on are generated with these passages."""
        self.feed(retrieval)

    def route(self, decision: RouteDecision) -> None:
        """The router's own completion (its prompt, its raw output)."""
        self.feed(decision)

    def close(self) -> None:
        """End the open segment, if any (the end of the answer)."""
        for end in self.segments.close("end"):
            self._dispatch(end)

    def _dispatch(self, event: SegmentEvent) -> None:
        if isinstance(event, SegmentToken):
            assert self.prompt is not None
            token = event.token
            response = CompletionResponse(
                text=event.text,
                delta=token.text,
                logprobs=[[_logprob(token)]],
                additional_kwargs={"token_id": token.token_id, "entropy": token.entropy, "position": token.position},
            )
            dispatch(LLMCompletionInProgressEvent(prompt=self.prompt, response=response))
        elif isinstance(event, SegmentStart):
            self.prompt = self.segment_prompt(event)
            dispatch(
                LLMCompletionStartEvent(
                    prompt=self.prompt,
                    additional_kwargs={
                        "method": self.rag.method,
                        "segment": event.index,
                        "output_start": event.position,
                        "passage_ids": event.passage_ids,
                    },
                    model_dict=self.model_dict,
                )
            )
        elif isinstance(event, SegmentEnd):
            prompt, self.prompt = self.prompt, None
            assert prompt is not None
            response = CompletionResponse(
                text=event.text,
                logprobs=[[_logprob(t)] for t in event.tokens],
                additional_kwargs={"token_ids": event.token_ids, "entropies": event.entropies, "positions": event.positions},
            )
            dispatch(LLMCompletionEndEvent(prompt=prompt, response=response))
        elif isinstance(event, RouterCall):
            decision = event.decision
            dispatch(
                LLMCompletionStartEvent(
                    prompt=decision.prompt, additional_kwargs={"router": decision.router}, model_dict=self.model_dict
                )
            )
            response = CompletionResponse(text=decision.raw_output, additional_kwargs={"retrieve": decision.retrieve})
            dispatch(LLMCompletionEndEvent(prompt=decision.prompt, response=response))


class FixedRouter:
    """A router that returns a verdict already taken (the workflow's route step), so the engine applies
    it exactly as it applies its own router's (no retrieval at all when ``retrieve`` is false)."""

    def __init__(self, decision: RouteDecision) -> None:
        self.decision = decision

    def decide(self, question: str) -> RouteDecision:
        return self.decision


@dataclass
class EngineCall:
    """The engine run for one question and what it reports; build with :meth:`start`, iterate :meth:`events`.

    Everything of one call lives here: the engine copy and its retriever adapter, the retrievals, route and result
    so far, the LLM completion events (:attr:`trace`), the answer text a streaming response has sent
    (:meth:`answer_text`) with its ``source_nodes`` and ``metadata`` objects (:attr:`nodes`, :attr:`meta`: the
    same list and dict throughout, updated in place), and the fields of every decision dispatched, which the
    workflow streams as they are (:meth:`fields_of`)."""

    rag: ActiveRAG
    adapter: LlamaIndexRetrieverAdapter | None
    question: str
    retrievals: list[Retrieval] = field(default_factory=list)
    route: RouteDecision | None = None
    result: ActiveRAGResult | None = None
    accepted: int = 0  # output tokens accepted so far (the position of a non-firing decision)
    prompt_ids: list[str] | None = None  # the passages in the prompt of the latest token (None: no token yet)
    trace: GenerationTrace | None = None  # LLM instrumentation events (None: not reported)
    nodes: list[NodeWithScore] = field(default_factory=list)  # a streaming response's source_nodes, kept current
    meta: dict[str, Any] = field(default_factory=dict)  # a streaming response's metadata, kept current
    _answer: AnswerStream | None = field(default=None, repr=False)  # the streamed answer text (answer_text)
    _fields: dict[int, dict[str, Any]] = field(default_factory=dict, repr=False)  # id(decision) -> its fields
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
        swap: dict[str, Any] = {}
        if retriever is not None or adapter is not None:
            swap["retriever"] = retriever if retriever is not None else adapter
        if router is not None:
            swap["router"] = router
        rag = engine_for_call(base, **swap)
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
                    fields = self._fields[id(event)] = decision_fields(event, self.decision_position(event))
                    dispatch(ActiveRetrievalEvent(question=self.question, method=self.method, **fields))
                    yield event
                continue
            if self.trace is not None:
                self.trace.feed(event)  # the LLM completion events first, then the active-retrieval ones
            if isinstance(event, TokenEvent):
                self.accepted += 1
                if event.passage_ids is not None:
                    self.prompt_ids = list(event.passage_ids)
            elif isinstance(event, Retrieval):
                self.retrievals.append(event)
                fields = self._fields[id(event)] = retrieval_fields(event)
                dispatch(ActiveRetrievalEvent(question=self.question, method=self.method, **fields))
            elif isinstance(event, RouteDecision):
                self.route = event
                dispatch(ActiveRouteEvent.from_decision(event, question=self.question))
            elif isinstance(event, ActiveRAGResult):
                self.result = event
            yield event

    def decision_position(self, decision: TriggerDecision) -> int:
        """Output tokens before the segment a decision checked (``TriggerDecision.output_start`` when the
        engine sets it; otherwise the tokens accepted so far, which is the same number)."""
        start = getattr(decision, "output_start", None)
        return start if isinstance(start, int) else self.accepted

    def fields_of(self, event: Retrieval | TriggerDecision) -> dict[str, Any]:
        """The decision fields (:class:`~llamaindex_active_rag.events.DecisionFields`) dispatched for ``event``, one
        of this call's retrievals or non-firing decisions: what the workflow streams of it."""
        return dict(self._fields[id(event)])

    # -- what the LlamaIndex objects report -------------------------------------------------------
    def answer_text(self, event: CallEvent) -> str:
        """The answer text a streaming response sends after ``event`` (often ``""``): the pieces join to the
        engine's answer (:class:`~active_rag.answer_stream.AnswerStream`: only what the engine may still cut is held
        back). :attr:`nodes` and :attr:`meta` follow every other event."""
        if self._answer is None:
            self._answer = self.rag.answer_stream()
        if isinstance(event, TokenEvent):
            if event.passage_ids is not None and [n.node.node_id for n in self.nodes] != list(event.passage_ids):
                self.nodes[:] = self.source_nodes()  # a retrieval changed the prompt this token was written with
            return self._answer.push(event)
        self.nodes[:] = self.source_nodes()
        self.meta.update(self.metadata())
        return self._answer.finish(event.answer) if isinstance(event, ActiveRAGResult) else ""

    def source_nodes(self) -> list[NodeWithScore]:
        """The nodes of the prompt the model read, in its order: once the answer is known, that of its last segment
        (``ActiveRAGResult.source_passage_ids``: the passages the model read for its final answer); while it is
        written, that of the latest token (``TokenEvent.passage_ids``); before the first token, every passage
        retrieved so far. The user's own nodes (:meth:`LlamaIndexRetrieverAdapter.source_nodes`), each with its score."""
        if self.adapter is None:
            return []
        read: dict[str, Passage] = {}
        for r in self.retrievals:
            read.update((p.id, p) for p in r.passages if p.id not in read)
        if self.result is not None:
            ids: Sequence[str] = self.result.source_passage_ids
        elif self.prompt_ids is not None:
            ids = self.prompt_ids
        else:
            ids = list(read)
        return self.adapter.source_nodes([read[i] for i in ids if i in read])

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
            meta["source_passage_ids"] = self.result.source_passage_ids  # what source_nodes lists
        return meta

    def drain(self) -> None:
        """Run the engine to its end (a non-streaming query)."""
        for _ in self.events():
            pass
