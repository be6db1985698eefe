"""Unit tests of active_rag.components.routing: the authors' TA-ARE and vanilla prompts, verdict parsing, decisions
with a stub model, and demonstration choice by embedding similarity."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

import active_rag
from active_rag.errors import UnknownNameError
from active_rag.components.routing import (
    ROUTERS,
    Demonstration,
    TaAreRouter,
    VanillaRouter,
    default_demonstrations,
    make_router,
    parse_decision,
)
from active_rag.types import RouteDecision

PROMPTS_FILE = Path(active_rag.__file__).parent / "data" / "ta_are_prompts.json"
QUESTION = "Who won the 2024 Ballon d'Or?"


@pytest.fixture(scope="module")
def authors() -> dict:
    """The authors' templates, read straight from the bundled JSON (not through the module's cache)."""
    return json.loads(PROMPTS_FILE.read_text(encoding="utf-8"))


class StubModel:
    """Stands in for ActiveLM: ``complete`` returns a fixed reply and records its calls."""

    def __init__(self, reply: str = "[Yes]") -> None:
        self.reply = reply
        self.calls: list[tuple[str, int]] = []

    def complete(self, prompt: str, *, max_new_tokens: int = 32, **kwargs: object) -> str:
        self.calls.append((prompt, max_new_tokens))
        return self.reply


# -- prompts -------------------------------------------------------------------------------------------
def test_ta_are_default_prompt_is_the_authors_template(authors) -> None:
    template = authors["prompt_templates"]["openai_chat_adaptive_retrieval_TAARE"]
    expected = template.format(today="2024-03-01", fewshot_examples=authors["fewshot_examples_raw"], question=QUESTION)
    router = TaAreRouter(StubModel(), today=dt.date(2024, 3, 1))
    assert router.prompt(QUESTION) == expected
    assert expected.startswith("Today is 2024-03-01. Given a question")
    assert "Question: What is Walter de la Pole's occupation?\nAnswer: [Yes].\n\n\n\nQuestion: " + QUESTION in expected
    assert TaAreRouter(StubModel(), today="2024-03-01").prompt(QUESTION) == expected


def test_ta_are_default_today_is_the_current_date(authors) -> None:
    before = dt.date.today().strftime("%Y-%m-%d")
    text = TaAreRouter(StubModel()).prompt(QUESTION)
    after = dt.date.today().strftime("%Y-%m-%d")
    assert text.startswith(f"Today is {before}.") or text.startswith(f"Today is {after}.")


def test_default_demonstrations_render_the_authors_few_shot_block(authors) -> None:
    demos = default_demonstrations()
    assert [d.needs_retrieval for d in demos] == [False, True, False, True]
    assert "".join(d.render() for d in demos) == authors["fewshot_examples_raw"]


def test_vanilla_prompt_is_the_authors_template(authors) -> None:
    expected = authors["prompt_templates"]["openai_chat_adaptive_retrieval"].format(question=QUESTION)
    assert VanillaRouter(StubModel()).prompt(QUESTION) == expected
    assert "Today is" not in expected and "[Yes]" in expected
    braces = "What does {x} mean in f-strings?"
    assert VanillaRouter(StubModel()).prompt(braces).endswith(f"Question: {braces}\nAnswer:")


# -- parse_decision ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "output, expected",
    [
        ("[Yes]", True),
        ("[No]", False),
        ("[No].", False),
        (" [ yes ] because it changes", True),
        ("Yes.", True),
        ("no", False),
        ("Answer: [NO]", False),
        ("[No]. Actually [Yes]", False),  # the first verdict wins
        ("yes or no? No.", True),
        ("I cannot tell.", None),
        ("Nobody knows; yesterday it was", None),
        ("", None),
    ],
)
def test_parse_decision(output: str, expected: bool | None) -> None:
    assert parse_decision(output) is expected


# -- decide --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls, name", [(TaAreRouter, "ta-are"), (VanillaRouter, "vanilla")])
@pytest.mark.parametrize("reply, retrieve", [("[Yes]", True), ("[No].", False), ("hmm, unsure", False), ("Yes\nI do", True)])
def test_decide_with_a_stub_model(cls, name: str, reply: str, retrieve: bool) -> None:
    """The authors' reading (RetrievalQA check_string_exist after postprocess_output): no "yes" word, no retrieval."""
    model = StubModel(reply)
    router = cls(model)
    decision = router.decide(QUESTION)
    assert isinstance(decision, RouteDecision)
    assert decision == RouteDecision(retrieve=retrieve, router=name, raw_output=reply, prompt=router.prompt(QUESTION))
    assert model.calls == [(router.prompt(QUESTION), 8)]


