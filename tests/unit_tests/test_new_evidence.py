"""``AnswerCheck(select="new-evidence")``: after a look, the second answer replaces the draft unless the look brought
no evidence for the change (:func:`active_rag.answer.check.unsupported_change`), and rows written with
``select="second"`` resume under it, answering again only the questions whose kept answer it changes
(:func:`active_rag.evaluation.settled.keeps_second`)."""

from __future__ import annotations

import json
import warnings

import pytest

from active_rag import ActiveRAG, AnswerCheck
from active_rag.evaluation.scoring import _read_rows
from active_rag.evaluation.settled import convert_row, keeps_second
from active_rag.answer.check import AnswerConfidence, passages_text, unsupported_change
from active_rag.components.presets import PRESETS
from tests.unit_tests.test_loop import ScriptedLM, Word, words
from tests.unit_tests.test_read_choice import ALL, Corpus

READ = "Annie Morton (born 1970) is a model who worked with Paul Smith.\nGlow is a film about a model."
ADDED = "Paul Smith is a designer.\nWho is older is a question people ask."


@pytest.mark.parametrize("draft, second, rejected", [
    ("a film", "a model", True),  # both in the draft's passages, the second in none of the added ones
    ("a film", "designer", False),  # the second answer is found in what the look added
    ("a film", "Film", False),  # the same answer
    ("a photographer", "a model", False),  # the draft is not found in its passages: nothing to keep
    ("a film", "a poet", False),  # the second answer is found nowhere: not read in the draft's passages
    ("a film", "no", False),  # no passage spells out a yes or a no
    ("a film", "", False),
])
def test_a_change_without_the_looks_evidence(draft: str, second: str, rejected: bool) -> None:
    assert unsupported_change(draft, second, READ, ADDED) is rejected


def _confidence(answer: str) -> AnswerConfidence:
    return AnswerConfidence(answer=answer, mean_logprob=-0.1, min_prob=0.9, token=answer.split()[0], tokens=2)


def test_keep_second_is_the_second_rule_except_for_an_unsupported_change() -> None:
    check = AnswerCheck(select="new-evidence")
    film, model, designer = _confidence("a film"), _confidence("a model"), _confidence("designer")
    assert not check.keep_second(film, model, "", (READ, READ + ADDED), ADDED)
    assert check.keep_second(film, designer, "", (READ, READ + ADDED), ADDED)
    assert check.keep_second(film, model)  # without the passages' text it keeps the second, as "second" does
    assert check.reads_passages and not check.grounds  # a yes/no draft is judged by theta, as with "second"
    assert PRESETS["look-again-choose"].answer.check.select == "new-evidence"


def _script(second: str):
    def script(prompt: str) -> list[Word]:
        if "Paul Smith is a designer." in prompt:  # the look's prompt
            return words(f"So the answer is {second}.")
        return words("So the answer is a film.", film=(0.5, 0.1))  # unsure: the check looks again
    return script


QUESTION = "What does the designer who worked with Annie Morton make?"


def test_the_draft_stands_when_the_second_answer_only_repeats_the_drafts_passages() -> None:
    result = ActiveRAG.from_preset("look-again-choose", ScriptedLM(script=_script("a model")), Corpus(),
                                   top_k=2).run(QUESTION)
    check = result.answer_check
    assert check is not None and check["fired"] and check["second"]["answer"] == "a model"
    assert check["kept"] == "draft" and result.answer.endswith("So the answer is a film.")
    assert "in none the look added" in check["reason"] and check["second_text"].endswith("a model.")
    # the look did read the designer's article: it is the second prompt's evidence the rule asks about
    assert "p" in result.retrievals[-1].new_ids


def test_the_second_answer_stands_when_the_look_brought_it() -> None:
    result = ActiveRAG.from_preset("look-again-choose", ScriptedLM(script=_script("designer")), Corpus(),
                                   top_k=2).run(QUESTION)
    assert result.answer_check is not None and result.answer_check["kept"] == "second"
    assert result.answer.endswith("So the answer is designer.")


