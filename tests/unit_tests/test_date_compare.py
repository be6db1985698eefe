"""Settling a comparison of dates with the dates the reader wrote (active_rag.answer.dates)."""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path

import pytest

from active_rag import ActiveRAG, AnswerStage
from active_rag.evaluation.scoring import _read_rows
from active_rag.evaluation.settled import settle_row
from active_rag.answer.dates import (
    comparison_direction,
    dates_by_option,
    describe_comparison,
    settle_dates,
)
from active_rag.components.settings import engine_kwargs
from tests.unit_tests.test_loop import ScriptedLM, Word, words
from tests.unit_tests.test_read_choice import Corpus

Q = "Who is older, Annie Morton or Terry Richardson?"
WRONG = ("Annie Morton was born on October 8, 1970, while Terry Richardson was born in 1965. Thus, Annie Morton is "
         "older. So the answer is Annie Morton.")


@pytest.mark.parametrize(("question", "expected"), [
    ("Which film came out first, Thai Mozhi or How To Avoid Everything?", ("earlier", "any")),
    ("Which film was released more recently, Brudebuketten or Clownery?", ("later", "any")),
    ("Which film has the director who died earlier, Agitated Women or An Even Break?", ("earlier", "died")),
    ("Who is younger, Bob Degen or Ashad Ali?", ("later", "born")),
    ("Was David Fennario or Peter Emanuel Falck born first?", ("earlier", "born")),
    ("Which was founded first, Tesla or Ford?", ("earlier", "any")),
    # the options' own words are not the question's direction
    ("Which came out first, The Last Emperor or Older Than America?", ("earlier", "any")),
    ("Who is taller, Bob Degen or Ashad Ali?", None),  # not a comparison in time
    ("When was Tesla founded?", None),  # no options
    ("Which came first and which came later, Tesla or Ford?", None),  # both directions
])
def test_the_direction_and_the_event_come_from_the_question(question: str, expected: tuple[str, str] | None) -> None:
    assert comparison_direction(question) == expected


def test_a_date_belongs_to_the_option_or_to_the_name_the_reasoning_gave_it() -> None:
    text = ("Remember The Day was directed by Henry King. Henry King died on June 29, 1982. Cast Up by the Sea was "
            "directed by John Gavin. John Gavin died on 6 January 1938.")
    assert dates_by_option(text, ("Remember The Day", "Cast Up By The Sea"), "died") == ((1982, 6, 29), (1938, 1, 6))
    mixed = "Since Peer Guldbrandsen was born in 1912 and Franklin Adreon was born in 1902, Peer is older."
    names = "The director of Lykkens Musikanter is Peer Guldbrandsen. The director of Trader Tom is Franklin Adreon. "
    assert dates_by_option(names + mixed, ("Trader Tom", "Lykkens Musikanter"), "born") == ((1902, 0, 0), (1912, 0, 0))


def test_only_dates_of_the_asked_event_count() -> None:
    text = "George Archainbaud was born on May 7, 1890. Ralph Murphy was born on May 1, 1895."
    assert dates_by_option(text, ("George Archainbaud", "Ralph Murphy"), "died") == (None, None)
    assert dates_by_option(text, ("George Archainbaud", "Ralph Murphy"), "born") == ((1890, 5, 7), (1895, 5, 1))


def test_initials_pronouns_old_years_and_numbers_that_are_no_years() -> None:
    initials = "José Echegaray was born on 19 April 1832. P. J. O'Rourke was born on 10 May 1989."
    assert dates_by_option(initials, ("José Echegaray", "P. J. O'Rourke"), "born") == ((1832, 4, 19), (1989, 5, 10))
    pronoun = "Aleksandr Ivanovsky was born first. He was born on 1881, while Arthur Lubin was born on 1898."
    assert dates_by_option(pronoun, ("Aleksandr Ivanovsky", "Arthur Lubin"), "born") == ((1881, 0, 0), (1898, 0, 0))
    old = "Mahbub ul Haq was born on 24 February 1934. Ibn Arabi was born on 12 December 870."
    assert dates_by_option(old, ("Mahbub ul Haq", "Ibn Arabi"), "born") == ((1934, 2, 24), (870, 12, 12))
    runtime = "Glow runs 120 minutes. Dusk runs 95 minutes and came out in 2001. Glow came out in 450 BC."
    assert dates_by_option(runtime, ("Glow", "Dusk")) == (None, (2001, 0, 0))


def test_settle_dates_answers_with_the_option_the_dates_choose() -> None:
    settled = settle_dates(Q, WRONG)
    assert settled is not None and settled.answer == "Terry Richardson"  # older: born earlier, 1965 < 1970
    assert settled.dates == ((1970, 10, 8), (1965, 0, 0)) and settled.direction == "earlier"
    later = settle_dates("Who is younger, Annie Morton or Terry Richardson?", WRONG)
    assert later is not None and later.answer == "Annie Morton"
    line = describe_comparison(settled.to_dict())
    assert line == "earlier by dates of birth: 'Annie Morton' 1970-10-08, 'Terry Richardson' 1965 -> 'Terry Richardson'"


@pytest.mark.parametrize("text", [
    "Annie Morton is older. So the answer is Annie Morton.",  # no dates
    "Annie Morton was born in 1970. So the answer is Annie Morton.",  # one date
    "Annie Morton was born in 1970 and Terry Richardson in 1970. So the answer is Annie Morton.",  # a tie
    "Annie Morton was born in May 1970 and Terry Richardson in 1970. So the answer is Annie Morton.",  # undecided
])
def test_without_two_dates_that_differ_the_readers_answer_stands(text: str) -> None:
    settled = settle_dates(Q, text)
    assert settled is not None and settled.answer is None
    assert describe_comparison(settled.to_dict()).endswith("nothing settled; the reader's answer stands")


