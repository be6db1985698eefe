"""``ActiveRAGWorkflow``: active retrieval as a LlamaIndex Workflow (route -> generate -> retrieve -> answer).

Steps (all delegate to the engine; none reimplements the loop, a trigger or the router):

- ``route`` (``StartEvent(question=...)`` -> ``GenerateEvent``): asks the router (TA-ARE or vanilla, from
  ``active_rag.components.routing``) whether to retrieve at all and streams a :class:`RouteEvent`. Without a
  router it streams ``RouteEvent(retrieve=True, router="none")``: the trigger alone decides.
- ``generate`` (``GenerateEvent`` -> ``AnswerEvent``): runs ``ActiveRAG.stream`` for the question (in a
  worker thread), with the route step's verdict applied by the engine itself. It streams a
  :class:`TokenEvent` per accepted token and a :class:`RetrievalDecisionEvent` per trigger decision
  (``fired=False`` when the trigger let a segment through; ``fired=True`` once the retrieval it caused
  is done, with the query and the merged node ids).
- ``retrieve`` (``RetrieveEvent`` -> nothing): the engine's retriever, while this workflow runs, is a
  bridge that sends a :class:`RetrieveEvent` per query and waits; this step calls the LlamaIndex
  retriever (through :class:`~llamaindex_active_rag.LlamaIndexRetrieverAdapter`), streams a
  :class:`RetrievedEvent` and hands the passages back to the waiting engine.
- ``answer`` (``AnswerEvent`` -> ``StopEvent``): the result is a LlamaIndex ``Response`` exactly like
  ``ActiveRAGQueryEngine.query`` returns (answer, source nodes, retrieval trace in metadata).

>>> wf = ActiveRAGWorkflow(ActiveRAGQueryEngine(lm, retriever, preset="dragin"), router="ta-are")  # doctest: +SKIP
>>> handler = wf.run(question="Who was voted IFFHS World's Best Goalkeeper in 1992?")  # doctest: +SKIP
>>> async for ev in handler.stream_events(): print(type(ev).__name__)  # doctest: +SKIP
>>> response = await handler  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import uuid
from typing import Any

from llama_index.core.base.response.schema import Response
from llama_index.core.schema import NodeWithScore
from llama_index.core.workflow import Context, Event, StartEvent, StopEvent, Workflow, step

from active_rag._aio import run_in_thread
from active_rag.errors import EmptyQuestionError
from active_rag.engine import ActiveRAG, Router
from active_rag.components.routing import make_router
from active_rag.retrieval.name_index import NameIndex
from active_rag.types import Passage, Retrieval, RouteDecision, TriggerDecision
from active_rag.types import TokenEvent as EngineTokenEvent

from .engine_call import FixedRouter
from .events import DecisionFields
from .query_engine import ActiveRAGQueryEngine
from .retriever import LlamaIndexRetrieverAdapter

__all__ = [
    "ActiveRAGWorkflow",
    "AnswerEvent",
    "GenerateEvent",
    "RetrievalDecisionEvent",
    "RetrieveEvent",
    "RetrievedEvent",
    "RouteEvent",
    "TokenEvent",
]

_DONE = object()


# -- events ---------------------------------------------------------------------------------------
class RouteEvent(Event):
    """Streamed by ``route``: the router's verdict (``router="none"`` when no router is set)."""

    question: str
    retrieve: bool
    router: str
    raw_output: str = ""


class GenerateEvent(Event):
    """``route`` -> ``generate``: the question and the router's verdict, if any."""

    question: str
    retrieve: bool = True
    router: str | None = None
    raw_output: str = ""
    prompt: str = ""


class TokenEvent(Event):
    """Streamed by ``generate``: one output token accepted by the engine. ``attempt`` > 0: the answer written again
    from its first word (``reanswer``, an answer check), from ``position`` 0; a kept draft is streamed once more
    with its ``attempt`` 0 (see :class:`active_rag.TokenEvent`)."""

    text: str
    token_id: int
    logprob: float
    entropy: float
    position: int
    attempt: int = 0


class RetrievalDecisionEvent(DecisionFields, Event):
    """Streamed by ``generate``: one trigger decision (:class:`~llamaindex_active_rag.events.DecisionFields`)."""


