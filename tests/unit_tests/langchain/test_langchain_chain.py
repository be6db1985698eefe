"""ActiveRAG as a LangChain Runnable: invoke/batch/stream/async, events, config switching, errors."""

from __future__ import annotations

import functools
import operator
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.runnables import AddableDict, ConfigurableField, RunnableLambda, RunnablePassthrough

import active_rag
from active_rag import ActiveRAGError, BM25Index, EmptyQuestionError, Passage, RetrieverError, UnknownNameError
from langchain_active_rag import (
    DECISION_EVENT,
    RETRIEVAL_EVENT,
    ROUTE_EVENT,
    TOKEN_EVENT,
    ActiveRAG,
    BM25sRetriever,
    ChatActiveHF,
)
from langchain_active_rag._convert import document_id

QUESTION = "Who is the father of Kasper Schmeichel?"
FL = {"preset": "fl-rag", "max_new_tokens": 20}  # retrieves before generating and after 16 tokens


def test_invoke_output_maps_passages_back_to_the_original_documents(tiny_lm, lc_retriever, lc_documents):
    out = ActiveRAG(tiny_lm, lc_retriever, **FL).invoke(QUESTION)
    assert set(out) == {"answer", "short_answer", "documents", "trace"}
    assert isinstance(out["answer"], str) and out["answer"]
    trace = out["trace"]
    assert len(trace) == 2 and trace[0]["position"] == 0 and trace[0]["query"] == QUESTION
    assert trace[1]["position"] == 16 and trace[1]["trigger"] == "fixed-length"
    assert {"token", "score", "threshold", "query", "passage_ids", "position", "titles"} <= set(trace[0])
    # the very Document objects the retriever returned, of the final prompt (FL-RAG's: the last retrieval's)
    assert [document_id(d) for d in out["documents"]] == trace[-1]["held_ids"]
    assert all(any(d is orig for orig in lc_documents) for d in out["documents"])
    # ids: Document.id, then metadata["id"], then a content hash
    assert trace[0]["passage_ids"][:3] == ["doc-0", "meta-1", document_id(lc_documents[2])]
    assert document_id(lc_documents[2]).startswith("sha1-")
    assert trace[0]["titles"][0] == "Kasper Schmeichel"
    # every retrieval went through the LangChain retriever, with k = top_k
    assert lc_retriever.queries == [r["query"] for r in trace]
    assert lc_retriever.ks == [3, 3]


def test_string_and_mapping_inputs_agree_and_match_the_engine(tiny_lm, bm25_retriever):
    rag = ActiveRAG(tiny_lm, bm25_retriever, **FL)
    a = rag.invoke(QUESTION)
    b = rag.invoke({"question": QUESTION})
    engine = active_rag.ActiveRAG.from_preset("fl-rag", tiny_lm, bm25_retriever.index, max_new_tokens=20).run(QUESTION)
    assert a["answer"] == b["answer"] == engine.answer
    assert a["trace"] == b["trace"] == [r.to_dict() for r in engine.retrievals]
    assert [d.id for d in a["documents"]] == engine.final_passage_ids
    assert all(isinstance(d, Document) and d.metadata["title"] for d in a["documents"])


def test_batch_and_abatch_match_invoke(tiny_lm, bm25_retriever):
    rag = ActiveRAG(tiny_lm, bm25_retriever, preset="sr-rag", max_new_tokens=12)
    questions = [QUESTION, "Were Scott Derrickson and Ed Wood American?"]
    expected = [rag.invoke(q) for q in questions]
    assert rag.batch(questions) == expected


async def test_ainvoke_and_abatch(tiny_lm, bm25_retriever):
    rag = ActiveRAG(tiny_lm, bm25_retriever, preset="sr-rag", max_new_tokens=12)
    expected = rag.invoke(QUESTION)
    assert await rag.ainvoke(QUESTION) == expected
    assert await rag.abatch([QUESTION, {"question": QUESTION}]) == [expected, expected]


def _add(chunks: list[Any]) -> Any:
    return functools.reduce(operator.add, chunks)


