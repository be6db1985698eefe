"""Settling a comparison of versions with the versions the reader wrote (active_rag.answer.versions)."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

import pytest

from active_rag import ActiveRAG, AnswerStage
from active_rag.evaluation.scoring import _read_rows
from active_rag.evaluation.settled import convert_row
from active_rag.errors import InvalidOptionError
from active_rag.answer.versions import (asked_version, asks_for_version, asks_versions, settle_versions,
                                        versions_by_option, versions_in_passages)
from active_rag.engine.answer_steps import SettleVersions
from active_rag.retrieval.name_index import NameIndex
from active_rag.types import Passage
from active_rag.components.settings import engine_kwargs
from tests.unit_tests.test_loop import ScriptedLM, Word, words
from tests.unit_tests.test_read_choice import Corpus

Q = "Which requires a newer minimum Python version, rpds-py or py-cpuinfo2?"
WRONG = ("rpds-py requires a newer minimum Python version, which is Python 3.11. py-cpuinfo2 requires Python 3.9. "
         "So the answer is py-cpuinfo2.")


@pytest.mark.parametrize(("question", "expected"), [
    (Q, "later"),
    ("Which requires an older minimum Python version, typer or Pygments?", "earlier"),
    ("Which has the higher version number, numpy or scipy?", "later"),
    ("Which has the lower version, numpy or scipy?", "earlier"),
    ("Which film came out first, Thai Mozhi or How To Avoid Everything?", None),  # dates, not versions
    ("Which requires Python, typer or Pygments?", None),  # no version asked
    ("Who is the author of the numpy package?", None),
])
def test_asks_versions(question: str, expected: str | None) -> None:
    assert asks_versions(question) == expected


def test_versions_are_compared_as_numbers_not_as_text() -> None:
    settled = settle_versions(Q, WRONG)
    assert settled is not None and settled.answer == "rpds-py" and settled.dates == ((3, 11), (3, 9))
    newer = settle_versions("Which requires a newer minimum Python version, jiter or markdown-it-py?",
                            "markdown-it-py requires Python 3.10. jiter requires 3.9. So the answer is jiter.")
    assert newer is not None and newer.answer == "markdown-it-py"  # 3.10 is newer than 3.9
    older = settle_versions("Which requires an older minimum Python version, jiter or markdown-it-py?",
                            "markdown-it-py requires >=3.10 and jiter >=3.9. So the answer is markdown-it-py.")
    assert older is not None and older.answer == "jiter"


@pytest.mark.parametrize("text", [
    "rpds-py requires Python 3.11. So the answer is rpds-py.",  # one version only
    "rpds-py requires Python 3.9 and py-cpuinfo2 requires Python 3.9.0. So the answer is rpds-py.",  # a tie
    "rpds-py is newer. So the answer is rpds-py, 3.11 against py-cpuinfo2 3.9.",  # after the answer phrase
])
def test_without_two_versions_that_differ_the_readers_answer_stands(text: str) -> None:
    settled = settle_versions(Q, text)
    assert settled is not None and settled.answer is None


def test_a_version_belongs_to_the_option_mentioned_last_before_it() -> None:
    assert versions_by_option("Typer needs v0.12.3 at least. Pygments needs 2.17.", ("typer", "Pygments")) == (
        (0, 12, 3), (2, 17))


def _script(prompt: str) -> list[Word]:
    return words(WRONG)


def test_the_presets_settle_versions_and_the_papers_methods_do_not() -> None:
    result = ActiveRAG.from_preset("sr-rag-choose", ScriptedLM(script=_script), Corpus(), top_k=2).run(Q)
    assert result.answer == WRONG and result.short_answer == "rpds-py"  # the text stays what the model wrote
    assert result.date_comparison is not None and result.date_comparison["event"] == "version"
    assert json.loads(json.dumps(result.to_dict()))["date_comparison"]["dates"] == [[3, 11], [3, 9]]
    off = ActiveRAG.from_preset("sr-rag-choose", ScriptedLM(script=_script), Corpus(), top_k=2, settle_versions=False)
    assert off.run(Q).short_answer == "py-cpuinfo2" and "settle_versions" not in off.describe()
    assert engine_kwargs({"settle_versions": True})["answer"] == AnswerStage(versions=True)
    plain = ActiveRAG.from_preset("sr-rag", ScriptedLM(script=_script), Corpus(), top_k=2).run(Q)
    assert plain.short_answer == "py-cpuinfo2" and plain.date_comparison is None


def test_ask_prints_the_versions_compared() -> None:
    from active_rag.cli.commands import _print_checks_and_cost

    out = io.StringIO()
    _print_checks_and_cost(ActiveRAG.from_preset("sr-rag-choose", ScriptedLM(script=_script), Corpus(), top_k=2).run(Q), out)
    assert "Versions compared: later by versions: 'rpds-py' 3.11, 'py-cpuinfo2' 3.9 -> 'rpds-py'" in out.getvalue()


def _row(key: str, qid: str = "q1", **extra: object) -> dict:
    return {"id": qid, "question": Q, "gold": ["rpds-py"], "prediction": WRONG, "answer": "py-cpuinfo2",
            "metrics": {"em": 0.0, "f1": 0.0, "precision": 0.0, "recall": 0.0}, "engine_key": key, **extra}


def test_a_row_written_without_the_rule_is_settled_without_the_model(tmp_path: Path) -> None:
    row = convert_row(_row("old"), "new", "versions")
    assert row is not None and row["answer"] == "rpds-py" and row["metrics"]["f1"] == 1.0
    assert row["date_comparison"]["event"] == "version" and row["settled_from"] == "old"
    both = convert_row(_row("old"), "new", "dates+versions")
    assert both is not None and both["answer"] == "rpds-py"
    dated = _row("old", date_comparison={"event": "any", "answer": "py-cpuinfo2", "dates": [[2020, 0, 0], [2021, 0, 0]]})
    assert convert_row(dated, "new", "versions") is None  # the dates changed the reader's answer: answer again
    path = tmp_path / "sr-rag-choose.jsonl"
    path.write_text(json.dumps(_row("old")) + "\n")
    done = _read_rows(path, "new", unsettled_key={"old": "versions"})
    assert done["q1"]["answer"] == "rpds-py" and done["q1"]["engine_key"] == "new"


# -- an option the reasoning gives no version: its own passage's -------------------------------------------------
RPDS = Passage(id="rpds-py.md#1", title="rpds-py (1/3)",
               text="# rpds-py 0.27.1\n\nVersion: 0.27.1\nRequires-Python: <4.0,>=3.11\nClassifier: Python :: 3.13")
CPUINFO = Passage(id="py_cpuinfo2.md#1", title="py_cpuinfo2", text="Version: 9.0.0\nRequires-Python: >=3.9")
NEAR = Passage(id="rpds-py-extra.md", title="rpds-py-extra", text="Requires-Python: >=3.14")  # another package
NO_VERSIONS = "rpds-py is older than py-cpuinfo2. So the answer is py-cpuinfo2."


def test_an_options_version_is_read_from_the_line_of_its_own_passage_that_bears_on_the_question() -> None:
    assert versions_in_passages(Q, ("rpds-py", "py-cpuinfo2"), [NEAR, RPDS, CPUINFO]) == (
        ((3, 11), "rpds-py.md#1"), ((3, 9), "py_cpuinfo2.md#1"))  # not "Version: 0.27.1" nor "<4.0";
    # not rpds-py-extra's: its file stem is another name
    assert versions_in_passages(Q, ("rpds-py", "py-cpuinfo2"), [NEAR]) == ((None, None), (None, None))


def test_the_passages_settle_what_the_reasoning_leaves_open_and_say_so() -> None:
    settled = settle_versions(Q, NO_VERSIONS, [RPDS, CPUINFO])
    assert settled is not None and settled.answer == "rpds-py" and settled.dates == ((3, 11), (3, 9))
    assert settled.to_dict()["read_from"] == ("rpds-py.md#1", "py_cpuinfo2.md#1")
    one = settle_versions(Q, "py-cpuinfo2 needs Python 3.12. So the answer is py-cpuinfo2.", [RPDS, CPUINFO])
    assert one is not None and one.answer == "py-cpuinfo2" and one.read_from == ("rpds-py.md#1", "reasoning")
    written = settle_versions(Q, WRONG, [RPDS, CPUINFO])  # the reasoning gives both: the passages are not read
    assert written is not None and written.answer == "rpds-py" and "read_from" not in written.to_dict()
    assert settle_versions(Q, NO_VERSIONS).answer is None  # without the passages, nothing settles
    assert settle_versions(Q, NO_VERSIONS, [NEAR]).answer is None


class Packages:
    """Both options' header chunks, whatever the query."""

    name_index = NameIndex.from_passages([RPDS, CPUINFO])

    def retrieve(self, query: str, k: int) -> list[Passage]:
        return [RPDS, CPUINFO][:k]