class RetrieveEvent(Event):
    """``generate`` -> ``retrieve``: one query the engine needs passages for (sent by the retriever bridge)."""

    request_id: str
    query: str
    k: int


class RetrievedEvent(Event):
    """Streamed by ``retrieve``: the nodes the LlamaIndex retriever returned for one query."""

    query: str
    k: int
    node_ids: list[str]


class AnswerEvent(Event):
    """``generate`` -> ``answer``: the final answer with its source nodes and retrieval trace."""

    answer: str
    source_nodes: list[NodeWithScore]
    metadata: dict[str, Any]


# -- the retriever bridge -------------------------------------------------------------------------
class _Request:
    def __init__(self, adapter: LlamaIndexRetrieverAdapter) -> None:
        self.adapter = adapter
        self.future: concurrent.futures.Future[list[Passage]] = concurrent.futures.Future()


class WorkflowRetrieveStep:
    """The engine's retriever during a workflow run: each ``retrieve(query, k)`` (called from the engine's
    worker thread) becomes a :class:`RetrieveEvent` for the ``retrieve`` step, and waits for its answer."""

    def __init__(self, workflow: ActiveRAGWorkflow, ctx: Context, loop: asyncio.AbstractEventLoop) -> None:
        self._workflow = workflow
        self._ctx = ctx
        self._loop = loop
        self._mine: set[str] = set()
        self.adapter: LlamaIndexRetrieverAdapter | None = None

    def retrieve(self, query: str, k: int) -> list[Passage]:
        if self.adapter is None:  # pragma: no cover - set before the engine starts
            raise RuntimeError("The workflow's retriever bridge has no retriever.")
        request_id = uuid.uuid4().hex
        request = _Request(self.adapter)
        self._workflow._requests[request_id] = request
        self._mine.add(request_id)
        try:
            self._loop.call_soon_threadsafe(self._ctx.send_event, RetrieveEvent(request_id=request_id, query=query, k=k))
            return request.future.result()
        finally:
            self._workflow._requests.pop(request_id, None)
            self._mine.discard(request_id)

    @property
    def name_index(self) -> NameIndex | None:
        """The retriever's name index (:attr:`LlamaIndexRetrieverAdapter.name_index`), so that a linked look reads
        names there, as the query engine does, instead of sending one retrieve event per name."""
        return self.adapter.name_index if self.adapter is not None else None

    def cancel_pending(self) -> None:
        """Fail every request still waiting (the generate step stopped), so the worker thread ends."""
        for request_id in list(self._mine):
            request = self._workflow._requests.get(request_id)
            if request is not None and not request.future.done():
                request.future.set_exception(RuntimeError("The workflow stopped before the retrieve step answered."))


