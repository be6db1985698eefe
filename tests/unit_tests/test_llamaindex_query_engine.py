"""ActiveRAGQueryEngine: query / aquery / streaming, source nodes vs. trace, instrumentation, errors.

Uses the tiny random Llama (never emits EOS, so every answer has exactly ``max_new_tokens`` tokens) with
presets that always retrieve (``fl-rag``, ``sr-rag``), a LlamaIndex ``BaseRetriever`` fake, and
``BM25Retriever`` over the bundled demo corpus.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.response.schema import AsyncStreamingResponse, Response, StreamingResponse
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events.retrieval import RetrievalStartEvent
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from active_rag import ActiveLM, ActiveRAG, Passage
from active_rag.errors import EmptyQuestionError, RetrieverError, UnknownNameError
from llamaindex_active_rag import ActiveRAGQueryEngine, ActiveRetrievalEvent, ActiveRouteEvent, LlamaIndexRetrieverAdapter
from tests.recipes import recipe

QUESTION = "What was the father of Kasper Schmeichel voted to be by the IFFHS in 1992?"


class FakeLIRetriever(BaseRetriever):
    """A LlamaIndex retriever: 10 deterministic nodes per query, ids ``r<n>-<i>``; records queries,
    the ``similarity_top_k`` seen during each call, and every node object it returned."""

    def __init__(self, similarity_top_k: int | None = 3, fail: bool = False) -> None:
        super().__init__()
        if similarity_top_k is not None:
            self.similarity_top_k = similarity_top_k
        self.fail = fail
        self.queries: list[str] = []
        self.seen_top_k: list[int | None] = []
        self.returned: dict[str, NodeWithScore] = {}

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self.fail:
            raise ConnectionError("vector store unreachable")
        self.queries.append(query_bundle.query_str)
        self.seen_top_k.append(getattr(self, "similarity_top_k", None))
        n = len(self.queries)
        count = getattr(self, "similarity_top_k", 10)
        nodes = [
            NodeWithScore(node=TextNode(id_=f"r{n}-{i}", text=f"Passage {i} for {query_bundle.query_str[:30]}", metadata={"title": f"T{n}.{i}", "rank": i}), score=1.0 / (i + 1))
            for i in range(count)
        ]
        for node in nodes:
            self.returned[node.node.node_id] = node
        return nodes


class Collector(BaseEventHandler):
    """Collects every instrumentation event."""

    events: list[Any] = []

    @classmethod
    def class_name(cls) -> str:
        return "Collector"

    def handle(self, event: Any, **kwargs: Any) -> None:
        self.events.append(event)


@pytest.fixture
def collector() -> Iterator[Collector]:
    handler = Collector(events=[])
    root = get_dispatcher()
    root.add_event_handler(handler)
    yield handler
    root.event_handlers.remove(handler)


def trace_ids(response: Response | StreamingResponse | AsyncStreamingResponse) -> list[str]:
    """Passage ids of the final prompt, as the trace says: what the last retrieval left in the prompt."""
    retrievals = (response.metadata or {})["retrievals"]
    return list(retrievals[-1]["held_ids"]) if retrievals else []


def node_ids(response: Any) -> list[str]:
    return [n.node.node_id for n in response.source_nodes]


# -- query -------------------------------------------------------------------------------------------
def test_query_source_nodes_are_the_retrieved_nodes(tiny_lm: ActiveLM) -> None:
    retriever = FakeLIRetriever(similarity_top_k=3)
    engine = ActiveRAGQueryEngine(tiny_lm, retriever, preset="fl-rag", top_k=3, max_new_tokens=40)
    response = engine.query(QUESTION)

    assert isinstance(response, Response)
    meta = response.metadata
    assert meta["method"] == "fl-rag" and meta["complete"] is True
    # fl-rag: initial retrieval with the question, then one every 16 tokens -> 3 retrievals in 40 tokens
    assert [r["position"] for r in meta["retrievals"]] == [0, 16, 32]
    assert meta["retrievals"][0]["query"] == QUESTION
    assert set(meta["retrievals"][0]) >= {"position", "token", "score", "threshold", "query", "passage_ids", "trigger", "reason", "titles"}
    assert meta["generated_tokens"] == 40
    # source nodes: the final prompt's nodes (FL-RAG's: the last retrieval's), mapped back by id, originals (same objects)
    assert node_ids(response) == trace_ids(response) == ["r3-0", "r3-1", "r3-2"]
    assert all(n is retriever.returned[n.node.node_id] for n in response.source_nodes)
    assert meta["retrievals"][0]["titles"] == ["T1.0", "T1.1", "T1.2"]
    # every retrieval went through the retriever, used as it was built
    assert retriever.queries == [r["query"] for r in meta["retrievals"]]
    assert retriever.seen_top_k == [3, 3, 3] and retriever.similarity_top_k == 3
    assert response.response == response.response.strip() and len(tiny_lm.encode(response.response)) > 0


def test_a_shared_retriever_is_never_reconfigured_and_a_copy_fetches_the_top_k(tiny_lm: ActiveLM) -> None:
    retriever = FakeLIRetriever(similarity_top_k=2)
    engine = ActiveRAGQueryEngine(tiny_lm, retriever, preset="sr-rag", top_k=3, max_new_tokens=4)
    response = engine.query(QUESTION)
    assert retriever.seen_top_k == [3] and retriever.similarity_top_k == 2  # a copy answered with 3; never changed
    assert node_ids(response) == ["r1-0", "r1-1", "r1-2"]


class _FixedTopK(FakeLIRetriever):
    """A retriever whose ``similarity_top_k`` cannot be set."""

    @property  # type: ignore[override]
    def similarity_top_k(self) -> int:
        return 2

    @similarity_top_k.setter
    def similarity_top_k(self, value: int) -> None:
        raise AttributeError("similarity_top_k is fixed")


def test_a_retriever_whose_top_k_cannot_be_set_is_used_as_built_with_a_warning(tiny_lm: ActiveLM) -> None:
    retriever = _FixedTopK(similarity_top_k=None)
    with pytest.warns(UserWarning, match=r"returns 2 nodes per query \(similarity_top_k=2\) but the engine asks for top_k=3"):
        engine = ActiveRAGQueryEngine(tiny_lm, retriever, preset="sr-rag", top_k=3, max_new_tokens=4)
    assert node_ids(engine.query(QUESTION)) == ["r1-0", "r1-1"]


class _Ranked(FakeLIRetriever):
    """Ranks the same nodes for every query: ``p0``, ``p1``, ... (``similarity_top_k`` of them)."""

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self.seen_top_k.append(self.similarity_top_k)
        return [NodeWithScore(node=TextNode(id_=f"p{i}", text=f"Passage {i}.", metadata={"title": f"P{i}"}), score=1.0 / (i + 1))
                for i in range(self.similarity_top_k)]


def test_the_linked_look_fetches_the_next_passages_past_those_held(tiny_lm: ActiveLM) -> None:
    """``look-again-linked`` asks for ``top_k`` passages beyond those the prompt holds: a retriever built with
    ``similarity_top_k=top_k`` answers through a copy set to that many, so the look adds the next ``top_k``."""
    retriever = _Ranked(similarity_top_k=2)
    engine = ActiveRAGQueryEngine(tiny_lm, retriever, **recipe("look-again-linked"), top_k=2, max_new_tokens=8)
    first, look = engine.query(QUESTION).metadata["retrievals"]
    assert first["passage_ids"] == ["p0", "p1"] and look["new_ids"] == ["p2", "p3"]
    assert retriever.similarity_top_k == 2


def test_a_retriever_factory_is_built_once_per_k(tiny_lm: ActiveLM) -> None:
    built: list[FakeLIRetriever] = []

    def factory(k: int) -> FakeLIRetriever:
        built.append(FakeLIRetriever(similarity_top_k=k))
        return built[-1]

    engine = ActiveRAGQueryEngine(tiny_lm, factory, preset="fl-rag", top_k=3, max_new_tokens=20)
    first, second = engine.query(QUESTION), engine.query("Who is Peter Schmeichel?")
    assert len(built) == 1 and built[0].seen_top_k == [3, 3, 3, 3]  # two questions, two retrievals each
    assert node_ids(first) == ["r2-0", "r2-1", "r2-2"]
    assert node_ids(second) == ["r4-0", "r4-1", "r4-2"]
    assert engine.retriever is factory
    with pytest.raises(RetrieverError, match="factory returned str"):
        ActiveRAGQueryEngine(tiny_lm, lambda k: "nope", preset="sr-rag", max_new_tokens=4).query(QUESTION)


def test_retriever_without_similarity_top_k_is_sliced(tiny_lm: ActiveLM) -> None:
    retriever = FakeLIRetriever(similarity_top_k=None)  # returns 10 nodes
    response = ActiveRAGQueryEngine(tiny_lm, retriever, preset="sr-rag", top_k=2, max_new_tokens=8).query(QUESTION)
    assert node_ids(response) == ["r1-0", "r1-1"]
    assert response.metadata["retrievals"][0]["passage_ids"] == ["r1-0", "r1-1"]


def test_passages_seen_by_the_engine_come_from_the_nodes() -> None:
    node = NodeWithScore(node=TextNode(id_="n1", text="Body text.", metadata={"title": "A title", "year": 1992}), score=0.5)
    from llamaindex_active_rag import node_from_passage, passage_from_node

    passage = passage_from_node(node)
    assert (passage.id, passage.title, passage.text, passage.score, passage.metadata) == ("n1", "A title", "Body text.", 0.5, {"year": 1992})
    back = node_from_passage(passage)
    assert back.node.node_id == "n1" and back.node.metadata == {"year": 1992, "title": "A title"} and back.score == 0.5


def test_engine_retriever_is_accepted_and_turned_into_nodes(tiny_lm: ActiveLM, fake_retriever: Any) -> None:
    response = ActiveRAGQueryEngine(tiny_lm, fake_retriever, preset="sr-rag", top_k=2, max_new_tokens=8).query(QUESTION)
    assert node_ids(response) == trace_ids(response) == ["q1-d0", "q1-d1"]
    assert response.source_nodes[0].node.metadata["title"] == "Title 1.0"
    assert fake_retriever.queries == [QUESTION]


def test_from_engine_wraps_a_configured_activerag(tiny_lm: ActiveLM, fake_retriever: Any) -> None:
    rag = ActiveRAG.from_preset("sr-rag", tiny_lm, fake_retriever, top_k=1, max_new_tokens=6)
    engine = ActiveRAGQueryEngine.from_engine(rag)
    response = engine.query(QUESTION)
    assert engine.rag is rag and rag.retriever is fake_retriever  # the configured engine is never mutated
    fresh = ActiveRAG.from_preset("sr-rag", tiny_lm, type(fake_retriever)(), top_k=1, max_new_tokens=6)
    assert node_ids(response) == ["q1-d0"] and response.response == fresh.run(QUESTION).answer


def test_options_pass_through_to_the_engine(tiny_lm: ActiveLM) -> None:
    engine = ActiveRAGQueryEngine(
        tiny_lm, FakeLIRetriever(), trigger="fixed-length", query="last-tokens", top_k=1, max_retrievals=1, max_new_tokens=40, prompt="flare"
    )
    assert (engine.rag.trigger.name, engine.rag.query.name, engine.rag.prompt.name) == ("fixed-length", "last-tokens", "flare")
    response = engine.query(QUESTION)
    assert len(response.metadata["retrievals"]) == 1  # max_retrievals
    assert response.metadata["method"] == "fixed-length+last-tokens"


# -- async and streaming ------------------------------------------------------------------------------
def test_aquery_matches_query(tiny_lm: ActiveLM) -> None:
    sync = ActiveRAGQueryEngine(tiny_lm, FakeLIRetriever(), preset="fl-rag", top_k=2, max_new_tokens=20).query(QUESTION)
    engine = ActiveRAGQueryEngine(tiny_lm, FakeLIRetriever(), preset="fl-rag", top_k=2, max_new_tokens=20)
    result = asyncio.run(engine.aquery(QUESTION))
    assert isinstance(result, Response)
    assert result.response == sync.response and node_ids(result) == node_ids(sync) == trace_ids(result)
    assert result.metadata["retrievals"] == sync.metadata["retrievals"]


def test_streaming_yields_tokens_and_fills_sources_when_done(tiny_lm: ActiveLM) -> None:
    full = ActiveRAGQueryEngine(tiny_lm, FakeLIRetriever(), preset="fl-rag", top_k=2, max_new_tokens=20).query(QUESTION)
    engine = ActiveRAGQueryEngine(tiny_lm, FakeLIRetriever(), preset="fl-rag", top_k=2, max_new_tokens=20, streaming=True)
    streaming = engine.query(QUESTION)
    assert isinstance(streaming, StreamingResponse)
    # the engine ran up to its first token: FL-RAG retrieved with the question, and its first window, checked
    # before it is streamed, retrieved at 16
    assert node_ids(streaming) == ["r1-0", "r1-1"] and streaming.metadata["complete"] is False  # the first token's prompt
    assert [r["position"] for r in streaming.metadata["retrievals"]] == [0, 16]
    tokens = list(streaming.response_gen)
    # one piece per token that adds text (AnswerStream): they join to the engine's answer exactly
    assert 10 < len(tokens) <= 20 and "".join(tokens) == full.response
    assert streaming.metadata["complete"] is True
    assert streaming.metadata["retrievals"] == full.metadata["retrievals"]
    assert node_ids(streaming) == node_ids(full) == trace_ids(streaming)


def test_streaming_sources_follow_the_prompt(tiny_lm: ActiveLM) -> None:
    engine = ActiveRAGQueryEngine(tiny_lm, FakeLIRetriever(), preset="fl-rag", top_k=1, max_new_tokens=40, streaming=True)
    streaming = engine.query(QUESTION)
    gen = streaming.response_gen
    next(gen)
    # fl-rag retrieves with the question first, then (action "continue") retrieves for the next window
    # right after checking the first 16 tokens, before they are streamed
    assert node_ids(streaming) == ["r1-0"] and streaming.metadata["complete"] is False  # the first window's prompt
    assert [r["position"] for r in streaming.metadata["retrievals"]] == [0, 16]
    list(gen)
    assert node_ids(streaming) == ["r3-0"]


def test_async_streaming(tiny_lm: ActiveLM) -> None:
    full = ActiveRAGQueryEngine(tiny_lm, FakeLIRetriever(), preset="sr-rag", top_k=2, max_new_tokens=12).query(QUESTION)
    engine = ActiveRAGQueryEngine(tiny_lm, FakeLIRetriever(), preset="sr-rag", top_k=2, max_new_tokens=12, streaming=True)

    async def run() -> tuple[AsyncStreamingResponse, list[str]]:
        response = await engine.aquery(QUESTION)
        assert isinstance(response, AsyncStreamingResponse)
        return response, [t async for t in response.async_response_gen()]

    response, tokens = asyncio.run(run())
    assert 6 < len(tokens) <= 12 and "".join(tokens) == full.response
    assert response.metadata["complete"] is True and node_ids(response) == node_ids(full) == ["r1-0", "r1-1"]


@pytest.mark.parametrize("preset", ["wo-rag", "sr-rag", "sr-rag-linked"])
def test_streaming_yields_the_first_token_before_generation_is_finished(tiny_lm: ActiveLM, generated: list[int],
                                                                        preset: str) -> None:
    engine = ActiveRAGQueryEngine(tiny_lm, FakeLIRetriever(), preset=preset, top_k=2, max_new_tokens=12, streaming=True)
    streaming = engine.query(QUESTION)
    arrivals = [generated[0] for piece in streaming.response_gen if piece]
    assert arrivals[0] <= 2 and len(arrivals) > 6  # the first piece after one or two tokens (a lone space waits)


def test_streaming_source_nodes_are_known_before_the_first_token(tiny_lm: ActiveLM, generated: list[int]) -> None:
    """SR-RAG retrieves before its first token: the response holds its nodes before ``response_gen`` is read."""
    engine = ActiveRAGQueryEngine(tiny_lm, FakeLIRetriever(), preset="sr-rag", top_k=2, max_new_tokens=12, streaming=True)
    streaming = engine.query(QUESTION)
    assert node_ids(streaming) == ["r1-0", "r1-1"] and generated[0] <= 1 and streaming.metadata["complete"] is False
    assert streaming.metadata["retrievals"][0]["passage_ids"] == ["r1-0", "r1-1"]

    async def run() -> list[str]:
        response = await engine.aquery(QUESTION)
        assert node_ids(response) == ["r2-0", "r2-1"]  # a second question: the recording retriever's second call
        return [t async for t in response.async_response_gen()]

    assert asyncio.run(run())


@pytest.mark.slow
def test_responses_carry_the_short_answer(tiny_lm: ActiveLM) -> None:
    engine = ActiveRAGQueryEngine(tiny_lm, FakeLIRetriever(), **recipe("look-again"), top_k=2, max_new_tokens=12)
    response = engine.query(QUESTION)
    direct = ActiveRAG(tiny_lm, LlamaIndexRetrieverAdapter(FakeLIRetriever()), **recipe("look-again", top_k=2, max_new_tokens=12)).run(QUESTION)
    assert response.response == direct.answer and response.metadata["short_answer"] == direct.short_answer
    assert "So the answer is" in direct.answer and direct.short_answer != direct.answer  # the preset's phrase


# -- BM25Retriever -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bm25() -> Any:
    from llama_index.retrievers.bm25 import BM25Retriever

    from llamaindex_active_rag import demo_nodes

    return BM25Retriever.from_defaults(nodes=demo_nodes(), similarity_top_k=3)


def test_bm25_retriever(tiny_lm: ActiveLM, bm25: Any) -> None:
    engine = ActiveRAGQueryEngine(tiny_lm, bm25, preset="fl-rag", top_k=3, max_new_tokens=20)
    response = engine.query(QUESTION)
    first = response.metadata["retrievals"][0]
    assert first["query"] == QUESTION and len(first["passage_ids"]) == 3
    assert {"Kasper Schmeichel", "Peter Schmeichel"} <= set(first["titles"])  # BM25 finds both supporting paragraphs
    assert node_ids(response) == trace_ids(response)
    assert all(n.node.node_id.startswith("hotpot-") and n.score is not None for n in response.source_nodes)
    assert bm25.similarity_top_k == 3  # never changed


def test_bm25_retriever_streaming(tiny_lm: ActiveLM, bm25: Any) -> None:
    streaming = ActiveRAGQueryEngine(tiny_lm, bm25, preset="sr-rag", top_k=2, max_new_tokens=10, streaming=True).query(QUESTION)
    assert 3 < len(list(streaming.response_gen)) <= 10
    assert {n.node.metadata["title"] for n in streaming.source_nodes} == {"Kasper Schmeichel", "Peter Schmeichel"}


# -- instrumentation -----------------------------------------------------------------------------------
def test_every_trigger_decision_is_an_instrumentation_event(tiny_lm: ActiveLM, collector: Collector) -> None:
    retriever = FakeLIRetriever()
    response = ActiveRAGQueryEngine(tiny_lm, retriever, preset="fl-rag", top_k=2, max_new_tokens=40).query(QUESTION)
    decisions = [e for e in collector.events if isinstance(e, ActiveRetrievalEvent)]
    fired = [e for e in decisions if e.fired]
    held = [e for e in decisions if not e.fired]
    trace = response.metadata["retrievals"]
    assert [(e.position, e.query, e.node_ids, e.trigger, e.token, e.score, e.threshold) for e in fired] == [
        (r["position"], r["query"], r["passage_ids"], r["trigger"], r["token"], r["score"], r["threshold"]) for r in trace
    ]
    # 40 tokens: segments of 16, 16 (both fire) and 8 (generation ended: no retrieval)
    assert len(held) == 1 and held[0].position == 32 and held[0].query is None and held[0].node_ids == []
    assert len(decisions) == response.metadata["decisions"] + 1  # + the initial retrieval
    assert all(e.method == "fl-rag" and e.question == QUESTION for e in decisions)
    # the retriever's own retrieve() ran (LlamaIndex retrieval events), once per engine query
    starts = [e for e in collector.events if isinstance(e, RetrievalStartEvent)]
    assert [str(e.str_or_query_bundle) for e in starts] == retriever.queries
    assert ActiveRetrievalEvent.class_name() == "ActiveRetrievalEvent"


def test_router_option_routes_and_dispatches(tiny_lm: ActiveLM, collector: Collector, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = ActiveRAGQueryEngine(tiny_lm, FakeLIRetriever(), preset="fl-rag", router="ta-are", top_k=2, max_new_tokens=20)
    monkeypatch.setattr(tiny_lm, "complete", lambda prompt, **kw: "[No]")
    no = engine.query(QUESTION)
    assert no.metadata["route"]["retrieve"] is False and no.metadata["retrievals"] == [] and no.source_nodes == []
    monkeypatch.setattr(tiny_lm, "complete", lambda prompt, **kw: "[Yes]")
    yes = engine.query(QUESTION)
    assert yes.metadata["route"]["retrieve"] is True and len(yes.metadata["retrievals"]) == 2
    routes = [e for e in collector.events if isinstance(e, ActiveRouteEvent)]
    assert [(e.retrieve, e.router, e.raw_output) for e in routes] == [(False, "ta-are", "[No]"), (True, "ta-are", "[Yes]")]


# -- errors --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("question", ["", "   \n"])
def test_empty_question(tiny_lm: ActiveLM, question: str) -> None:
    engine = ActiveRAGQueryEngine(tiny_lm, FakeLIRetriever(), preset="sr-rag", max_new_tokens=4)
    with pytest.raises(EmptyQuestionError, match="empty"):
        engine.query(question)
    with pytest.raises(EmptyQuestionError):
        asyncio.run(engine.aquery(question))
    streaming = ActiveRAGQueryEngine(tiny_lm, FakeLIRetriever(), preset="sr-rag", max_new_tokens=4, streaming=True)
    with pytest.raises(EmptyQuestionError):  # raised by query(), not later by the generator
        streaming.query(question)


def test_unknown_preset(tiny_lm: ActiveLM) -> None:
    with pytest.raises(UnknownNameError, match="Unknown method 'dragon'.*dragin"):
        ActiveRAGQueryEngine(tiny_lm, FakeLIRetriever(), preset="dragon")
    with pytest.raises(UnknownNameError, match="router"):
        ActiveRAGQueryEngine(tiny_lm, FakeLIRetriever(), preset="sr-rag", router="oracle")


def test_retrieving_method_without_retriever(tiny_lm: ActiveLM) -> None:
    with pytest.raises(ValueError, match="no retriever was given"):
        ActiveRAGQueryEngine(tiny_lm, preset="fl-rag")
    assert ActiveRAGQueryEngine(tiny_lm, preset="wo-rag", max_new_tokens=3).query(QUESTION).source_nodes == []


def test_not_a_retriever(tiny_lm: ActiveLM) -> None:
    with pytest.raises(TypeError, match="BaseRetriever"):
        ActiveRAGQueryEngine(tiny_lm, object(), preset="sr-rag")  # type: ignore[arg-type]


def test_retriever_raising_surfaces_as_retriever_error(tiny_lm: ActiveLM) -> None:
    engine = ActiveRAGQueryEngine(tiny_lm, FakeLIRetriever(fail=True), preset="sr-rag", max_new_tokens=4)
    with pytest.raises(RetrieverError, match="vector store unreachable") as info:
        engine.query(QUESTION)
    assert isinstance(info.value.__cause__, ConnectionError)
    assert QUESTION in str(info.value)
    streaming = ActiveRAGQueryEngine(tiny_lm, FakeLIRetriever(fail=True), preset="sr-rag", max_new_tokens=4, streaming=True)
    with pytest.raises(RetrieverError):
        list(streaming.query(QUESTION).response_gen)


# -- prompts, llm=, LLM instrumentation ----------------------------------------------------------------
def test_prompts_are_exposed_and_updatable(tiny_lm: ActiveLM) -> None:
    from llama_index.core.prompts import PromptTemplate

    rag = ActiveRAG.from_preset("sr-rag", tiny_lm, FakeLIRetriever(), top_k=2, max_new_tokens=6)
    engine = ActiveRAGQueryEngine.from_engine(rag)
    prompts = engine.get_prompts()
    assert set(prompts) == {"direct_prompt", "with_docs_prompt"}
    assert prompts["with_docs_prompt"].get_template() == rag.prompt.with_docs
    assert set(prompts["with_docs_prompt"].template_vars) == {"question", "documents"}

    template = PromptTemplate('Notes {"a": 1}:\n{documents}\n{style} answer to: {question}').partial_format(style="A short")
    engine.update_prompts({"with_docs_prompt": template})
    assert rag.prompt.with_docs != engine.rag.prompt.with_docs  # the configured engine is not mutated
    assert engine.rag.prompt.name == "dragin+custom" and engine.rag.prompt.direct == rag.prompt.direct
    assert engine.get_prompts()["with_docs_prompt"].get_template() == 'Notes {"a": 1}:\n{documents}\nA short answer to: {question}'
    passages = [Passage(id="p1", title="T", text="Body.")]
    assert engine.rag.prompt.render(QUESTION, passages) == f'Notes {{"a": 1}}:\n[1] T Body.\nA short answer to: {QUESTION}'
    assert engine.rag.prompt.render(QUESTION, []) == rag.prompt.render(QUESTION, [])
    response = engine.query(QUESTION)
    assert response.response == ActiveRAG(
        tiny_lm, LlamaIndexRetrieverAdapter(FakeLIRetriever()), trigger="once", query="input", prompt=engine.rag.prompt, top_k=2, max_new_tokens=6
    ).run(QUESTION).answer

    with pytest.raises(ValueError, match=r"must contain \{documents\}"):
        engine.update_prompts({"with_docs_prompt": "Only {question}"})
    with pytest.raises(ValueError, match=r"direct_prompt template must contain \{question\}"):
        engine.update_prompts({"direct_prompt": "{questoin}"})


def test_llm_argument(tiny_lm: ActiveLM) -> None:
    from llamaindex_active_rag import ActiveHFLLM

    llm = ActiveHFLLM(tiny_lm)
    by_llm = ActiveRAGQueryEngine(llm=llm, retriever=FakeLIRetriever(), preset="sr-rag", max_new_tokens=6)
    positional = ActiveRAGQueryEngine(llm, FakeLIRetriever(), preset="sr-rag", max_new_tokens=6)
    assert by_llm.llm is llm and positional.llm is llm and by_llm.rag.model is tiny_lm
    assert by_llm.query(QUESTION).response == ActiveRAGQueryEngine(tiny_lm, FakeLIRetriever(), preset="sr-rag", max_new_tokens=6).query(QUESTION).response
    with pytest.raises(TypeError, match="ActiveHFLLM"):
        ActiveRAGQueryEngine(llm=object(), retriever=FakeLIRetriever(), preset="sr-rag")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="needs a model"):
        ActiveRAGQueryEngine(retriever=FakeLIRetriever(), preset="sr-rag")


def test_generation_dispatches_llm_completion_events(tiny_lm: ActiveLM, collector: Collector) -> None:
    from llama_index.core.instrumentation.events.llm import (
        LLMCompletionEndEvent,
        LLMCompletionInProgressEvent,
        LLMCompletionStartEvent,
    )

    engine = ActiveRAGQueryEngine(tiny_lm, FakeLIRetriever(), preset="fl-rag", top_k=2, max_new_tokens=40)
    response = engine.query(QUESTION)
    llm_events = [e for e in collector.events if isinstance(e, (LLMCompletionStartEvent, LLMCompletionInProgressEvent, LLMCompletionEndEvent))]
    starts = [e for e in llm_events if isinstance(e, LLMCompletionStartEvent)]
    ends = [e for e in llm_events if isinstance(e, LLMCompletionEndEvent)]
    tokens = [e for e in llm_events if isinstance(e, LLMCompletionInProgressEvent)]
    # fl-rag over 40 tokens: retrievals at 0, 16 and 32 -> three segments of 16, 16 and 8 tokens
    assert [e.additional_kwargs["output_start"] for e in starts] == [0, 16, 32]
    assert [len(e.response.logprobs) for e in ends] == [16, 16, 8] and len(tokens) == 40
    assert "".join(e.response.text for e in ends).strip() == response.response
    assert "".join(e.response.delta for e in tokens) == "".join(e.response.text for e in ends)
    assert type(llm_events[0]) is LLMCompletionStartEvent and type(llm_events[-1]) is LLMCompletionEndEvent
    # each segment's prompt holds the passages retrieved for it, then the answer so far
    trace = response.metadata["retrievals"]
    for start, retrieval in zip(starts, trace):
        assert start.additional_kwargs["passage_ids"] == retrieval["passage_ids"]
        assert all(f"Passage {i} for" in start.prompt for i in range(2)) and QUESTION in start.prompt
    assert starts[1].prompt.endswith(ends[0].response.text) and starts[0].model_dict["model_name"] == "tiny-llama"
    assert all(e.additional_kwargs["method"] == "fl-rag" for e in starts)
    # per-token logprobs are the engine's
    assert [e.response.logprobs[0][0].logprob for e in tokens] == pytest.approx(
        [lp[0].logprob for e in ends for lp in e.response.logprobs]
    )


def test_router_verdict_is_a_completion_event(tiny_lm: ActiveLM, collector: Collector, monkeypatch: pytest.MonkeyPatch) -> None:
    from llama_index.core.instrumentation.events.llm import LLMCompletionEndEvent

    monkeypatch.setattr(tiny_lm, "complete", lambda prompt, **kw: "[No]")
    engine = ActiveRAGQueryEngine(tiny_lm, FakeLIRetriever(), preset="fl-rag", router="ta-are", max_new_tokens=4)
    response = engine.query(QUESTION)
    first_end = next(e for e in collector.events if isinstance(e, LLMCompletionEndEvent))
    assert first_end.response.text == "[No]" and first_end.prompt == response.metadata["route"]["prompt"]


def test_aquery_runs_the_engine_in_worker_threads(tiny_lm: ActiveLM) -> None:
    import threading

    threads: set[int] = set()

    class ThreadRecorder(FakeLIRetriever):
        def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
            threads.add(threading.get_ident())
            return super()._retrieve(query_bundle)

    engine = ActiveRAGQueryEngine(tiny_lm, ThreadRecorder(), preset="sr-rag", top_k=2, max_new_tokens=6)

    async def both() -> list[Any]:
        return await asyncio.gather(engine.aquery(QUESTION), engine.aquery("Who is Peter Schmeichel?"))

    first, second = asyncio.run(both())
    assert threads and threading.get_ident() not in threads  # never on the event loop's thread
    assert first.metadata["complete"] and second.metadata["complete"] and len(second.source_nodes) == 2


@pytest.mark.parametrize("policy", ["replace", "keep-newest", "accumulate", "rerank"])
def test_context_policy_is_a_parameter_and_the_query_is_the_engines(tiny_lm: ActiveLM, policy: str) -> None:
    """Issue 28: the context policy passes through to the engine; the response carries the engine's answer and trace."""
    engine = ActiveRAGQueryEngine(tiny_lm, FakeLIRetriever(), preset="fs-rag", context=policy, max_new_tokens=24, top_k=2)
    assert engine.rag.context.name == policy
    response = engine.query(QUESTION)
    direct = ActiveRAG.from_preset("fs-rag", tiny_lm, LlamaIndexRetrieverAdapter(FakeLIRetriever()), context=policy,
                                   max_new_tokens=24, top_k=2).run(QUESTION)
    assert str(response) == direct.answer
    assert response.metadata["retrievals"] == [r.to_dict() for r in direct.retrievals]