def test_the_engine_reads_the_versions_of_the_answers_prompt_and_reasoning_only_does_not() -> None:
    lm = ScriptedLM(script=lambda prompt: words(NO_VERSIONS))
    result = ActiveRAG.from_preset("sr-rag-choose", lm, Packages(), top_k=2).run(Q)
    assert result.short_answer == "rpds-py" and tuple(result.date_comparison["read_from"]) == ("rpds-py.md#1", "py_cpuinfo2.md#1")
    assert set(result.final_passage_ids) >= {"rpds-py.md#1", "py_cpuinfo2.md#1"}
    reasoning = ActiveRAG.from_preset("sr-rag-choose", lm, Packages(), top_k=2, answer=AnswerStage(
        options=True, links="choose", dates=True, versions="reasoning", each_name=True))
    assert reasoning.run(Q).short_answer == "py-cpuinfo2" and reasoning.describe()["settle_versions"] is True
    assert ActiveRAG.from_preset("sr-rag-choose", lm, Packages(), top_k=2).describe()["settle_versions"] == "passages"
    with pytest.raises(InvalidOptionError, match="versions='numbers'"):
        ActiveRAG.from_preset("sr-rag-choose", lm, Packages(), top_k=2, answer=AnswerStage(versions="numbers"))


def test_a_row_settled_by_the_reasoning_only_is_settled_again_from_its_passages() -> None:
    texts = {p.id: f"{p.title}\n{p.text}" for p in (RPDS, CPUINFO)}
    row = _row("reasoning", prediction=NO_VERSIONS, final_passage_ids=["rpds-py.md#1", "py_cpuinfo2.md#1"],
               date_comparison={"event": "version", "answer": None})
    converted = convert_row(row, "passages", "version-passages", lambda ids: "\n".join(texts[i] for i in ids))
    assert converted is not None and converted["answer"] == "rpds-py" and converted["metrics"]["f1"] == 1.0
    assert converted["date_comparison"]["read_from"] == ("rpds-py.md#1", "py_cpuinfo2.md#1")
    assert convert_row(row, "passages", "version-passages") is None  # no passages to read: answered again
    other = _row("reasoning", question="Who is older, Annie Morton or Terry Richardson?", prediction="Annie Morton.")
    assert convert_row(other, "passages", "version-passages") is not None  # no versions asked: nothing to read