def _check_stream(chunks: list[dict[str, Any]], tokens_expected: int) -> dict[str, Any]:
    """The chunks are AddableDicts that add up to the output; retrievals first (FL-RAG), then answer text."""
    assert all(isinstance(c, AddableDict) for c in chunks)
    total = _add(chunks)
    assert set(total) == {"answer", "short_answer", "documents", "trace"}
    pieces = [c["answer"] for c in chunks if "answer" in c]
    assert "".join(pieces) == total["answer"] and total["answer"] == total["answer"].strip()
    assert 0 < len(pieces) <= tokens_expected  # whitespace-only tokens travel with the next piece
    retrievals = [c for c in chunks if "trace" in c]
    assert [r for c in retrievals for r in c["trace"]] == total["trace"]
    assert all(len(c["trace"]) == 1 and set(c) == {"trace"} for c in retrievals)
    # the final prompt's Documents come once, with the short answer
    assert [document_id(d) for d in total["documents"]] == total["trace"][-1]["held_ids"]
    # the engine streams a segment's tokens once it accepts them: FL-RAG retrieves with the input, generates
    # a 16-token window, retrieves after it (position 16), then accepts the window and goes on
    kinds = ["t" if "answer" in c else "r" if "trace" in c else "s" for c in chunks]
    assert kinds == ["r", "r"] + ["t"] * len(pieces) + ["s"]  # the short answer last, once the answer is known
    assert chunks[-1] == {"documents": total["documents"], "short_answer": total["short_answer"]}
    assert [r["position"] for r in total["trace"]] == [0, 16]
    return total


def test_stream_yields_tokens_and_retrievals_as_they_happen(tiny_lm, lc_retriever):
    rag = ActiveRAG(tiny_lm, lc_retriever, **FL)
    final = _check_stream(list(rag.stream(QUESTION)), 20)
    lc_retriever.queries.clear()  # the recording retriever rotates its documents per call
    assert final == rag.invoke(QUESTION)


def test_pick_answer_streams_plain_text(tiny_lm, bm25_retriever):
    rag = ActiveRAG(tiny_lm, bm25_retriever, **FL)
    pieces = list(rag.pick("answer").stream(QUESTION))
    assert pieces and all(isinstance(p, str) for p in pieces)
    assert "".join(pieces) == rag.invoke(QUESTION)["answer"]
    assert _add(list(rag.pick(["documents", "trace"]).stream(QUESTION))) == {
        k: v for k, v in rag.invoke(QUESTION).items() if k not in ("answer", "short_answer")
    }


def test_no_retrieval_and_empty_answer_still_add_up(tiny_lm):
    out = list(ActiveRAG(tiny_lm, preset="wo-rag", max_new_tokens=3).stream(QUESTION))
    total = _add(out)
    assert total["documents"] == [] and total["trace"] == [] and isinstance(total["answer"], str)


async def test_astream(tiny_lm, lc_retriever):
    rag = ActiveRAG(tiny_lm, lc_retriever, **FL)
    _check_stream([c async for c in rag.astream({"question": QUESTION})], 20)


