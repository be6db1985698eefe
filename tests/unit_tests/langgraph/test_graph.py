"""The prebuilt LangGraph graph (``langchain_active_rag.graph``, issue 66 item 1) on the tiny random model: the engine's
answers and retrieval decisions for every preset, no second prefill after a retrieval, token streaming, ``astream``,
``batch``, checkpointers, and a human who approves or edits a retrieval's query."""

from __future__ import annotations

import asyncio
import gc
import json
import threading
from typing import Any

import pytest

pytest.importorskip("langgraph")

from langchain_core.messages import AIMessageChunk  # noqa: E402
from langgraph.checkpoint.memory import MemorySaver  # noqa: E402
from langgraph.graph import StateGraph  # noqa: E402
from langgraph.types import Command  # noqa: E402

from active_rag import ActiveRAG as Engine  # noqa: E402
from active_rag import RouteDecision, make_router  # noqa: E402
from active_rag.errors import EmptyQuestionError, RetrieverError  # noqa: E402
from active_rag.components.presets import PRESETS  # noqa: E402
from langchain_active_rag import ActiveRAG  # noqa: E402
from langchain_active_rag.graph import (  # noqa: E402
    ActiveRAGNodes,
    ActiveRAGState,
    LiveRunGoneError,
    LiveRunMismatchError,
    build_graph,
    source_documents,
)

QUESTION = "Who is Peter Schmeichel?"
N = 24  # tokens an answer: every preset retrieves at least once on the random model within them (but wo-rag, self-ask)