def test_the_linked_look_is_a_preset_and_the_query_is_the_engines(tiny_lm: ActiveLM) -> None:
    """``look-again-linked``: the second look asks the LlamaIndex retriever with the names its passages mention; the
    response is the engine's answer and trace."""
    engine = ActiveRAGQueryEngine(tiny_lm, FakeLIRetriever(), **recipe("look-again-linked"), max_new_tokens=12, top_k=2)
    assert engine.rag.answer_check is not None and engine.rag.answer_check.query == "linked"
    response = engine.query(QUESTION)
    direct = ActiveRAG(tiny_lm, LlamaIndexRetrieverAdapter(FakeLIRetriever()), **recipe("look-again-linked", max_new_tokens=12, top_k=2)).run(QUESTION)
    assert str(response) == direct.answer
    assert response.metadata["retrievals"] == [r.to_dict() for r in direct.retrievals]


def test_sr_rag_linked_is_a_preset_and_reads_the_linked_articles_before_answering(tiny_lm: ActiveLM) -> None:
    """``sr-rag-linked``: the question's nodes, then the own articles of the names they mention, both before the
    first token, from the LlamaIndex retriever; the response is the engine's answer and trace."""
    engine = ActiveRAGQueryEngine(tiny_lm, FakeLIRetriever(), preset="sr-rag-linked", max_new_tokens=12, top_k=2)
    assert engine.rag.follow_links is True
    response = engine.query(QUESTION)
    direct = ActiveRAG.from_preset("sr-rag-linked", tiny_lm, LlamaIndexRetrieverAdapter(FakeLIRetriever()),
                                   max_new_tokens=12, top_k=2).run(QUESTION)
    assert [(r.formulator, r.position) for r in direct.retrievals] == [("input", 0), ("linked", 0)]
    assert str(response) == direct.answer
    assert response.metadata["retrievals"] == [r.to_dict() for r in direct.retrievals]