def _row(qid: str, second: str, kept: str = "second") -> dict:
    """A row as ``select="second"`` wrote it: the draft "a film" from passages a and o, the look adding p and n."""
    return {"id": qid, "question": QUESTION, "gold": ["clothes"], "prediction": f"So the answer is {second}.",
            "answer": second, "metrics": {"em": 0.0, "f1": 0.0}, "engine_key": "old",
            "answer_check": {"fired": True, "kept": kept, "draft": {"answer": "a film"}, "second": {"answer": second}},
            "segments": [{"passage_ids": ["a", "o"]}],
            "trace": [{"held_ids": ["a", "o"]}, {"held_ids": ["a", "o", "p", "n"], "new_ids": ["p", "n"]}]}


def _texts(ids: list[str]) -> str:
    by_id = {p.id: p for p in ALL}
    return passages_text(by_id[i] for i in ids)


def test_rows_written_with_second_resume_and_only_the_changed_ones_are_answered_again(tmp_path) -> None:
    rows = [_row("q1", "a model"), _row("q2", "designer"), _row("q3", "a model", kept="draft"),
            {**_row("q4", "a film"), "answer_check": {"fired": False, "kept": "draft", "draft": {"answer": "a film"},
                                                     "second": None}}]
    assert [keeps_second(r, _texts) for r in rows] == [False, True, True, True]
    assert convert_row(rows[0], "new", "new-evidence", _texts) is None
    assert convert_row(rows[1], "new", "dates+new-evidence", _texts)["engine_key"] == "new"
    # without the passages' text every second answer that differs from its draft is answered again
    assert [keeps_second(r, None) for r in rows] == [False, False, True, True]
    path = tmp_path / "look-again-choose.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        done = _read_rows(path, "new", {"old": "new-evidence"}, _texts)
    assert sorted(done) == ["q2", "q3", "q4"] and all(r["settled_from"] == "old" for r in done.values())
    assert "1 will be answered again" in " ".join(str(w.message) for w in caught)
    aside = [json.loads(line) for p in (tmp_path / "other-settings").rglob("*.jsonl") for line in p.read_text().splitlines()]
    assert len(aside) == 4  # nothing lost


def test_the_sweep_replays_the_rule_from_the_rows_passages() -> None:
    from research.answer_check_sweep import rule_scores

    def record(answer: str) -> dict:
        return {"answer": answer, "mean_logprob": -0.5, "min_prob": 0.5, "token": answer.split()[-1], "tokens": 2}

    rows = []
    for qid, second in (("q1", "a model"), ("q2", "designer")):
        row = _row(qid, second)
        row["gold"] = ["film"]
        row["answer_check"] = {"theta": 1.0, "draft": record("a film"), "second": record(second)}
        rows.append(row)
    corpus = {p.id: p for p in ALL}
    assert rule_scores(rows, "hotpotqa", AnswerCheck(select="new-evidence"), corpus) == [1.0, 0.0]
    assert rule_scores(rows, "hotpotqa", AnswerCheck(select="second"), corpus) == [0.0, 0.0]


def test_a_row_the_each_name_rule_already_settled_is_carried_over_by_the_new_evidence_rule() -> None:
    both = {**_row("q5", "yes"), "question": "Are both Jim McBride and Neil Jordan American?",
            "prediction": "Both are American. So the answer is yes.", "each_name": {"answer": "no"},
            "answer_check": {"fired": False, "kept": "draft", "draft": {"answer": "yes"}, "second": None}}
    carried = convert_row(both, "new", "new-evidence", _texts)
    assert carried is not None and carried["each_name"] == {"answer": "no"} and carried["settled_from"] == "old"
    assert convert_row(both, "new", "each-name+new-evidence", _texts) is None  # a row written without each name


def test_focus_rows_written_before_comparison_looks_were_read_in_full_resume_but_those_looks() -> None:
    """A row of ``focus:compare=0`` is the row ``focus`` writes unless its look was sent to compare what the question
    names (the resume through ``active-rag eval``: ``test_eval_splits``)."""
    links = {**_row("q1", "a model"), "trace": [{"held_ids": ["a", "o"]}, {"choice": "links", "held_ids": ["a", "p"]}]}
    compare = {**_row("q2", "a model"), "trace": [{"held_ids": ["a", "o"]}, {"choice": "compare", "held_ids": ["a", "t"]}]}
    assert convert_row(links, "new", "compare-look")["settled_from"] == "old"
    assert convert_row(compare, "new", "compare-look") is None
    assert convert_row(compare, "new", "dates") is not None  # only the compare-look rule asks again
