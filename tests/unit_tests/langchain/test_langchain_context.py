"""The context policy (issue 28) as a LangChain configurable field: a run gives the engine's answer and trace."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler

import active_rag
from langchain_active_rag import ActiveRAG
from tests.recipes import adapter_kwargs, build, recipe

QUESTION = "Who is the father of Kasper Schmeichel?"
POLICIES = ["replace", "keep-newest", "accumulate", "rerank"]


@pytest.mark.parametrize("policy", POLICIES)
def test_context_is_a_configurable_field_and_the_run_is_the_engines(tiny_lm, bm25_retriever, policy: str) -> None:
    rag = ActiveRAG(tiny_lm, bm25_retriever, preset="fs-rag", max_new_tokens=24, top_k=2).as_configurable()
    out = rag.with_config(configurable={"context": policy}).invoke(QUESTION)
    engine = active_rag.ActiveRAG.from_preset("fs-rag", tiny_lm, bm25_retriever.index, max_new_tokens=24, top_k=2,
                                              context=policy).run(QUESTION)
    assert out["answer"] == engine.answer
    assert out["trace"] == [r.to_dict() for r in engine.retrievals]
    assert all("held_ids" in r for r in out["trace"])


def test_context_field_and_per_call_override(tiny_lm, bm25_retriever) -> None:
    rag = ActiveRAG(tiny_lm, bm25_retriever, preset="fs-rag", max_new_tokens=24, top_k=2, context="accumulate")
    assert rag.build_engine().context.name == "accumulate"
    assert rag.build_engine(context="rerank").context.name == "rerank"
    assert ActiveRAG(tiny_lm, bm25_retriever, preset="dragin").build_engine().context.name == "replace"


@pytest.mark.parametrize("preset", ["look-again", "look-again-grounded", "look-again-linked", "look-again-linked-second",
                                    "follow-bridge-reanswer"])
def test_a_second_answer_streams_and_invokes_as_the_engines(tiny_lm, bm25_retriever, preset: str) -> None:
    """The presets that write the answer again: the invoked and the streamed answer are the engine's kept answer
    (the draft's chunks are not joined to it), and the trace is the engine's."""
    rag = ActiveRAG(tiny_lm, bm25_retriever, **adapter_kwargs(preset, langchain=True), max_new_tokens=16, top_k=2)
    engine = build(preset, tiny_lm, bm25_retriever.index, max_new_tokens=16, top_k=2).run(QUESTION)
    out = rag.invoke(QUESTION)
    assert out["answer"] == engine.answer
    assert out["trace"] == [r.to_dict() for r in engine.retrievals]
    assert "".join(rag.pick("answer").stream(QUESTION)).strip() == engine.answer


@pytest.mark.parametrize("preset", ["sr-rag-linked", "sr-rag-choose"])
def test_sr_rag_linked_invokes_streams_and_configures_as_the_engines(tiny_lm, bm25_retriever, preset) -> None:
    """``sr-rag-linked`` (and ``sr-rag-choose``): two retrievals before the first token (the question's passages,
    then the articles they link to) through the LangChain retriever; the answer and trace are the engine's, the
    choice included, also as a run-time preset."""
    engine = active_rag.ActiveRAG.from_preset(preset, tiny_lm, bm25_retriever.index, max_new_tokens=16,
                                              top_k=2).run(QUESTION)
    assert [(r.formulator, r.position) for r in engine.retrievals] == [("input", 0), ("linked", 0)]
    rag = ActiveRAG(tiny_lm, bm25_retriever, preset=preset, max_new_tokens=16, top_k=2)
    out = rag.invoke(QUESTION)
    assert out["answer"] == engine.answer and out["trace"] == [r.to_dict() for r in engine.retrievals]
    assert ("choice" in out["trace"][1]) == (preset == "sr-rag-choose") and "linked_names" in out["trace"][1]
    assert "".join(rag.pick("answer").stream(QUESTION)).strip() == engine.answer
    configurable = ActiveRAG(tiny_lm, bm25_retriever, preset="sr-rag", max_new_tokens=16, top_k=2).as_configurable()
    assert configurable.invoke(QUESTION, {"configurable": {"preset": preset}})["trace"] == out["trace"]


class _ChatRuns(BaseCallbackHandler):
    def __init__(self) -> None:
        self.prompts: list[str] = []
        self.outputs: list[str] = []

    def on_chat_model_start(self, serialized: Any, messages: list[list[Any]], **kw: Any) -> None:
        self.prompts.append("\n".join(str(m.content) for m in messages[0]))

    def on_llm_end(self, response: Any, **kw: Any) -> None:
        self.outputs.append(response.generations[0][0].message.content)


def test_the_traced_runs_show_what_each_answer_was_written_from(tiny_lm, bm25_retriever) -> None:
    """``look-again`` on a random model: the draft (the question's first passages) and the second answer (every
    passage the prompt holds after the look) are two chat-model runs whose prompts hold exactly those passages;
    the kept draft's replay is not a third run."""
    # without the preset's answer phrase: the random model writes no sentence, so the forced phrase would rewind it
    engine = active_rag.ActiveRAG(tiny_lm, bm25_retriever.index, **recipe("look-again", max_new_tokens=16, top_k=2, answer_phrase=None)).run(QUESTION)
    assert engine.answer_check is not None and engine.answer_check["second"] is not None  # it looked again
    first, second = engine.retrievals
    runs = _ChatRuns()
    ActiveRAG(tiny_lm, bm25_retriever, **adapter_kwargs("look-again", langchain=True), max_new_tokens=16, top_k=2,
              answer_phrase=None).invoke(QUESTION, {"callbacks": [runs]})
    assert len(runs.prompts) == 2
    by_id = {p.id: p for r in engine.retrievals for p in r.passages}
    for prompt, held in zip(runs.prompts, [first.held_ids, second.held_ids], strict=True):
        assert held and all(by_id[i].text in prompt for i in held)
    assert not any(p.text in runs.prompts[0] for p in second.passages)  # the next passages came only with the look
    kept = runs.outputs[0] if engine.answer_check["kept"] == "draft" else runs.outputs[1]
    assert kept.strip() == engine.answer


def test_a_second_answer_longer_than_its_draft_is_one_run(tiny_lm, bm25_retriever) -> None:
    """The second answer passes the draft's length (where the look's retrieval sits) without a new run."""
    from active_rag import Passage, Retrieval, TokenEvent
    from langchain_active_rag.tracing import GenerationTracer

    a, b, c = (Passage(id=i, title=i.upper(), text=f"Passage {i} text.") for i in "abc")
    engine = active_rag.ActiveRAG(tiny_lm, bm25_retriever.index, **recipe("look-again"))
    runs = _ChatRuns()
    tracer = GenerationTracer({"callbacks": [runs]}, tiny_lm, engine.prompt, QUESTION, max_new_tokens=16,
                              prompt_mode=engine.prompt_mode)

    def say(words: list[str], ids: list[str], attempt: int) -> None:
        for n, w in enumerate(words):
            tracer.token(TokenEvent(w, 1, -0.1, 0.1, n, passage_ids=ids, attempt=attempt))

    tracer.retrieval(Retrieval(position=0, query=QUESTION, passages=[a, b], trigger="once", held_ids=["a", "b"]))
    say(["Peter", " Schmeichel"], ["a", "b"], 0)
    tracer.retrieval(Retrieval(position=2, query=QUESTION, passages=[c], trigger="answer-check",
                               held_ids=["a", "b", "c"]))
    say(["His", " father", " is", " Peter", "."], ["a", "b", "c"], 1)
    say(["Peter", " Schmeichel"], ["a", "b"], 0)  # the draft kept: streamed again, not generated again
    tracer.finish()
    assert runs.outputs == ["Peter Schmeichel", "His father is Peter."]
    assert "Passage c" not in runs.prompts[0] and all(f"Passage {i}" in runs.prompts[1] for i in "abc")


def test_answer_options_reach_the_engine_from_langchain(tiny_lm, bm25_retriever) -> None:
    """``answer_options`` through ``engine_options`` (and the preset that sets it): a choice question's answer is
    one of its options."""
    question = "Who is older, Kasper Schmeichel or Peter Schmeichel?"
    rag = ActiveRAG(tiny_lm, bm25_retriever, preset="sr-rag", max_new_tokens=24, top_k=2,
                    answer_phrase="So the answer is", engine_options={"answer_options": True})
    assert rag.build_engine().answer_options is True
    assert ActiveRAG(tiny_lm, bm25_retriever, preset="look-again-grounded").build_engine().answer_options is True
    assert rag.invoke(question)["answer"].rstrip(".").endswith(("So the answer is Kasper Schmeichel",
                                                                "So the answer is Peter Schmeichel"))


@pytest.mark.parametrize("options", [False, True])
def test_the_invoked_answer_is_the_engines_when_it_forces_the_phrase(tiny_lm, bm25_retriever, options) -> None:
    """The random model writes no complete sentence; the engine closes it and forces "So the answer is" (DRAGIN
    App. B) after it, cutting nothing, so the stream's chunks come as the tokens do and join to the engine's
    answer as ``invoke`` does."""
    question = "Who is older, Kasper Schmeichel or Peter Schmeichel?"
    kwargs = dict(max_new_tokens=24, top_k=2, answer_phrase="So the answer is")
    engine = active_rag.ActiveRAG.from_preset("sr-rag", tiny_lm, bm25_retriever.index, answer_options=options,
                                              **kwargs).run(question)
    rag = ActiveRAG(tiny_lm, bm25_retriever, preset="sr-rag", engine_options={"answer_options": options}, **kwargs)
    assert ". So the answer is" in engine.answer
    assert rag.invoke(question)["answer"] == engine.answer
    chunks = [c["answer"] for c in rag.stream(question) if c.get("answer")]
    assert len(chunks) > 10  # token by token, not one sentence at the end
    assert "".join(chunks) == engine.answer