# -- the workflow ---------------------------------------------------------------------------------
class ActiveRAGWorkflow(Workflow):
    """Active retrieval as a Workflow: route -> generate -> retrieve (when triggered) -> answer.

    Args:
        engine: an :class:`~llamaindex_active_rag.ActiveRAGQueryEngine` (its LlamaIndex retriever is
            called by the ``retrieve`` step), or a configured ``active_rag.ActiveRAG``.
        router: ``"ta-are"``, ``"vanilla"``, a router object, or ``None`` to use the engine's router (if any).
        timeout: seconds before the run is abandoned (``None``: no limit); ``verbose``: print step transitions.

    Run with ``handler = wf.run(question=...)``; stream with ``handler.stream_events()`` (RouteEvent,
    TokenEvent, RetrievedEvent, RetrievalDecisionEvent, then the StopEvent); ``await handler`` gives
    the ``Response``. Engine errors (``EmptyQuestionError``, ``RetrieverError``...) are raised by ``await handler``.
    """

    def __init__(
        self,
        engine: ActiveRAGQueryEngine | ActiveRAG,
        *,
        router: str | Router | None = None,
        timeout: float | None = 300.0,
        verbose: bool = False,
    ) -> None:
        super().__init__(timeout=timeout, verbose=verbose)
        if isinstance(engine, ActiveRAG):
            engine = ActiveRAGQueryEngine.from_engine(engine)
        if not isinstance(engine, ActiveRAGQueryEngine):
            raise TypeError(f"ActiveRAGWorkflow needs an ActiveRAGQueryEngine or an ActiveRAG, got {type(engine).__name__}.")
        self.engine = engine
        if isinstance(router, str):
            router = make_router(router, engine.rag.model)
        self.router: Router | None = router if router is not None else engine.rag.router
        self._requests: dict[str, _Request] = {}

    @step
    async def route(self, ctx: Context, ev: StartEvent) -> GenerateEvent:
        """Decide whether to retrieve at all (TA-ARE / vanilla router), stream a RouteEvent."""
        question = ev.get("question")
        if not isinstance(question, str) or not question.strip():
            raise EmptyQuestionError()
        question = question.strip()
        if self.router is None:
            ctx.write_event_to_stream(RouteEvent(question=question, retrieve=True, router="none"))
            return GenerateEvent(question=question)
        decision = await run_in_thread(self.router.decide, question)
        ctx.write_event_to_stream(
            RouteEvent(question=question, retrieve=decision.retrieve, router=decision.router, raw_output=decision.raw_output)
        )
        return GenerateEvent(
            question=question,
            retrieve=decision.retrieve,
            router=decision.router,
            raw_output=decision.raw_output,
            prompt=decision.prompt,
        )

    @step
    async def generate(self, ctx: Context, ev: GenerateEvent) -> AnswerEvent | RetrieveEvent:
        """Run the engine loop; stream tokens and trigger decisions. Retrievals go to the retrieve step."""
        loop = asyncio.get_running_loop()
        bridge = WorkflowRetrieveStep(self, ctx, loop)
        router = None
        if ev.router is not None:
            router = FixedRouter(RouteDecision(retrieve=ev.retrieve, router=ev.router, raw_output=ev.raw_output, prompt=ev.prompt))
        has_retriever = self.engine.rag.retriever is not None
        call = self.engine.start_call(ev.question, retriever=bridge if has_retriever else None, router=router)
        bridge.adapter = call.adapter
        events = call.events()
        # One item per worker-thread call (not aiter_in_thread's run-ahead worker): while the engine waits in
        # the retriever bridge, a stopped step must fail the pending request (finally) before anything awaits
        # that worker, or the two would wait for each other.
        try:
            while (event := await run_in_thread(next, events, _DONE)) is not _DONE:
                if isinstance(event, EngineTokenEvent):
                    ctx.write_event_to_stream(
                        TokenEvent(text=event.text, token_id=event.token_id, logprob=event.logprob, entropy=event.entropy,
                                   position=event.position, attempt=event.attempt)
                    )
                elif isinstance(event, (Retrieval, TriggerDecision)):  # the fields its instrumentation event had
                    ctx.write_event_to_stream(RetrievalDecisionEvent(**call.fields_of(event)))
        finally:
            bridge.cancel_pending()
        assert call.result is not None
        return AnswerEvent(answer=call.result.answer, source_nodes=call.source_nodes(), metadata=call.metadata())

    @step
    async def retrieve(self, ctx: Context, ev: RetrieveEvent) -> None:
        """Call the LlamaIndex retriever for one engine query and hand the passages back to the engine."""
        request = self._requests.get(ev.request_id)
        if request is None or request.future.done():
            return None
        try:
            passages = await run_in_thread(request.adapter.retrieve, ev.query, ev.k)
        except Exception as exc:  # the engine raises it as a RetrieverError naming the query
            if not request.future.done():
                request.future.set_exception(exc)
            return None
        if isinstance(passages, list):
            node_ids = [p.id for p in passages if isinstance(p, Passage)]
            ctx.write_event_to_stream(RetrievedEvent(query=ev.query, k=ev.k, node_ids=node_ids))
        if not request.future.done():
            request.future.set_result(passages)
        return None

    @step
    async def answer(self, ctx: Context, ev: AnswerEvent) -> StopEvent:
        """Package the answer as a LlamaIndex Response (same shape as ActiveRAGQueryEngine.query)."""
        return StopEvent(result=Response(response=ev.answer, source_nodes=ev.source_nodes, metadata=ev.metadata))
