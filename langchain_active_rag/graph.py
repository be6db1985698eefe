"""Active retrieval as a LangGraph graph: the engine's methods (FLARE, DRAGIN, TA-ARE, ...) as nodes a user can rewire.

>>> graph = build_graph(ActiveLM.load("smollm2"), retriever, preset="dragin")          # doctest: +SKIP
>>> graph.invoke({"question": "Who was the father of Kasper Schmeichel?"})["answer"]  # doctest: +SKIP

The prebuilt graph (:func:`build_graph`; its nodes and edges are the methods of :class:`ActiveRAGNodes`)::

    START -> route --(retrieve)-----> generate --(a retriever call)--> retrieve --> generate
                   \\--(answer alone)--> answer <--(the engine's result)-- generate
    answer --(a retriever call)--> retrieve;  answer --> END

- ``route``: TA-ARE (Zhang et al. 2024, §4) or the vanilla router, when the configuration has one (``router="ta-are"``):
  the engine's router decides, before any token, whether the question needs retrieval at all; the conditional edge
  sends the question to ``generate`` (the method's triggers armed) or to ``answer`` alone (no retrieval).
- ``generate``: runs the engine (its trigger loop: FLARE §3, DRAGIN §3.3, ...) until a trigger fires and the query
  formulator's query is ready, which the state's ``query`` then holds, or until the engine's answer is ready. A
  retriever call the engine makes in its answer stage (an answer check that looks again, a linked look) comes the
  same way.
- ``retrieve``: calls the LangChain retriever with ``query`` (with ``interrupt_before_retrieval=True`` a human first
  approves or edits it: :func:`langgraph.types.interrupt`) and writes the passages to ``retrieved``; ``generate``
  hands them to the engine, so a node put between the two (a grader, a filter) changes what the engine reads.
- ``answer``: the engine's final answer, its answer span and the passages it was read from; answers alone when the
  route said so.

One engine run per question: it lives in the process (:mod:`langchain_active_rag.live_run`), keyed by the state's
``run_id``, so the KV session stays with the run and nothing the model read is prefilled again when the graph goes on
after a retrieval. The state is plain JSON (checkpointers save it); the run's session is not: a graph resumed in
another process raises :class:`~langchain_active_rag.live_run.LiveRunGoneError`, and one resumed from a checkpoint
the run has gone past raises :class:`~langchain_active_rag.live_run.LiveRunMismatchError`.

Streaming: ``stream_mode="messages"`` yields the answer's tokens as the engine accepts them, as chat-model message
chunks (one chat run per segment between retrievals, with logprobs: :mod:`langchain_active_rag.tracing`; the
router's own generation is tagged ``nostream``); ``"updates"`` each node's update (the query, the passages
retrieved, the trigger decisions and the engine's retrieval records); ``"custom"`` ``{"answer": text}`` pieces that
join to the final answer (:class:`~active_rag.answer_stream.AnswerStream`: they hold back what the engine may still
cut). The configuration is a :class:`langchain_active_rag.ActiveRAG`, so ``config["configurable"]`` switches
``preset``, ``trigger``, ``top_k``, ... per call as it does there.
"""

from __future__ import annotations

import json
import operator
import uuid
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal

from langchain_core.documents import Document
from langchain_core.runnables import RunnableConfig
from typing_extensions import TypedDict

from active_rag._optional import require

require("langgraph", extra="langgraph", purpose="langchain_active_rag.graph")

from langgraph.constants import END, START, TAG_NOSTREAM  # noqa: E402
from langgraph.graph import StateGraph  # noqa: E402
from langgraph.types import Overwrite, interrupt  # noqa: E402

from active_rag import ActiveRAGResult, Passage, Retrieval, RouteDecision, TokenEvent, TriggerDecision  # noqa: E402
from active_rag.answer_stream import AnswerStream  # noqa: E402
from active_rag.validation import check_question  # noqa: E402

from ._convert import document_id, document_to_passage  # noqa: E402
from .adapter import adapt  # noqa: E402
from .chain import ActiveRAG  # noqa: E402
from .events import route_dict  # noqa: E402
from .live_run import LiveRun, LiveRunGoneError, LiveRunMismatchError, LiveRuns, RetrieverCall  # noqa: E402
from .tracing import GenerationTracer  # noqa: E402

__all__ = [
    "ActiveRAGNodes",
    "ActiveRAGState",
    "LiveRunGoneError",
    "LiveRunMismatchError",
    "build_graph",
    "source_documents",
]