async def test_astream_events_v2_nests_retrievers_and_dispatches_custom_events(tiny_lm, lc_retriever):
    rag = ActiveRAG(tiny_lm, lc_retriever, **FL)
    events = [e async for e in rag.astream_events(QUESTION, version="v2")]
    (start,) = [e for e in events if e["event"] == "on_chain_start"]
    chain_id = start["run_id"]
    assert start["name"] == "ActiveRAG"
    retriever_starts = [e for e in events if e["event"] == "on_retriever_start"]
    assert len(retriever_starts) == 2
    for e in retriever_starts:
        assert e["name"] == "RecordingRetriever"
        assert e["parent_ids"] == [chain_id]
    assert len([e for e in events if e["event"] == "on_retriever_end"]) == 2
    everything = [e for e in events if e["event"] == "on_custom_event"]
    assert all(e["run_id"] == chain_id for e in everything)
    # every trigger decision is an event too (fired or not), each fired one followed by its retrieval
    decisions = [e for e in everything if e["name"] == DECISION_EVENT]
    assert decisions and all({"fire", "trigger", "score", "threshold"} <= set(e["data"]) for e in decisions)
    custom = [e for e in everything if e["name"] == RETRIEVAL_EVENT]
    assert len(custom) == 2
    for e in custom:
        assert {"token", "score", "query", "threshold", "position", "passage_ids"} <= set(e["data"])
    (end,) = [e for e in events if e["event"] == "on_chain_end"]
    assert [e["data"] for e in custom] == end["data"]["output"]["trace"]
    tokens = [e["data"] for e in everything if e["name"] == TOKEN_EVENT]
    assert [t["position"] for t in tokens] == list(range(20))
    assert all({"text", "token_id", "logprob", "entropy"} <= set(t) for t in tokens)
    streamed = [e["data"]["chunk"] for e in events if e["event"] == "on_chain_stream"]
    assert _add(streamed) == end["data"]["output"]
    # order: custom event for a retrieval precedes the retrieval's own stream chunk
    order = [
        e["event"] for e in events
        if e["event"] == "on_retriever_start" or (e["event"] == "on_custom_event" and e["name"] == RETRIEVAL_EVENT)
    ]
    assert order == ["on_retriever_start", "on_custom_event"] * 2


async def test_generation_is_reported_as_chat_model_runs(tiny_lm, lc_retriever):
    """One chat-model run per segment between retrievals (FL-RAG: tokens 0-15 with the first retrieval's
    passages, 16-19 with the second's), children of the chain like the retriever runs."""
    rag = ActiveRAG(tiny_lm, lc_retriever, **FL)
    events = [e async for e in rag.astream_events(QUESTION, version="v2")]
    chain_id = next(e["run_id"] for e in events if e["event"] == "on_chain_start")
    starts = [e for e in events if e["event"] == "on_chat_model_start"]
    ends = [e for e in events if e["event"] == "on_chat_model_end"]
    assert len(starts) == len(ends) == 2
    assert all(e["parent_ids"] == [chain_id] and e["name"] == "ChatActiveHF" for e in starts)
    assert starts[0]["metadata"]["ls_model_name"] == "tiny-llama" and starts[0]["metadata"]["ls_provider"] == "active_rag"
    first_prompt = starts[0]["data"]["input"]["messages"][0]
    end_output = next(e for e in events if e["event"] == "on_chain_end")["data"]["output"]
    titles = [d.metadata["title"] for d in end_output["documents"]]
    assert QUESTION in first_prompt[0].content and titles[0] in first_prompt[0].content  # the engine's rendered prompt
    assert len(first_prompt) == 1 and starts[1]["data"]["input"]["messages"][0][-1].type == "ai"  # the answer so far
    streams = [e for e in events if e["event"] == "on_chat_model_stream"]
    assert len(streams) == 20
    assert [e["run_id"] for e in streams] == [starts[0]["run_id"]] * 16 + [starts[1]["run_id"]] * 4
    for e in streams:
        entry = e["data"]["chunk"].response_metadata["logprobs"]["content"][0]
        assert entry["token"] == e["data"]["chunk"].content and entry["logprob"] <= 0
    outputs = [e["data"]["output"] for e in ends]
    assert [o.usage_metadata["output_tokens"] for o in outputs] == [16, 4]
    assert all(o.usage_metadata["input_tokens"] > 16 and o.response_metadata["model_name"] == "tiny-llama" for o in outputs)
    assert "".join(o.content for o in outputs).strip() == end_output["answer"]
    # the second segment starts after the second retrieval
    kinds = [e["event"] for e in events if e["event"] in ("on_retriever_start", "on_chat_model_start")]
    assert kinds == ["on_retriever_start", "on_retriever_start", "on_chat_model_start", "on_chat_model_start"]


class Recorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.chains: list[tuple[str, UUID, UUID | None]] = []
        self.retrievers: list[UUID | None] = []
        self.custom: list[tuple[str, Any, UUID]] = []

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any) -> None:
        self.chains.append((kw.get("name") or "", run_id, parent_run_id))

    def on_retriever_start(
        self, serialized: Any, query: str, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any
    ) -> None:
        self.retrievers.append(parent_run_id)

    def on_custom_event(self, name: str, data: Any, *, run_id: UUID, **kw: Any) -> None:
        self.custom.append((name, data, run_id))


@pytest.mark.parametrize("mode", ["invoke", "stream"])
def test_sync_callbacks_see_nested_retrievers_and_custom_events(tiny_lm, lc_retriever, mode):
    rag = ActiveRAG(tiny_lm, lc_retriever, **FL)
    recorder = Recorder()
    config = {"callbacks": [recorder]}
    out = rag.invoke(QUESTION, config) if mode == "invoke" else _add(list(rag.stream(QUESTION, config)))
    ((name, chain_id, parent),) = recorder.chains
    assert name == "ActiveRAG" and parent is None
    assert recorder.retrievers == [chain_id, chain_id]
    retrievals = [(n, d, r) for n, d, r in recorder.custom if n == RETRIEVAL_EVENT]
    assert retrievals == [(RETRIEVAL_EVENT, t, chain_id) for t in out["trace"]]
    assert any(n == DECISION_EVENT for n, _, _ in recorder.custom)


def test_config_switches_the_trigger_at_run_time(tiny_lm, lc_retriever):
    rag = ActiveRAG(tiny_lm, lc_retriever, trigger="fixed-length", max_new_tokens=20).as_configurable()
    assert {"preset", "trigger", "query", "top_k", "max_new_tokens", "max_retrievals"} <= {s.id for s in rag.config_specs}
    default = rag.invoke(QUESTION)
    assert [r["trigger"] for r in default["trace"]] == ["fixed-length"]  # after 16 tokens (no initial retrieval)
    once = rag.with_config(configurable={"trigger": "sr-rag"}).invoke(QUESTION)
    assert [(r["trigger"], r["position"], r["query"]) for r in once["trace"]] == [("once", 0, QUESTION)]
    never = rag.with_config(configurable={"trigger": "never"}).invoke(QUESTION)
    assert never["trace"] == [] and never["documents"] == []
    # a preset switched through config, and a per-field switch of top_k
    fl = rag.with_config(configurable={"trigger": None, "preset": "fl-rag", "top_k": 2}).invoke(QUESTION)
    assert [r["position"] for r in fl["trace"]] == [0, 16]
    assert all(len(r["passage_ids"]) == 2 for r in fl["trace"])
    with pytest.raises(UnknownNameError, match="trigger"):
        rag.with_config(configurable={"trigger": "sometimes"}).invoke(QUESTION)


def test_configurable_alternatives_swap_whole_methods(tiny_lm, lc_retriever):
    chain = ActiveRAG(tiny_lm, lc_retriever, **FL).configurable_alternatives(
        ConfigurableField(id="method"),
        default_key="fl-rag",
        sr_rag=ActiveRAG(tiny_lm, lc_retriever, preset="sr-rag", max_new_tokens=20),
    )
    assert len(chain.invoke(QUESTION)["trace"]) == 2
    assert [r["trigger"] for r in chain.with_config(configurable={"method": "sr_rag"}).invoke(QUESTION)["trace"]] == ["once"]


def test_lcel_composition_and_streaming_through_a_sequence(tiny_lm, bm25_retriever):
    rag = ActiveRAG(tiny_lm, bm25_retriever, preset="sr-rag", max_new_tokens=12)
    chain = {"question": RunnablePassthrough()} | rag | RunnableLambda(lambda o: f"{o['answer']} [{len(o['documents'])} docs]")
    text = chain.invoke(QUESTION)
    assert text.endswith("[3 docs]")
    assert list(chain.stream(QUESTION))[-1] == text


def test_per_call_overrides(tiny_lm, lc_retriever):
    rag = ActiveRAG(tiny_lm, lc_retriever, **FL)
    out = rag.invoke(QUESTION, top_k=1, max_new_tokens=8)
    assert [len(r["passage_ids"]) for r in out["trace"]] == [1]
    assert lc_retriever.ks == [1]
    with pytest.raises(TypeError, match="unexpected keyword"):
        rag.invoke(QUESTION, temperature=1.0)