def test_decide_default_and_max_new_tokens() -> None:
    model = StubModel("garbage")
    decision = TaAreRouter(model, default=False, max_new_tokens=3).decide(QUESTION)
    assert decision.retrieve is False and decision.raw_output == "garbage"
    assert model.calls[0][1] == 3
    assert VanillaRouter(StubModel("[No]"), default=True).decide(QUESTION).retrieve is False


# -- demonstrations by similarity ----------------------------------------------------------------------
def bag_of_letters(texts: list[str]) -> list[list[float]]:
    return [[float(t.lower().count(chr(c))) for c in range(ord("a"), ord("z") + 1)] for t in texts]


def test_demonstrations_chosen_by_embedding_similarity(authors) -> None:
    question = "Who directed the film Ed Wood?"
    pool = [
        Demonstration("What is the population of Ulaanbaatar in 2024?", True),
        Demonstration("Who directed the film Ed Wood?", False),  # identical, but needs no retrieval: never chosen
        Demonstration("Who directed the movie Ed Wood?", True),
        Demonstration("xyzzy qqq kkk", True),
        Demonstration("Who directed the film Ed Wood (1994)?", True),
        Demonstration("Which bank owns Zurich Kantonal?", True),
    ]
    calls: list[list[str]] = []

    def embed(texts: list[str]) -> list[list[float]]:
        calls.append(list(texts))
        return bag_of_letters(texts)

    router = TaAreRouter(StubModel(), today="2024-03-01", pool=pool, embed=embed)
    assert calls == [[d.question for d in pool if d.needs_retrieval]]  # the pool is embedded once
    chosen = router.choose_demonstrations(question)
    fixed_no = [d for d in default_demonstrations() if not d.needs_retrieval]
    assert chosen == [fixed_no[0], pool[4], fixed_no[1], pool[2]]  # No, most similar Yes, No, next Yes
    fewshot = "".join(d.render() for d in chosen)
    template = authors["prompt_templates"]["openai_chat_adaptive_retrieval_TAARE"]
    assert router.prompt(question) == template.format(today="2024-03-01", fewshot_examples=fewshot, question=question)
    assert calls[-1] == [question]


def test_pool_without_embed_is_rejected() -> None:
    with pytest.raises(ValueError, match="embed"):
        TaAreRouter(StubModel(), pool=[Demonstration("q?", True)])


# -- make_router ---------------------------------------------------------------------------------------
def test_make_router() -> None:
    model = StubModel()
    assert set(ROUTERS) == {"ta-are", "vanilla"}
    ta = make_router("ta-are", model, today="2024-03-01")
    assert isinstance(ta, TaAreRouter) and ta.model is model and ta.today_text() == "2024-03-01"
    assert isinstance(make_router("vanilla", model), VanillaRouter)
    assert make_router(None, model) is None and make_router("none", model) is None
    with pytest.raises(UnknownNameError) as err:
        make_router("oracle", model)
    assert "'oracle'" in str(err.value) and err.value.valid == ["none", "ta-are", "vanilla"]


@pytest.mark.parametrize("cls", [TaAreRouter, VanillaRouter])
def test_first_verdict_parser_falls_back_to_default(cls) -> None:
    assert cls(StubModel("hmm, unsure"), parse="first-verdict").decide(QUESTION).retrieve is True
    assert cls(StubModel("[No]. Actually [Yes]"), parse="first-verdict").decide(QUESTION).retrieve is False
    assert cls(StubModel("[No]. Actually [Yes]")).decide(QUESTION).retrieve is True  # the authors: any "yes" word


def test_authors_decision_matches_the_harness_reading() -> None:
    from active_rag.evaluation.answers import retrievalqa_decision
    from active_rag.components.routing import authors_decision

    for output in ["[Yes].", "Yes, I need to", "[No]", "Yes!", "I don't know", "'yes'", "no, yes."]:
        assert authors_decision(output) is retrievalqa_decision(output)