def thread(name: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": name}}


def engine_record(result) -> dict[str, Any]:  # noqa: ANN001
    return {
        "answer": result.answer,
        "short_answer": result.short_answer,
        "decisions": [d.to_dict() for d in result.decisions],
        "retrievals": [r.to_dict() for r in result.retrievals],
        "tokens": result.generated_tokens,
        "prompt_tokens": (result.cached_prompt_tokens, result.prefilled_prompt_tokens),
        "sources": result.source_passage_ids,
    }


def graph_record(state: dict[str, Any]) -> dict[str, Any]:
    return {
        "answer": state["answer"],
        "short_answer": state["short_answer"],
        "decisions": state["decisions"],
        "retrievals": [{k: v for k, v in r.items() if k != "retriever_queries"} for r in state["retrievals"]],
        "tokens": state["result"]["generated_tokens"],
        "prompt_tokens": (state["result"]["prompt_tokens"]["cached"], state["result"]["prompt_tokens"]["prefilled"]),
        "sources": [p["id"] for p in state["sources"]],
    }


def discrete(record: dict[str, Any]) -> dict[str, Any]:
    """A record without the signals' floats: questions decoded together (``batch``) share batched forward passes,
    whose floats differ from a lone run's in the last bits (the tokens and decisions do not)."""
    return {**record, "decisions": [(d["fire"], d["index"], d["token"]) for d in record["decisions"]],
            "retrievals": [(r["position"], r["query"], r["passage_ids"]) for r in record["retrievals"]]}


@pytest.mark.parametrize("preset", list(PRESETS))
def test_the_graph_answers_and_decides_as_the_engine_does(graph_lm, bm25, preset) -> None:
    """Every preset: the same answer, trigger decisions and retrievals as ``ActiveRAG.from_preset(...).run``, and the
    same prompt tokens read, cached and prefilled: the graph's run keeps its KV session across its retrievals (nothing
    is prefilled again when it goes on after one)."""
    engine = Engine.from_preset(preset, graph_lm, bm25.index, max_new_tokens=N).run(QUESTION)
    steps: list[str] = []
    state: dict[str, Any] = {}
    graph = build_graph(graph_lm, bm25, preset=preset, max_new_tokens=N)
    for mode, chunk in graph.stream({"question": QUESTION}, stream_mode=["updates", "values"]):
        if mode == "updates":
            steps.extend(chunk)
        else:
            state = chunk
    assert graph_record(state) == engine_record(engine)
    assert steps.count("retrieve") == len(bm25.queries) == engine.retriever_calls  # a node per retriever call
    assert [c["query"] for c in state["calls"]] == bm25.queries
    assert steps[0] == "route" and steps[-1] == "answer"
    if preset not in ("wo-rag", "self-ask"):
        assert engine.retrievals and "retrieve" in steps
    json.dumps(state)  # plain JSON: any checkpointer saves it


def test_ta_are_routes_as_the_engine_does(graph_lm, bm25) -> None:
    engine = Engine.from_preset("dragin", graph_lm, bm25.index, max_new_tokens=N,
                                router=make_router("ta-are", graph_lm, today="2024-06-01")).run(QUESTION)
    router = make_router("ta-are", graph_lm, today="2024-06-01")
    state = build_graph(graph_lm, bm25, preset="dragin", max_new_tokens=N, router=router).invoke({"question": QUESTION})
    assert state["route"]["retrieve"] == engine.route.retrieve and state["route"]["raw_output"] == engine.route.raw_output
    assert graph_record(state) == engine_record(engine)


class FixedRouter:
    def __init__(self, retrieve: bool) -> None:
        self.retrieve = retrieve

    def decide(self, question: str) -> RouteDecision:
        return RouteDecision(retrieve=self.retrieve, router="fixed", raw_output="[Yes]" if self.retrieve else "[No]")


@pytest.mark.parametrize("retrieve", [True, False])
def test_the_route_edge_answers_alone_or_retrieves(graph_lm, bm25, retrieve) -> None:
    graph = build_graph(graph_lm, bm25, preset="fl-rag", max_new_tokens=N, router=FixedRouter(retrieve))
    steps = [node for chunk in graph.stream({"question": QUESTION}, stream_mode="updates") for node in chunk]
    engine = Engine.from_preset("fl-rag", graph_lm, bm25.index, max_new_tokens=N, router=FixedRouter(retrieve)).run(QUESTION)
    if retrieve:
        assert steps[:4] == ["route", "generate", "retrieve", "generate"] and engine.retrievals
    else:
        assert steps == ["route", "answer"] and not engine.retrievals and not bm25.queries
    state = graph.invoke({"question": QUESTION})
    assert graph_record(state) == engine_record(engine)


def test_messages_stream_tokens_before_generation_ends(graph_lm, bm25, generated) -> None:
    """``stream_mode="messages"``: the answer's tokens as chat message chunks of the generate node, the first one before
    the model has written the answer; ``"custom"``: pieces that join to the answer; ``"updates"``: the retrieval."""
    graph = build_graph(graph_lm, bm25, preset="sr-rag", max_new_tokens=12)
    first_at, tokens, pieces, nodes = None, [], [], []
    final: dict[str, Any] = {}
    for mode, chunk in graph.stream({"question": QUESTION}, stream_mode=["messages", "custom", "updates", "values"]):
        if mode == "messages":
            message, meta = chunk
            assert isinstance(message, AIMessageChunk) and meta["langgraph_node"] == "generate"
            if first_at is None:
                first_at = generated[0]
            tokens.append(message.content)
            assert message.response_metadata["logprobs"]["content"][0]["logprob"] <= 0
        elif mode == "custom":
            pieces.append(chunk["answer"])
        elif mode == "updates":
            nodes.extend(chunk)
            if "retrieve" in chunk:
                assert chunk["retrieve"]["query"] == QUESTION and len(chunk["retrieve"]["retrieved"]) == 3
        else:
            final = chunk
    assert first_at is not None and first_at < generated[0]  # streamed while generating, not after
    assert "".join(tokens) == "".join(t.text for t in Engine.from_preset(
        "sr-rag", graph_lm, bm25.index, max_new_tokens=12).run(QUESTION).tokens)
    assert "".join(pieces) == final["answer"]
    assert nodes == ["route", "generate", "retrieve", "generate", "answer"]


def test_the_router_is_not_an_answer_token(graph_lm, bm25) -> None:
    graph = build_graph(graph_lm, bm25, preset="wo-rag", max_new_tokens=6, router=FixedRouter(True))
    graph_ta = build_graph(graph_lm, bm25, preset="wo-rag", max_new_tokens=6, router="ta-are")
    for g in (graph, graph_ta):
        nodes = {meta["langgraph_node"] for _, meta in g.stream({"question": QUESTION}, stream_mode="messages")}
        assert nodes <= {"generate", "answer"} and nodes


def test_astream_and_batch(graph_lm, bm25, generated) -> None:
    questions = [QUESTION, "Were Scott Derrickson and Ed Wood of the same nationality?"]
    engine = [engine_record(Engine.from_preset("flare", graph_lm, bm25.index, max_new_tokens=N).run(q)) for q in questions]
    graph = build_graph(graph_lm, bm25, preset="flare", max_new_tokens=N)
    batched = graph.batch([{"question": q} for q in questions])
    assert [discrete(graph_record(s)) for s in batched] == [discrete(e) for e in engine]

    async def astream() -> tuple[list[int], dict[str, Any]]:
        at, state = [], {}  # the tokens generated so far when each message chunk arrives
        async for mode, chunk in graph.astream({"question": questions[0]}, stream_mode=["messages", "values"]):
            if mode == "messages":
                at.append(generated[0])
            else:
                state = chunk
        return at, state

    before = generated[0]
    at, state = asyncio.run(astream())
    assert graph_record(state) == engine[0] and at and at[0] < generated[0]  # streamed while generating
    assert generated[0] - before >= state["result"]["generated_tokens"]
    assert graph_record(asyncio.run(graph.ainvoke({"question": questions[1]}))) == engine[1]
    assert len(graph.nodes) >= 4


def test_interrupt_before_retrieval_resumes_with_an_edited_query(graph_lm, bm25) -> None:
    """A human sees the query formulator's query before each retrieval and approves it or edits it; the engine's run
    goes on with the passages of the edited query, its KV session kept across the interrupts."""
    graph = build_graph(graph_lm, bm25, preset="fl-rag", max_new_tokens=N, interrupt_before_retrieval=True,
                        checkpointer=MemorySaver())
    config = thread("edit")
    out = graph.invoke({"question": QUESTION}, config)
    (asked,) = out["__interrupt__"]
    assert asked.value["query"] == QUESTION and asked.value["decision"] is None  # FL-RAG's retrieval with the input
    assert bm25.queries == []  # nothing retrieved before the human answered
    out = graph.invoke(Command(resume="Ed Wood filmmaker"), config)
    (second,) = out["__interrupt__"]
    assert bm25.queries == ["Ed Wood filmmaker"]
    assert second.value["decision"]["fire"] and second.value["decision"]["reason"]
    out = graph.invoke(Command(resume=True), config)  # approved as it is
    while "__interrupt__" in out:
        out = graph.invoke(Command(resume=True), config)
    first = out["retrievals"][0]
    assert first["retriever_queries"] == ["Ed Wood filmmaker"] and first["query"] == QUESTION
    assert first["passage_ids"][0] == "doc-4"  # Ed Wood's passage, not the question's
    assert out["calls"][0] == {"query": QUESTION, "sent": "Ed Wood filmmaker", "k": 3, "passage_ids": first["passage_ids"]}
    assert bm25.queries[1] == second.value["query"] == out["retrievals"][1]["query"]

    # the same run through the engine, with a retriever that answers the question with the edited query's passages
    class Edited:
        def retrieve(self, query: str, k: int):  # noqa: ANN201
            return bm25.index.retrieve("Ed Wood filmmaker" if query == QUESTION else query, k)

    engine = Engine.from_preset("fl-rag", graph_lm, Edited(), max_new_tokens=N).run(QUESTION)
    assert graph_record(out) == engine_record(engine)  # and no second prefill: the same prompt tokens as one run
    assert json.loads(json.dumps(graph.get_state(config).values))["answer"] == out["answer"]


def test_a_human_can_hand_passages_or_skip(graph_lm, bm25) -> None:
    graph = build_graph(graph_lm, bm25, preset="sr-rag", max_new_tokens=6, interrupt_before_retrieval=True,
                        checkpointer=MemorySaver())
    out = graph.invoke({"question": QUESTION}, thread("give"))
    out = graph.invoke(Command(resume={"passages": ["Peter Schmeichel is a Danish goalkeeper."]}), thread("give"))
    assert bm25.queries == [] and out["passages"][0]["text"] == "Peter Schmeichel is a Danish goalkeeper."
    assert out["retrievals"][0]["passage_ids"] == [out["passages"][0]["id"]]
    graph.invoke({"question": QUESTION}, thread("skip"))
    out = graph.invoke(Command(resume=False), thread("skip"))
    assert out["retrievals"][0]["passage_ids"] == [] and out["answer"]


def test_a_static_breakpoint_and_update_state_edit_the_query(graph_lm, bm25) -> None:
    graph = build_graph(graph_lm, bm25, preset="sr-rag", max_new_tokens=6, checkpointer=MemorySaver(),
                        interrupt_before=["retrieve"])
    config = thread("static")
    graph.invoke({"question": QUESTION}, config)
    assert graph.get_state(config).next == ("retrieve",) and graph.get_state(config).values["query"] == QUESTION
    graph.update_state(config, {"query": "Kasper Schmeichel"})
    out = graph.invoke(None, config)
    assert bm25.queries == ["Kasper Schmeichel"] and out["calls"][0]["sent"] == "Kasper Schmeichel"
    assert source_documents(out)[0].metadata["title"] in ("Kasper Schmeichel", "Peter Schmeichel")


def test_a_run_that_is_not_in_the_process_fails_with_a_typed_error(graph_lm, bm25) -> None:
    """A checkpointer keeps the state, not the KV session: a graph resumed elsewhere (here: another graph object on the
    same checkpointer, as after a restart), or after its run was closed or evicted, says so."""
    saver = MemorySaver()
    make = lambda **kw: build_graph(graph_lm, bm25, preset="sr-rag", max_new_tokens=6,  # noqa: E731
                                    interrupt_before_retrieval=True, checkpointer=saver, **kw)
    make().invoke({"question": QUESTION}, thread("lost"))
    with pytest.raises(LiveRunGoneError, match="not in this process"):
        make().invoke(Command(resume=True), thread("lost"))
    nodes = ActiveRAGNodes(ActiveRAG(graph_lm, bm25, preset="sr-rag", max_new_tokens=6),
                           interrupt_before_retrieval=True, max_live=1)
    graph = nodes.compile(saver)
    graph.invoke({"question": QUESTION}, thread("a"))
    graph.invoke({"question": QUESTION}, thread("b"))  # evicts thread a's run (max_live=1)
    with pytest.raises(LiveRunGoneError):
        graph.invoke(Command(resume=True), thread("a"))
    assert graph.invoke(Command(resume=True), thread("b"))["answer"]
    assert len(nodes.runs) == 0  # a finished run leaves the registry


def test_resuming_from_a_checkpoint_the_run_has_passed_is_refused(graph_lm, bm25) -> None:
    graph = build_graph(graph_lm, bm25, preset="fl-rag", max_new_tokens=N, interrupt_before_retrieval=True,
                        checkpointer=MemorySaver())
    config = thread("travel")
    graph.invoke({"question": QUESTION}, config)
    first = graph.get_state(config)
    graph.invoke(Command(resume=True), config)  # the run goes on to its second retrieval
    with pytest.raises(LiveRunMismatchError, match="cannot go back"):
        graph.invoke(Command(resume=True), first.config)


def test_a_retriever_failure_is_the_engines_retriever_error(graph_lm, bm25, monkeypatch) -> None:
    def fail(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise ConnectionError("index server unreachable")

    monkeypatch.setattr(type(bm25), "_get_relevant_documents", fail)
    with pytest.raises(RetrieverError, match="index server unreachable"):
        build_graph(graph_lm, bm25, preset="sr-rag", max_new_tokens=6).invoke({"question": QUESTION})
    with pytest.raises(EmptyQuestionError):
        build_graph(graph_lm, bm25, preset="sr-rag").invoke({"question": "  "})


def test_a_rewired_graph_grades_the_passages_before_the_engine_reads_them(graph_lm, bm25) -> None:
    """The nodes are components: a grader between retrieve and generate keeps the passages it likes, and the engine
    reads only those."""
    nodes = ActiveRAGNodes(ActiveRAG(graph_lm, bm25, preset="sr-rag", max_new_tokens=6))

    def grade(state: ActiveRAGState) -> dict[str, Any]:
        return {"retrieved": [p for p in state["retrieved"] if "Schmeichel" in p["title"]][:1]}

    builder = StateGraph(ActiveRAGState)
    for name in nodes.NODES:
        builder.add_node(name, getattr(nodes, name))
    builder.add_node("grade", grade)
    builder.add_edge("__start__", "route")
    builder.add_conditional_edges("route", nodes.after_route)
    builder.add_conditional_edges("generate", nodes.after_generate)
    builder.add_edge("retrieve", "grade")
    builder.add_edge("grade", "generate")
    builder.add_conditional_edges("answer", nodes.after_answer)
    out = builder.compile().invoke({"question": QUESTION})
    assert len(out["retrievals"][0]["passage_ids"]) == 1 and "Schmeichel" in out["retrievals"][0]["titles"][0]
    assert [p["id"] for p in out["sources"]] == out["retrievals"][0]["passage_ids"]


def test_the_preset_switches_through_config_and_a_thread_asks_again(graph_lm, bm25) -> None:
    graph = build_graph(graph_lm, bm25, preset="wo-rag", max_new_tokens=N, checkpointer=MemorySaver())
    config = {"configurable": {"preset": "sr-rag", "thread_id": "again"}}
    out = graph.invoke({"question": QUESTION}, config)
    assert out["result"]["method"] == "sr-rag" and len(out["retrievals"]) == 1
    again = graph.invoke({"question": "Who is Ed Wood?"}, config)  # the thread's second question starts afresh
    assert len(again["retrievals"]) == len(again["calls"]) == 1 and again["run_id"] != out["run_id"]
    assert again["retrievals"][0]["query"] == "Who is Ed Wood?" and again["result"]["question"] == "Who is Ed Wood?"
    with pytest.raises(TypeError, match="either rag"):
        build_graph(graph_lm, rag=ActiveRAG(graph_lm, bm25))


def _live_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("active-rag-live-")]


def test_an_abandoned_run_lets_go_of_its_thread(graph_lm, bm25) -> None:
    """A run whose interrupt is never answered ends with ``close()``, or when its graph is dropped."""
    before = set(_live_threads())
    nodes = ActiveRAGNodes(ActiveRAG(graph_lm, bm25, preset="fl-rag", max_new_tokens=N), interrupt_before_retrieval=True)
    graph = nodes.compile(MemorySaver())
    graph.invoke({"question": QUESTION}, thread("one"))
    graph.invoke({"question": QUESTION}, thread("two"))
    graph.invoke(Command(resume=True), thread("two"))  # waits inside a step, for its second retrieval
    started = [t for t in _live_threads() if t not in before]
    assert len(started) == 2 and len(nodes.runs) == 2
    nodes.close(graph.get_state(thread("one")).values["run_id"])
    assert len(nodes.runs) == 1
    with pytest.raises(LiveRunGoneError):
        graph.invoke(Command(resume=True), thread("one"))
    del graph, nodes
    gc.collect()
    for t in started:
        t.join(timeout=10)
    assert not any(t.is_alive() for t in started)


def test_without_langgraph_the_import_names_the_extra(monkeypatch) -> None:
    import importlib
    import sys

    from active_rag._optional import MissingDependencyError

    monkeypatch.setitem(sys.modules, "langgraph", None)
    monkeypatch.delitem(sys.modules, "langchain_active_rag.graph")
    with pytest.raises(MissingDependencyError, match=r"active-rag\[langgraph\]"):
        importlib.import_module("langchain_active_rag.graph")


def test_a_finished_run_leaves_no_engine_thread(graph_lm, bm25) -> None:
    """The run's thread ends with the run: a graph that answered holds no engine thread (nor its KV session)."""
    graph = build_graph(graph_lm, bm25, preset="dragin", max_new_tokens=N)
    graph.invoke({"question": QUESTION})
    for _ in range(100):
        alive = [t for t in threading.enumerate() if t.name.startswith("active-rag-live")]
        if not alive:
            break
        threading.Event().wait(0.02)
    assert not alive