def test_trigger_alone_picks_its_paper_query(tiny_lm, lc_retriever):
    rag = ActiveRAG(tiny_lm, lc_retriever, trigger="fixed-length", max_new_tokens=20)
    assert rag.build_engine().query.name == "last-tokens"
    assert ActiveRAG(tiny_lm, lc_retriever, trigger="flare").build_engine().query.name == "masked-sentence"
    # a preset's own query stays unless the trigger is overridden
    assert ActiveRAG(tiny_lm, lc_retriever, preset="dragin").build_engine().method == "dragin"
    assert ActiveRAG(tiny_lm, lc_retriever, preset="dragin", trigger="fl-rag").build_engine().method == "fixed-length+last-tokens"
    assert ActiveRAG(tiny_lm, lc_retriever, preset="dragin", query="full-context").build_engine().query.name == "full-context"


def test_model_as_chat_model_and_retriever_as_engine_index(tiny_lm):
    index = BM25Index.from_passages([Passage(id=f"p{i}", text=t) for i, t in enumerate(["alpha beta", "gamma delta"])])
    rag = ActiveRAG(ChatActiveHF(lm=tiny_lm), index, preset="sr-rag", max_new_tokens=6)
    assert isinstance(rag.retriever, BM25sRetriever)
    out = rag.invoke("alpha?")
    engine = active_rag.ActiveRAG.from_preset("sr-rag", tiny_lm, index, max_new_tokens=6).run("alpha?")
    assert [d.id for d in out["documents"]] == engine.final_passage_ids and out["documents"][0].id == "p0"


def test_engine_router_adds_route_to_output_stream_and_events(tiny_lm, lc_retriever):
    rag = ActiveRAG(tiny_lm, lc_retriever, preset="sr-rag", max_new_tokens=6, router="vanilla")
    recorder = Recorder()
    chunks = list(rag.stream(QUESTION, {"callbacks": [recorder]}))
    assert set(chunks[0]) == {"route"} and chunks[0]["route"]["router"] == "vanilla"
    assert _add(chunks)["route"] == chunks[0]["route"] == rag.invoke(QUESTION)["route"]
    assert {"retrieve", "router", "raw_output"} == set(chunks[0]["route"])
    assert recorder.custom[0][:2] == (ROUTE_EVENT, chunks[0]["route"])


# -- errors surface unchanged -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("question", "error"),
    [("", EmptyQuestionError), ("   ", EmptyQuestionError), ({"question": ""}, EmptyQuestionError),
     ({"question": None}, ActiveRAGError)],
)
def test_empty_question_raises_the_engine_error(tiny_lm, lc_retriever, question, error):
    rag = ActiveRAG(tiny_lm, lc_retriever, preset="sr-rag")
    with pytest.raises(error):
        rag.invoke(question)
    with pytest.raises(error):
        list(rag.stream(question))
    assert lc_retriever.queries == []


async def test_empty_question_async(tiny_lm, lc_retriever):
    rag = ActiveRAG(tiny_lm, lc_retriever, preset="sr-rag")
    with pytest.raises(EmptyQuestionError):
        await rag.ainvoke("")
    with pytest.raises(EmptyQuestionError):
        [c async for c in rag.astream(" ")]


def test_unknown_preset_raises_unknown_name_error(tiny_lm, lc_retriever):
    with pytest.raises(UnknownNameError, match="Unknown method 'dragon'"):
        ActiveRAG(tiny_lm, lc_retriever, preset="dragon").invoke(QUESTION)


def test_failing_retriever_raises_retriever_error_with_cause(tiny_lm, failing_retriever):
    rag = ActiveRAG(tiny_lm, failing_retriever, preset="sr-rag")
    with pytest.raises(RetrieverError, match="FailingRetriever.*index server unreachable") as info:
        rag.invoke(QUESTION)
    assert isinstance(info.value.__cause__, ConnectionError)


