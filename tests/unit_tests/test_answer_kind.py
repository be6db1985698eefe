"""A draft that is not of the kind its question asks for (a year, a date, a number) is unsure
(:mod:`active_rag.methods.answer_kind`, ``AnswerCheck(answer_kind=True)``, on in ``look-again-choose``), and rows written
before the rule carry over except the questions it sends on."""

from __future__ import annotations

import pytest

from active_rag import ActiveRAG, AnswerCheck, AnswerStage
from active_rag.evaluation.settled import convert_row, kept_wrong_kind
from active_rag.methods.answer_check import answer_confidence
from active_rag.methods.answer_kind import answers_kind, asked_kind
from active_rag.methods.presets import PRESETS
from tests.unit_tests.test_loop import ScriptedLM, Word, words
from tests.unit_tests.test_read_choice import Corpus, words_steps

YEAR_Q = ("A Japanese manga series based on a 16 year old high school student Ichitaka Seto, is written and "
          "illustrated by someone born in what year?")


@pytest.mark.parametrize("question, kind", [
    (YEAR_Q, "year"),
    ("In which year was the company founded?", "year"),
    ("When was the British author who wrote the novel born?", "date"),
    ("On what date did the war end?", "date"),
    ("How many people live in the town where Annie Morton was born?", "number"),
    ("How old was Terry Richardson in 2000?", "number"),
    ("Is it dangerous to consume chlorine when mixed with sodium?", None),  # "when" as a conjunction
    ("Who is older, Annie Morton or Terry Richardson?", None),
    ("What government position was held by the woman who portrayed Corliss Archer?", None),
])
def test_the_question_says_what_kind_of_answer_it_asks_for(question: str, kind: str | None) -> None:
    assert asked_kind(question) == kind


@pytest.mark.parametrize("answer, kind, fits", [
    ("Yōzaburō Kanari", "year", False),
    ("1962", "year", True),
    ("the 8th century", "year", True),
    ("Reading Post", "date", False),
    ("7 January 1936", "date", True),
    ("between the eighth and sixteenth centuries", "date", True),
    ("March", "date", True),
    ("Rip Off Press", "date", False),
    ("twelve", "number", True),
    ("3,677", "number", True),
    ("a lot", "number", False),
    ("March", "number", False),  # a month is no count
    ("", "year", False),
    ("Paris", None, True),
])
def test_an_answer_is_of_the_kind_when_it_holds_a_number_or_a_date(answer: str, kind: str | None, fits: bool) -> None:
    assert answers_kind(answer, kind) is fits


def test_a_sure_draft_of_the_wrong_kind_is_unsure_and_one_of_the_right_kind_stands() -> None:
    check = AnswerCheck(theta=0.5, ground_draft=True, answer_kind=True)
    name = answer_confidence(words_steps("So the answer is Yōzaburō Kanari.", 0.99))
    year = answer_confidence(words_steps("So the answer is 1962.", 0.99))
    found = "Yōzaburō Kanari (born 1962) writes manga."
    assert check.unsure(name, found, YEAR_Q) and check.wrong_kind(name, YEAR_Q) == "year"
    assert not check.unsure(year, found, YEAR_Q) and check.wrong_kind(year, YEAR_Q) is None
    assert not check.unsure(name, found, "Who writes the manga?")  # a name answers "who"
    plain = AnswerCheck(theta=0.5, ground_draft=True)
    assert not plain.unsure(name, found, YEAR_Q) and plain.wrong_kind(name, YEAR_Q) is None
    assert check.describe()["answer_kind"] is True and "answer_kind" not in plain.describe()
    assert PRESETS["look-again-choose"].answer.check.answer_kind  # type: ignore[union-attr]


def test_look_again_choose_looks_again_after_a_name_for_a_year_and_says_why() -> None:
    question = "Terry Richardson was born in what year?"
    prompts: list[str] = []

    def script(prompt: str) -> list[Word]:
        prompts.append(prompt)
        if "Terry Richardson (born 1965)" in prompt:
            return words("Terry was born in 1965. So the answer is 1965.")
        return words("So the answer is Annie Morton.", Annie=(0.99, 0.1), Morton=(0.99, 0.1))

    def run(kind: bool) -> ActiveRAG:
        check = AnswerCheck(theta=0.5, select="second", query="choose", ground_draft=True, answer_kind=kind)
        return ActiveRAG.from_preset("look-again-choose", ScriptedLM(script=script), Corpus(), top_k=2,
                                     answer=AnswerStage(check=check))

    result = run(True).run(question)
    decision = next(d for d in result.decisions if d.trigger == "answer-check")
    assert decision.fire and decision.reason == "answer 'Annie Morton' is not a year, which the question asks for"
    assert len(result.retrievals) == 2 and result.answer.endswith("So the answer is 1965.")
    stood = run(False).run(question)  # the draft is sure and found in its passages: without the rule it stands
    assert len(stood.retrievals) == 1 and stood.answer.endswith("So the answer is Annie Morton.")


def _row(question: str, answer: str, fired: bool, tokens: int = 2) -> dict:
    return {"question": question, "engine_key": "old", "answer": answer,
            "answer_check": {"fired": fired, "draft": {"answer": answer, "tokens": tokens}}}


def test_rows_written_before_the_rule_carry_over_except_a_kept_draft_of_the_wrong_kind() -> None:
    wrong = _row(YEAR_Q, "Yōzaburō Kanari", fired=False)
    right = _row(YEAR_Q, "1962", fired=False)
    looked = _row(YEAR_Q, "Yōzaburō Kanari", fired=True)  # the check sent it on already: nothing changes
    who = _row("Who writes the manga?", "Yōzaburō Kanari", fired=False)
    assert kept_wrong_kind(wrong) and not any(kept_wrong_kind(r) for r in (right, looked, who))
    assert convert_row(wrong, "new", "answer-kind") is None
    for row in (right, looked, who):
        converted = convert_row(row, "new", "answer-kind")
        assert converted is not None and converted["engine_key"] == "new" and converted["settled_from"] == "old"
    assert convert_row(wrong, "new", "compare-look") is not None  # only the answer-kind rule asks again