def test_a_question_that_compares_nothing_in_time_is_not_touched() -> None:
    assert settle_dates("Who is taller, Annie Morton or Terry Richardson?", WRONG) is None
    assert settle_dates("Who directed Glow?", "Glow (1970) was directed by X. So the answer is X.") is None


def test_the_dates_after_the_answer_phrase_are_not_read() -> None:
    text = "Annie Morton was born in 1970. So the answer is Annie Morton, born 1970; Terry Richardson was born 1965."
    settled = settle_dates(Q, text)
    assert settled is not None and settled.dates[1] is None and settled.answer is None


def _script(prompt: str) -> list[Word]:
    return words(WRONG)


def test_sr_rag_choose_settles_the_short_answer_and_keeps_what_the_model_wrote() -> None:
    result = ActiveRAG.from_preset("sr-rag-choose", ScriptedLM(script=_script), Corpus(), top_k=2).run(Q)
    assert result.answer == WRONG  # the text the model wrote, unchanged
    assert result.short_answer == "Terry Richardson"
    assert result.date_comparison is not None and result.date_comparison["answer"] == "Terry Richardson"
    data = json.loads(json.dumps(result.to_dict()))  # the record is plain data
    assert data["short_answer"] == "Terry Richardson" and data["date_comparison"]["dates"] == [[1970, 10, 8], [1965, 0, 0]]
    plain = ActiveRAG.from_preset("sr-rag-choose", ScriptedLM(script=_script), Corpus(), top_k=2, settle_dates=False)
    unsettled = plain.run(Q)
    assert unsettled.short_answer == "Annie Morton" and unsettled.date_comparison is None
    assert "settle_dates" not in plain.describe()
    assert ActiveRAG.from_preset("sr-rag-choose", ScriptedLM(script=_script), Corpus()).describe()["settle_dates"]


def test_the_flat_name_and_the_papers_methods() -> None:
    assert engine_kwargs({"settle_dates": True})["answer"] == AnswerStage(dates=True)
    result = ActiveRAG.from_preset("sr-rag", ScriptedLM(script=_script), Corpus(), top_k=2).run(Q)
    assert result.short_answer == "Annie Morton" and result.date_comparison is None  # the papers' methods: off


def test_ask_prints_the_dates_compared() -> None:
    from active_rag.cli.commands import _print_checks_and_cost

    result = ActiveRAG.from_preset("sr-rag-choose", ScriptedLM(script=_script), Corpus(), top_k=2).run(Q)
    out = io.StringIO()
    _print_checks_and_cost(result, out)
    assert ("Dates compared: earlier by dates of birth: 'Annie Morton' 1970-10-08, 'Terry Richardson' 1965 -> "
            "'Terry Richardson'") in out.getvalue().splitlines()
    plain = ActiveRAG.from_preset("sr-rag-choose", ScriptedLM(script=_script), Corpus(), top_k=2, settle_dates=False)
    out = io.StringIO()
    _print_checks_and_cost(plain.run(Q), out)
    assert "Dates compared" not in out.getvalue()


def _row(key: str, qid: str = "q1", question: str = Q, prediction: str = WRONG) -> dict:
    return {"id": qid, "question": question, "gold": ["Terry Richardson"], "prediction": prediction,
            "answer": "Annie Morton", "metrics": {"em": 0.0, "f1": 0.0, "precision": 0.0, "recall": 0.0},
            "engine_key": key}


def test_settle_row_rescores_the_written_answer_under_the_new_key() -> None:
    row = settle_row(_row("old"), "new")
    assert row["answer"] == "Terry Richardson" and row["metrics"]["f1"] == 1.0 and row["metrics"]["em"] == 1.0
    assert row["engine_key"] == "new" and row["settled_from"] == "old" and row["date_comparison"]["answer"]
    other = settle_row(_row("old", question="Who directed Glow?"), "new")
    assert other["answer"] == "Annie Morton" and "date_comparison" not in other and other["engine_key"] == "new"
    scored_on_text = settle_row({**_row("old"), "metrics": {"accuracy": 0.0}}, "new")
    assert scored_on_text["metrics"] == {"accuracy": 0.0} and scored_on_text["answer"] == "Annie Morton"


def test_a_resume_settles_the_rows_of_the_engine_without_the_rule_and_sets_them_aside(tmp_path: Path) -> None:
    path = tmp_path / "sr-rag-choose.jsonl"
    rows = [_row("old", "q1"), _row("new", "q2"), _row("old", "q2"), _row("elsewhere", "q3")]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        done = _read_rows(path, "new", unsettled_key="old")
    assert sorted(done) == ["q1", "q2"]
    assert done["q1"]["answer"] == "Terry Richardson" and done["q1"]["settled_from"] == "old"
    assert "settled_from" not in done["q2"]  # a row of the new engine wins over one to settle
    messages = " ".join(str(w.message) for w in caught)
    assert "carried over 1 row(s) written by this method without its answer rules (dates" in messages and "1 row(s) were made with other settings" in messages
    kept = [json.loads(line) for line in path.read_text().splitlines()]
    assert {r["id"] for r in kept} == {"q1", "q2"} and all(r["engine_key"] == "new" for r in kept)
    aside = [json.loads(line) for p in (tmp_path / "other-settings").rglob("*.jsonl") for line in p.read_text().splitlines()]
    assert sorted(r["engine_key"] for r in aside) == ["elsewhere", "old", "old"]  # nothing lost