def _merge_passages(left: list[dict[str, Any]] | None, right: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The ``passages`` reducer: every passage handed to the engine, once, in the order first handed."""
    out = list(left or [])
    seen = {p.get("id") for p in out}
    for p in right or []:
        if p.get("id") not in seen:
            seen.add(p.get("id"))
            out.append(p)
    return out


class ActiveRAGState(TypedDict, total=False):
    """The graph's state: plain JSON, so any checkpointer saves it.

    The input is ``{"question": ...}``; the rest is written by the nodes. ``decisions``, ``retrievals``, ``calls`` and
    ``passages`` accumulate over one question (a new question on the same thread starts them again)."""

    question: str
    run_id: str
    """The key of the question's engine run in the nodes' registry (:class:`~langchain_active_rag.live_run.LiveRuns`)."""
    run_step: int
    """How many steps the nodes have advanced the run (a node resumed from an older checkpoint is refused)."""
    route: dict[str, Any] | None
    """The router's verdict (``retrieve``, ``router``, ``raw_output``); ``None`` without a router."""
    query: str | None
    """The query the engine waits for passages for (the query formulator's; a human's edit once ``retrieve`` ran);
    ``None`` when it waits for none."""
    k: int | None
    """How many passages the engine asked for with ``query``."""
    retrieved: list[dict[str, Any]] | None
    """The passages ``retrieve`` found for ``query`` (``Passage.to_dict()``), handed to the engine by the next node
    that advances it."""
    calls: Annotated[list[dict[str, Any]], operator.add]
    """Every retriever call: the engine's ``query``, the query ``sent`` to the retriever, ``k`` and the ``passage_ids``."""
    decisions: Annotated[list[dict[str, Any]], operator.add]
    """Every trigger decision, fired or not (``TriggerDecision.to_dict()``)."""
    retrievals: Annotated[list[dict[str, Any]], operator.add]
    """The engine's record of each retrieval (``Retrieval.to_dict()``), with the ``retriever_queries`` it sent."""
    passages: Annotated[list[dict[str, Any]], _merge_passages]
    """Every passage handed to the engine, once each."""
    answer: str
    short_answer: str
    sources: list[dict[str, Any]]
    """The passages the final answer was read from (``ActiveRAGResult.source_passage_ids``)."""
    result: dict[str, Any] | None
    """``ActiveRAGResult.to_dict()`` of the finished run."""


def source_documents(state: ActiveRAGState) -> list[Document]:
    """The state's ``sources`` as LangChain Documents (``id``, ``metadata`` with ``title`` and ``score``)."""
    return [Document(page_content=p["text"], id=p["id"],
                     metadata={**(p.get("metadata") or {}), "id": p["id"], "title": p.get("title", ""),
                               **({"score": p["score"]} if p.get("score") is not None else {})})
            for p in state.get("sources") or []]


def _jsonable(value: Any) -> Any:
    """``value`` as plain JSON types (what a checkpointer saves); anything else becomes its ``str``."""
    return json.loads(json.dumps(value, default=str))


def _passage(data: dict[str, Any] | str | Passage | Document) -> Passage:
    """An engine passage from what a node wrote to ``retrieved``: a ``Passage.to_dict()`` (``id`` optional), a
    text, a LangChain Document or a Passage. Without an id, the id is a hash of the text (as for a Document)."""
    if isinstance(data, Passage):
        return data
    if isinstance(data, str):
        data = {"text": data}
    if isinstance(data, Document):
        return document_to_passage(data)
    text = str(data["text"])
    return Passage(id=str(data.get("id") or document_id(Document(page_content=text))), text=text,
                   title=str(data.get("title") or ""), score=data.get("score"), metadata=dict(data.get("metadata") or {}))


def _stream_writer() -> Callable[[Any], None]:
    """The node's ``custom`` stream writer (a no-op outside a graph)."""
    try:
        from langgraph.config import get_stream_writer

        return get_stream_writer()
    except (RuntimeError, KeyError):
        return lambda _: None


def _reviewed(reply: Any, query: str) -> tuple[str, list[Passage] | None]:
    """The query to retrieve with, and passages a human gave instead of a retrieval, from an interrupt's resume value:
    ``True`` (or ``None``): approved as it is; a string: the edited query; ``False``: no passages; a mapping with
    ``query`` and/or ``passages`` (dicts as ``Passage.to_dict()`` gives, or texts)."""
    if reply is None or reply is True:
        return query, None
    if reply is False:
        return query, []
    if isinstance(reply, str):
        return (reply.strip() or query), None
    if isinstance(reply, dict):
        edited = str(reply.get("query") or query).strip() or query
        given = reply.get("passages")
        return edited, None if given is None else [_passage(p) for p in given]
    raise TypeError(f"Resume a retrieval with None/True (approve), False (skip), a query string or "
                    f"{{'query': ..., 'passages': [...]}}; got {type(reply).__name__}.")


class ActiveRAGNodes:
    """The nodes and edges of the active retrieval graph, over one configuration (see the module docstring).

    ``rag`` is a :class:`langchain_active_rag.ActiveRAG` (the model, the LangChain retriever and the method: a preset
    and its overrides); each question builds its engine from it, with the call's ``configurable`` settings.
    ``interrupt_before_retrieval``: ``retrieve`` asks a human first (resume with
    ``Command(resume=True | False | "edited query" | {"query": ..., "passages": [...]})``: approve, skip the
    retrieval, retrieve with an edited query, or hand the engine a human's passages; needs a checkpointer). The
    interrupt's value is ``{"question", "query", "k", "decision"}``: the fired trigger decision the query comes
    from, ``None`` for the retrieval with the input or one of the answer stage. ``max_live``: engine runs kept alive
    at once (:class:`~langchain_active_rag.live_run.LiveRuns`).

    Every node is ``node(state, config) -> update``; :meth:`add_to` puts them and their edges in a ``StateGraph`` over
    :class:`ActiveRAGState` (or a state that extends it), :meth:`compile` builds the prebuilt graph."""

    NODES = ("route", "generate", "retrieve", "answer")

    def __init__(self, rag: ActiveRAG, *, interrupt_before_retrieval: bool = False, max_live: int = 32) -> None:
        if not isinstance(rag, ActiveRAG):
            raise TypeError(f"ActiveRAGNodes needs a langchain_active_rag.ActiveRAG, got {type(rag).__name__}.")
        self.rag = rag
        self.interrupt_before_retrieval = interrupt_before_retrieval
        self.runs = LiveRuns(max_live)

    # -- the nodes -----------------------------------------------------------------------------------------------
    def route(self, state: ActiveRAGState, config: RunnableConfig) -> dict[str, Any]:
        """Start the question's engine run; with a router (TA-ARE, vanilla), the engine's first step is its decision
        whether to retrieve at all. A new question on a thread closes the thread's earlier run if it is still live."""
        question = check_question(state.get("question"))
        if state.get("run_id"):
            self.runs.close(state["run_id"])
        run_id = uuid.uuid4().hex
        source = adapt(self.rag.retriever, None, pass_k=self.rag.pass_k) if self.rag.retriever is not None else None
        live = self.runs.add(LiveRun(run_id, question, lambda retriever: self.rag.build_engine(retriever, config), source))
        engine = live.engine
        live.extras.update(
            tracer=GenerationTracer(None, engine.model, engine.prompt, question, max_new_tokens=engine.max_new_tokens,
                                    prompt_mode=getattr(engine, "prompt_mode", "single")),
            stream=engine.answer_stream(), read={}, sent=[],
        )
        update: dict[str, Any] = {
            "run_id": run_id, "run_step": 0, "route": None, "query": None, "k": None, "retrieved": None,
            "calls": Overwrite([]), "decisions": Overwrite([]), "retrievals": Overwrite([]), "passages": Overwrite([]),
            "answer": "", "short_answer": "", "sources": [], "result": None,
        }
        if engine.router is not None:
            tracer: GenerationTracer = live.extras["tracer"]
            tracer.rebind({**config, "tags": [*(config.get("tags") or []), TAG_NOSTREAM]})  # not an answer token
            try:
                event = live.step()
            except BaseException:
                self.runs.close(run_id)
                raise
            live.step_count += 1
            if not isinstance(event, RouteDecision):  # pragma: no cover - the engine's first event with a router
                raise RuntimeError(f"expected the router's decision first, got {type(event).__name__}")
            tracer.route(event)
            tracer.rebind(None)
            update.update(route=_jsonable(route_dict(event)), run_step=live.step_count)
        return update

    def generate(self, state: ActiveRAGState, config: RunnableConfig) -> dict[str, Any]:
        """Advance the engine (hand it the ``retrieved`` passages if it waits for them) until it calls its retriever
        (``query`` set) or its answer is ready; stream its tokens and record its decisions and retrievals."""
        return self._advance(self._live(state), state, config)

    def retrieve(self, state: ActiveRAGState, config: RunnableConfig) -> dict[str, Any]:
        """Call the LangChain retriever with ``query`` (after a human's review with ``interrupt_before_retrieval``);
        write its passages to ``retrieved``. The retriever's run is a child of this node's."""
        live = self._live(state)
        if live.pending is None or state.get("query") is None:
            raise LiveRunMismatchError(f"The engine run {live.run_id!r} waits for no passages: nothing to retrieve.")
        query, k = str(state["query"]), int(state.get("k") or live.pending.k)
        given = None
        if self.interrupt_before_retrieval:
            reply = interrupt({"question": state.get("question"), "query": query, "k": k,
                               "decision": live.extras.get("decision")})
            query, given = _reviewed(reply, query)
        if given is None:
            source = live.retriever.source
            if source is None:
                raise ValueError("This graph has no retriever: build it with retriever=... (any LangChain retriever), "
                                 "or replace its retrieve node with one that writes `retrieved` for `query`.")
            source.config = config  # the retriever's run: a child of this node's
            try:
                given = source.retrieve(query, k)
            except Exception as exc:  # the engine names it (RetrieverError, the query, the cause) and stops
                self._fail(live, exc)
                raise
            finally:
                source.config = None  # the run outlives the node: it keeps nothing of the node's run
        return {"query": query, "k": k, "retrieved": [_jsonable(p.to_dict()) for p in given]}

    def answer(self, state: ActiveRAGState, config: RunnableConfig) -> dict[str, Any]:
        """The engine's final answer (its answer stage: a forced answer phrase, an answer check, options, settled
        dates) with its answer span and the passages it was read from. When the route said to answer alone, the
        engine writes the whole answer here, without retrieval."""
        live = self._live(state)
        update: dict[str, Any] = {}
        if live.result is None:
            update = self._advance(live, state, config)
            if live.result is None:  # the answer stage calls the retriever: after_answer -> retrieve
                return update
        result: ActiveRAGResult = live.result
        rest = live.extras["stream"].finish(result.answer)
        if rest:
            _stream_writer()({"answer": rest})
        read: dict[str, Passage] = live.extras["read"]
        sources = [read[i] for i in result.source_passage_ids if i in read]
        self.runs.pop(live.run_id)
        update.update(answer=result.answer, short_answer=result.short_answer, query=None, k=None, retrieved=None,
                      sources=[_jsonable(p.to_dict()) for p in sources], result=_jsonable(result.to_dict()))
        return update

    # -- the conditional edges -------------------------------------------------------------------------------------
    @staticmethod
    def after_route(state: ActiveRAGState) -> Literal["generate", "answer"]:
        """``generate`` unless the router said the question needs no retrieval (then ``answer`` alone)."""
        route = state.get("route")
        return "answer" if route is not None and not route.get("retrieve", True) else "generate"

    @staticmethod
    def after_generate(state: ActiveRAGState) -> Literal["retrieve", "answer"]:
        """``retrieve`` when the engine waits for passages for ``query``, else ``answer``."""
        return "retrieve" if state.get("query") is not None else "answer"

    @staticmethod
    def after_answer(state: ActiveRAGState) -> Literal["retrieve", "__end__"]:
        """``retrieve`` when the engine's answer stage waits for passages, else the end."""
        return "retrieve" if state.get("query") is not None else END

    # -- building --------------------------------------------------------------------------------------------------
    def add_to(self, builder: StateGraph) -> StateGraph:
        """Add the four nodes and their edges to ``builder`` (a ``StateGraph`` over :class:`ActiveRAGState`, or over a
        state that extends it) and return it, to rewire before compiling."""
        for name in self.NODES:
            builder.add_node(name, getattr(self, name))
        builder.add_edge(START, "route")
        builder.add_conditional_edges("route", self.after_route)
        builder.add_conditional_edges("generate", self.after_generate)
        builder.add_edge("retrieve", "generate")
        builder.add_conditional_edges("answer", self.after_answer)
        return builder

    def compile(self, checkpointer: Any = None, *, name: str = "active_rag", **compile_kwargs: Any) -> Any:
        """The prebuilt graph, compiled (``checkpointer``, ``interrupt_before=["retrieve"]``, ... as
        ``StateGraph.compile`` takes them)."""
        builder = self.add_to(StateGraph(ActiveRAGState))
        return builder.compile(checkpointer=checkpointer, name=name, **compile_kwargs)

    def close(self, run_id: str | None = None) -> None:
        """Close the engine run ``run_id`` (``None``: all) and let go of its KV session: for a thread whose interrupt
        will never be answered."""
        self.runs.close(run_id)

    # -- internals -------------------------------------------------------------------------------------------------
    def _live(self, state: ActiveRAGState) -> LiveRun:
        return self.runs.get(state.get("run_id"), state.get("run_step"))

    def _fail(self, live: LiveRun, exc: BaseException) -> None:
        """Hand a retriever's failure to the engine, which raises its own error for it; the run is over."""
        try:
            live.answer(exc)
            live.step()
        except Exception as engine_error:  # the engine's RetrieverError, caused by exc
            raise engine_error from exc
        finally:
            self.runs.pop(live.run_id)

    def _advance(self, live: LiveRun, state: ActiveRAGState, config: RunnableConfig) -> dict[str, Any]:
        extras = live.extras
        tracer: GenerationTracer = extras["tracer"]
        stream: AnswerStream = extras["stream"]
        write = _stream_writer()
        update: dict[str, Any] = {"query": None, "k": None, "retrieved": None, "calls": [], "decisions": [],
                                  "retrievals": [], "passages": []}
        if live.pending is not None:
            retrieved = state.get("retrieved")
            if retrieved is None:
                raise ValueError(f"The engine waits for passages for {live.pending.query!r}, and the state has none: "
                                 "a retrieve node writes them to `retrieved` before the engine goes on.")
            asked, sent = live.pending, str(state.get("query") or live.pending.query)
            passages = [_passage(p) for p in retrieved]
            live.answer(passages)
            extras["sent"].append(sent)
            update["calls"].append({"query": asked.query, "sent": sent, "k": asked.k,
                                    "passage_ids": [p.id for p in passages]})
            update["passages"] = [_jsonable(p.to_dict()) for p in passages]
        tracer.rebind(config)
        try:
            while True:
                event = live.step()
                if isinstance(event, RetrieverCall):
                    update.update(query=event.query, k=event.k)
                    break
                if isinstance(event, TokenEvent):
                    tracer.token(event)
                    delta = stream.push(event)
                    if delta:
                        write({"answer": delta})
                elif isinstance(event, TriggerDecision):
                    update["decisions"].append(_jsonable(event.to_dict()))
                    extras["decision"] = update["decisions"][-1] if event.fire else None
                elif isinstance(event, Retrieval):
                    tracer.retrieval(event)
                    extras["read"].update((p.id, p) for p in event.passages if p.id not in extras["read"])
                    record = {**event.to_dict(), "retriever_queries": list(extras["sent"])}
                    extras["sent"].clear()
                    extras["decision"] = None
                    update["retrievals"].append(_jsonable(record))
                elif isinstance(event, RouteDecision):  # a graph rewired without the route node
                    update["route"] = _jsonable(route_dict(event))
                elif isinstance(event, ActiveRAGResult):
                    tracer.finish()
                    live.result = event
                    break
        except BaseException as exc:
            tracer.error(exc)
            self.runs.close(live.run_id)
            raise
        live.step_count += 1
        tracer.rebind(None)
        update["run_step"] = live.step_count
        return update


def build_graph(
    model: Any = None,
    retriever: Any = None,
    *,
    preset: str | None = None,
    rag: ActiveRAG | None = None,
    interrupt_before_retrieval: bool = False,
    checkpointer: Any = None,
    max_live: int = 32,
    interrupt_before: Sequence[str] | None = None,
    name: str = "active_rag",
    **options: Any,
) -> Any:
    """The prebuilt active retrieval graph (see the module docstring), compiled.

    ``model`` (an :class:`active_rag.ActiveLM`, a ``ChatActiveHF`` or a registry name), ``retriever`` (any LangChain
    retriever, or an :class:`active_rag.BM25Index`), ``preset`` (:data:`active_rag.PRESETS`) and ``options`` (any
    keyword of :class:`langchain_active_rag.ActiveRAG`: ``router="ta-are"``, ``trigger=``, ``top_k=``,
    ``max_new_tokens=``, ``engine_options=``, ...) build the configuration; or pass one as ``rag``.
    ``interrupt_before_retrieval`` asks a human before each retrieval (:class:`ActiveRAGNodes`); ``checkpointer``
    (e.g. ``langgraph.checkpoint.memory.MemorySaver()``) and ``interrupt_before`` (e.g. ``["retrieve"]``: a static
    breakpoint; edit ``query`` with ``graph.update_state``) go to ``StateGraph.compile``."""
    if rag is None:
        rag = ActiveRAG(model, retriever, preset=preset, **options)
    elif model is not None or retriever is not None or preset is not None or options:
        raise TypeError("Pass either rag=ActiveRAG(...) or the model, retriever, preset and options that build one.")
    nodes = ActiveRAGNodes(rag, interrupt_before_retrieval=interrupt_before_retrieval, max_live=max_live)
    kwargs: dict[str, Any] = {"interrupt_before": list(interrupt_before)} if interrupt_before else {}
    return nodes.compile(checkpointer, name=name, **kwargs)