# -- a question that asks for a version: the version is the short answer ----------------------------------------------
ASKED = "What is the minimum Python version that rpds-py requires?"
VERBOSE = "rpds-py requires Python 3.11. So the answer is Python version 3.11 or higher."


@pytest.mark.parametrize(("text", "expected"), [
    (VERBOSE, "3.11"),
    ("So the answer is Python 3.9+.", "3.9"),
    ("So the answer is >=3.10.", "3.10"),
    ("So the answer is <4.0,>=3.10.0.", "3.10.0"),  # the upper bound is not it; the version is kept as written
    ("So the answer is 3.10.", "3.10"),
    ("So the answer is v2.1.0.", "2.1.0"),
    ("So the answer is 3.9 or 3.10.", None),  # two versions: the reader's answer stands
    ("So the answer is Python 3.", None),  # no version
])
def test_a_question_that_asks_for_a_version_gets_the_version_its_answer_names(text: str, expected: str | None) -> None:
    found = asked_version(ASKED, text)
    assert (found.answer if found is not None else None) == expected
    assert found is None or found.to_dict()["event"] == "version-asked"


@pytest.mark.parametrize(("question", "asks"), [
    (ASKED, True),
    ("Which version of Python added the walrus operator?", True),
    ('rpds-py depends on a package described as "A thing". What is the minimum Python version that package requires?',
     True),
    (Q, False),  # a choice between two packages: the comparison's rule
    ("Does rpds-py support Python version 3.8?", False),  # yes or no
    ("Who is the author of the rpds-py package?", False),
])
def test_asks_for_version(question: str, asks: bool) -> None:
    assert asks_for_version(question) is asks


def test_the_engine_answers_a_version_asked_with_the_version_and_ask_prints_it() -> None:
    from active_rag.cli.commands import _print_checks_and_cost

    lm = ScriptedLM(script=lambda prompt: words(VERBOSE))
    result = ActiveRAG.from_preset("sr-rag-choose", lm, Packages(), top_k=2).run(ASKED)
    assert result.answer == VERBOSE and result.short_answer == "3.11"  # the text stays what the model wrote
    assert result.date_comparison == {"version": (3, 11), "answer": "3.11", "written": "Python version 3.11 or higher",
                                      "event": "version-asked"}
    out = io.StringIO()
    _print_checks_and_cost(result, out)
    assert "Version asked: 'Python version 3.11 or higher' -> '3.11'" in out.getvalue()
    assert ActiveRAG.from_preset("sr-rag", lm, Packages(), top_k=2).run(ASKED).short_answer == "Python version 3.11 or higher"
    rag = ActiveRAG.from_preset("sr-rag-choose", lm, Packages(), top_k=2)
    rag.answer_steps[:] = [dataclasses.replace(s, asked=False) if isinstance(s, SettleVersions) else s
                           for s in rag.answer_steps]
    assert rag.run(ASKED).short_answer == "Python version 3.11 or higher" and "version_asked" not in rag.describe()


def test_a_row_written_before_the_rule_gets_the_version_without_the_model() -> None:
    row = _row("old", question=ASKED, gold=["3.11", ">=3.11"], prediction=VERBOSE, answer="Python version 3.11 or higher")
    converted = convert_row(row, "new", "version-asked")
    assert converted is not None and converted["answer"] == "3.11" and converted["metrics"]["f1"] == 1.0
    assert converted["date_comparison"]["event"] == "version-asked" and converted["settled_from"] == "old"
    compared = convert_row(_row("old"), "new", "version-asked")  # a comparison: settled as the row's engine settled it
    assert compared is not None and compared["answer"] == "py-cpuinfo2" and "date_comparison" not in compared