async def test_failing_retriever_async_stream(tiny_lm, failing_retriever):
    rag = ActiveRAG(tiny_lm, failing_retriever, preset="sr-rag")
    with pytest.raises(RetrieverError):
        [e async for e in rag.astream_events(QUESTION, version="v2")]


def test_bad_inputs(tiny_lm, lc_retriever):
    rag = ActiveRAG(tiny_lm, lc_retriever, preset="sr-rag")
    with pytest.raises(ValueError, match="no 'question' key"):
        rag.invoke({"query": QUESTION})
    with pytest.raises(TypeError, match="question string"):
        rag.invoke(42)
    with pytest.raises(ValueError, match="no retriever"):
        ActiveRAG(tiny_lm, preset="sr-rag").invoke(QUESTION)
    assert ActiveRAG(tiny_lm, preset="wo-rag", max_new_tokens=4).invoke(QUESTION)["trace"] == []


async def test_astream_stops_generation_when_the_consumer_stops(tiny_lm, lc_retriever):
    rag = ActiveRAG(tiny_lm, lc_retriever, preset="sr-rag", max_new_tokens=200)
    seen = []
    async for chunk in rag.astream(QUESTION):
        seen.append(chunk)
        if len(seen) == 3:
            break
    assert len(seen) == 3


@pytest.mark.parametrize("preset", ["wo-rag", "sr-rag", "sr-rag-linked"])
def test_stream_yields_the_first_token_before_generation_is_finished(tiny_lm, bm25_retriever, generated, preset):
    """A method whose answer no check reads streams each token as it is generated (``generated`` counts them)."""
    rag = ActiveRAG(tiny_lm, bm25_retriever, preset=preset, max_new_tokens=12)
    arrivals = [generated[0] for piece in rag.pick("answer").stream(QUESTION) if piece]
    assert arrivals[0] <= 2 and len(arrivals) > 6  # the first piece after one or two tokens (a lone space waits)


async def test_astream_yields_the_first_token_before_generation_is_finished(tiny_lm, bm25_retriever, generated):
    rag = ActiveRAG(tiny_lm, bm25_retriever, preset="sr-rag", max_new_tokens=12)
    async for chunk in rag.astream(QUESTION):
        if chunk.get("answer"):
            assert generated[0] <= 2
            break
    else:
        raise AssertionError("no answer chunk")


def test_with_config_switches_settings_without_as_configurable(tiny_lm, lc_retriever):
    rag = ActiveRAG(tiny_lm, lc_retriever, trigger="fixed-length", max_new_tokens=20)
    once = rag.with_config(configurable={"preset": "sr-rag", "trigger": None, "top_k": 2}).invoke(QUESTION)
    assert [(r["trigger"], r["position"], len(r["passage_ids"])) for r in once["trace"]] == [("once", 0, 2)]
    assert rag.invoke(QUESTION, {"configurable": {"trigger": "never"}})["trace"] == []
    # a per-call keyword comes first
    assert rag.invoke(QUESTION, {"configurable": {"trigger": "never"}}, trigger="once")["trace"][0]["trigger"] == "once"


def test_input_and_output_schemas_name_the_fields(tiny_lm, lc_retriever):
    rag = ActiveRAG(tiny_lm, lc_retriever, preset="sr-rag")
    output = rag.output_schema.model_json_schema()
    assert set(output["properties"]) == {"answer", "short_answer", "documents", "trace", "route"}
    assert set(output["required"]) == {"answer", "short_answer", "documents", "trace"} and output["title"] == "ActiveRAGOutput"
    assert "question" in str(rag.input_schema.model_json_schema())


def test_the_signature_shows_every_public_parameter():
    import inspect

    params = inspect.signature(ActiveRAG).parameters
    assert list(params)[:2] == ["model", "retriever"]
    assert set(params) == set(ActiveRAG.model_fields)
    for name, field in ActiveRAG.model_fields.items():
        if name not in ("model", "engine_options"):
            assert params[name].default == field.default, name
        assert params[name].annotation is not inspect.Parameter.empty, name