def test_an_answer_written_again_streams_and_reports_as_the_engines(tiny_lm: ActiveLM, collector: Collector) -> None:
    """``look-again`` (an answer check): ``response_gen`` gives the kept answer, not the draft joined to it; the
    draft and the second answer are one completion each, whose prompts hold exactly the passages they were
    written from; the kept draft's replay is not a third."""
    from llama_index.core.instrumentation.events.llm import LLMCompletionEndEvent, LLMCompletionStartEvent

    # without the preset's answer phrase: the random model writes no sentence, so the forced phrase would rewind it
    direct = ActiveRAG(tiny_lm, LlamaIndexRetrieverAdapter(FakeLIRetriever()), **recipe("look-again", top_k=2, max_new_tokens=12, answer_phrase=None)).run(QUESTION)
    assert direct.answer_check is not None and direct.answer_check["second"] is not None  # it looked again
    engine = ActiveRAGQueryEngine(tiny_lm, FakeLIRetriever(), **recipe("look-again"), top_k=2, max_new_tokens=12,
                                  answer_phrase=None, streaming=True)
    response = engine.query(QUESTION)
    assert isinstance(response, StreamingResponse)
    assert "".join(response.response_gen).strip() == direct.answer
    starts = [e for e in collector.events if isinstance(e, LLMCompletionStartEvent)]
    ends = [e for e in collector.events if isinstance(e, LLMCompletionEndEvent)]
    first, second = direct.retrievals
    assert [s.additional_kwargs["passage_ids"] for s in starts] == [first.held_ids, second.held_ids]
    assert all(f"Passage {i} for" in starts[1].prompt for i in range(2)) and "T2.0" in starts[1].prompt
    assert "T2.0" not in starts[0].prompt
    kept = ends[0] if direct.answer_check["kept"] == "draft" else ends[1]
    assert kept.response.text.strip() == direct.answer


