"""ActiveRAGWorkflow: step sequence, streamed events vs. the engine's trace, routing branches, errors."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.response.schema import Response
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from llama_index.core.workflow import Event, StopEvent

from active_rag import ActiveLM, ActiveRAG
from active_rag.errors import EmptyQuestionError, RetrieverError
from llamaindex_active_rag import (
    ActiveRAGQueryEngine,
    ActiveRAGWorkflow,
    RetrievalDecisionEvent,
    RetrievedEvent,
    RouteEvent,
    TokenEvent,
)

QUESTION = "What was the father of Kasper Schmeichel voted to be by the IFFHS in 1992?"


class NodesRetriever(BaseRetriever):
    """A LlamaIndex retriever returning ``similarity_top_k`` nodes ``w<n>-<i>``; records queries."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.similarity_top_k = 2
        self.fail = fail
        self.queries: list[str] = []

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self.fail:
            raise TimeoutError("index offline")
        self.queries.append(query_bundle.query_str)
        n = len(self.queries)
        return [NodeWithScore(node=TextNode(id_=f"w{n}-{i}", text=f"text {i}", metadata={"title": f"W{n}.{i}"}), score=1.0) for i in range(self.similarity_top_k)]


def run(workflow: ActiveRAGWorkflow, question: str) -> tuple[Response, list[Event]]:
    async def go() -> tuple[Response, list[Event]]:
        handler = workflow.run(question=question)
        events = [ev async for ev in handler.stream_events()]
        return await handler, events

    return asyncio.run(go())


def test_events_follow_route_generate_retrieve_answer(tiny_lm: ActiveLM) -> None:
    retriever = NodesRetriever()
    engine = ActiveRAGQueryEngine(tiny_lm, retriever, preset="fl-rag", top_k=2, max_new_tokens=40)
    response, events = run(ActiveRAGWorkflow(engine), QUESTION)

    assert isinstance(events[0], RouteEvent) and events[0].router == "none" and events[0].retrieve is True
    assert isinstance(events[-1], StopEvent)
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    decisions = [e for e in events if isinstance(e, RetrievalDecisionEvent)]
    retrieved = [e for e in events if isinstance(e, RetrievedEvent)]
    assert [t.position for t in tokens] == list(range(40))
    assert "".join(t.text for t in tokens).strip() == response.response

    # the retrieve step called the LlamaIndex retriever once per engine query, with k = top_k
    assert [e.query for e in retrieved] == retriever.queries and all(e.k == 2 for e in retrieved)
    assert [e.node_ids for e in retrieved] == [["w1-0", "w1-1"], ["w2-0", "w2-1"], ["w3-0", "w3-1"]]
    # one decision event per trigger decision: 3 retrievals (initial, after 16 and 32 tokens) + the last segment
    assert [(d.fired, d.position) for d in decisions] == [(True, 0), (True, 16), (True, 32), (False, 32)]
    trace = response.metadata["retrievals"]
    assert [(d.query, d.node_ids, d.trigger) for d in decisions if d.fired] == [(r["query"], r["passage_ids"], r["trigger"]) for r in trace]
    # each fired decision is streamed right after its retrieval
    for r, d in zip(retrieved, [d for d in decisions if d.fired]):
        assert events.index(r) < events.index(d)

    # the result is the same Response as the query engine's
    same = ActiveRAGQueryEngine(tiny_lm, NodesRetriever(), preset="fl-rag", top_k=2, max_new_tokens=40).query(QUESTION)
    assert isinstance(response, Response) and response.response == same.response
    assert [n.node.node_id for n in response.source_nodes] == [n.node.node_id for n in same.source_nodes]
    assert response.metadata["retrievals"] == same.metadata["retrievals"]


@pytest.mark.parametrize(("output", "retrieve"), [("[Yes]", True), ("[No]", False)])
def test_route_step(tiny_lm: ActiveLM, monkeypatch: pytest.MonkeyPatch, output: str, retrieve: bool) -> None:
    monkeypatch.setattr(tiny_lm, "complete", lambda prompt, **kw: output)
    retriever = NodesRetriever()
    engine = ActiveRAGQueryEngine(tiny_lm, retriever, preset="sr-rag", top_k=2, max_new_tokens=8)
    response, events = run(ActiveRAGWorkflow(engine, router="ta-are"), QUESTION)
    route = events[0]
    assert isinstance(route, RouteEvent) and (route.retrieve, route.router, route.raw_output) == (retrieve, "ta-are", output)
    assert sum(isinstance(e, RouteEvent) for e in events) == 1  # the engine applies the verdict, it does not re-route
    assert response.metadata["route"]["retrieve"] is retrieve
    assert bool(retriever.queries) is retrieve and bool(response.source_nodes) is retrieve
    assert sum(isinstance(e, RetrievedEvent) for e in events) == int(retrieve)


def test_engine_router_is_used_and_activerag_accepted(tiny_lm: ActiveLM, fake_retriever: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tiny_lm, "complete", lambda prompt, **kw: "[No]")
    engine = ActiveRAGQueryEngine(tiny_lm, fake_retriever, preset="sr-rag", router="vanilla", max_new_tokens=6)
    _, events = run(ActiveRAGWorkflow(engine), QUESTION)
    assert events[0].router == "vanilla" and events[0].retrieve is False

    rag = ActiveRAG.from_preset("sr-rag", tiny_lm, fake_retriever, top_k=1, max_new_tokens=6)
    response, events = run(ActiveRAGWorkflow(rag), QUESTION)
    assert [n.node.node_id for n in response.source_nodes] == ["q1-d0"]  # an engine retriever, via the retrieve step
    assert [e.node_ids for e in events if isinstance(e, RetrievedEvent)] == [["q1-d0"]]


def test_empty_question(tiny_lm: ActiveLM) -> None:
    workflow = ActiveRAGWorkflow(ActiveRAGQueryEngine(tiny_lm, NodesRetriever(), preset="sr-rag", top_k=2, max_new_tokens=4))
    with pytest.raises(EmptyQuestionError):
        run(workflow, " ")


def test_retriever_error(tiny_lm: ActiveLM) -> None:
    workflow = ActiveRAGWorkflow(ActiveRAGQueryEngine(tiny_lm, NodesRetriever(fail=True), preset="sr-rag", top_k=2, max_new_tokens=4))
    with pytest.raises(RetrieverError, match="index offline") as info:
        run(workflow, QUESTION)
    assert isinstance(info.value.__cause__, TimeoutError)
    assert workflow._requests == {}  # no request left waiting


def test_not_an_engine() -> None:
    with pytest.raises(TypeError, match="ActiveRAGQueryEngine"):
        ActiveRAGWorkflow(object())  # type: ignore[arg-type]