def test_a_second_answer_longer_than_its_draft_is_one_completion(tiny_lm: ActiveLM, collector: Collector) -> None:
    from llama_index.core.instrumentation.events.llm import LLMCompletionEndEvent, LLMCompletionStartEvent

    from active_rag import Retrieval, TokenEvent
    from llamaindex_active_rag.engine_call import GenerationTrace

    a, b, c = (Passage(id=i, title=i.upper(), text=f"Passage {i} text.") for i in "abc")
    rag = ActiveRAG(tiny_lm, LlamaIndexRetrieverAdapter(FakeLIRetriever()), **recipe("look-again"))
    trace = GenerationTrace(rag, QUESTION, {"model_name": "tiny"})

    def say(words: list[str], ids: list[str], attempt: int) -> None:
        for n, w in enumerate(words):
            trace.token(TokenEvent(w, 1, -0.1, 0.1, n, passage_ids=ids, attempt=attempt))

    trace.retrieval(Retrieval(position=0, query=QUESTION, passages=[a, b], trigger="once", held_ids=["a", "b"]))
    say(["Peter", " Schmeichel"], ["a", "b"], 0)
    trace.retrieval(Retrieval(position=2, query=QUESTION, passages=[c], trigger="answer-check", held_ids=["a", "b", "c"]))
    say(["His", " father", " is", " Peter", "."], ["a", "b", "c"], 1)
    say(["Peter", " Schmeichel"], ["a", "b"], 0)  # the draft kept: streamed again, not generated again
    trace.close()
    ends = [e for e in collector.events if isinstance(e, LLMCompletionEndEvent)]
    starts = [e for e in collector.events if isinstance(e, LLMCompletionStartEvent)]
    assert [e.response.text for e in ends] == ["Peter Schmeichel", "His father is Peter."]
    assert [s.additional_kwargs["passage_ids"] for s in starts] == [["a", "b"], ["a", "b", "c"]]
    assert "Passage c" in starts[1].prompt and "Passage c" not in starts[0].prompt


def test_streaming_joins_to_the_answer_when_the_engine_forces_the_phrase(tiny_lm: ActiveLM) -> None:
    """The random model writes no complete sentence; the engine closes it and forces "So the answer is" after it
    (DRAGIN App. B), cutting nothing, so the stream sends the model's tokens as they come and joins to the answer."""
    kwargs: dict[str, Any] = dict(preset="sr-rag", top_k=2, max_new_tokens=5, answer_phrase="So the answer is")
    question = "Who is older, Kasper Schmeichel or Peter Schmeichel?"
    full = ActiveRAGQueryEngine(tiny_lm, FakeLIRetriever(), **kwargs).query(question)
    streaming = ActiveRAGQueryEngine(tiny_lm, FakeLIRetriever(), streaming=True, **kwargs).query(question)
    assert ". So the answer is" in full.response
    pieces = [piece for piece in streaming.response_gen if piece]
    assert "".join(pieces) == full.response and len(pieces) > 5
