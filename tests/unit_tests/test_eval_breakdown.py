"""Scores by question type in ``active-rag eval`` (active_rag.evaluation.breakdown)."""

from __future__ import annotations

from typing import Any

import pytest

from active_rag.evaluation.breakdown import (
    format_type_table,
    question_type,
    question_types,
    scores_by_type,
)
from active_rag.evaluation.datasets import Example


def _rows(scores: dict[str, float | None], metric: str = "f1") -> list[dict[str, Any]]:
    return [{"id": qid, "metrics": {metric: value}} for qid, value in scores.items()]


def test_question_type_reads_each_slice_label() -> None:
    wiki = Example(id="a", question="q", answers=["x"], kind="qa", raw={"type": "compositional"})
    rqa = Example(id="b", question="q", answers=["x"], kind="retrievalqa", data_source="freshqa", raw={})
    sqa = Example(id="c", question="q", answers=["no"], kind="bool", raw={"facts": []})
    hotpot = Example(id="d", question="q", answers=["x"], kind="qa", raw={"question_id": "d"})
    assert [question_type(e) for e in (wiki, rqa, sqa, hotpot)] == ["compositional", "freshqa", "answer no", "other"]
    assert question_types([wiki, rqa, sqa]) == {"a": "compositional", "b": "freshqa", "c": "answer no"}


def test_hotpotqa_questions_without_a_type_are_grouped_by_form() -> None:
    """IRCoT's HotpotQA slices carry no bridge/comparison label: a yes/no gold answer and a question that offers
    two options are comparisons, the rest nearly all bridge questions."""
    def hotpot(qid: str, question: str, answer: str) -> Example:
        return Example(id=qid, question=question, answers=[answer], kind="qa", raw={"question_id": qid})

    examples = [hotpot("y", "Are Glow and Sleep both films?", "yes"),
                hotpot("c", "Which was founded first, Tesla or Ford?", "Ford"),
                hotpot("h", "How much does AWS or Azure charge per GB?", "2 cents"),
                hotpot("b", "Who directed the film that starred Shirley Temple?", "Irving Reis")]
    assert question_types(examples) == {"y": "yes/no", "c": "A or B", "h": "other", "b": "other"}
    rows = {"sr-rag": _rows({"y": 1.0, "c": 0.0, "h": 0.5, "b": 0.5})}
    got = {s.question_type: (s.n, s.mean) for s in scores_by_type(rows, question_types(examples), "f1")}
    assert got == {"yes/no": (1, 1.0), "A or B": (1, 0.0), "other": (2, 0.5)}


def test_scores_by_type_means_counts_and_intervals() -> None:
    types = {"q1": "comparison", "q2": "compositional", "q3": "comparison", "q4": "compositional", "q5": "inference"}
    rows = {
        # q5 has no score (undefined metric) and q6 no type: both are left out
        "sr-rag": _rows({"q1": 1.0, "q2": 0.0, "q3": 0.5, "q4": 0.5, "q5": None, "q6": 1.0}),
        "dragin": _rows({"q1": 0.0, "q3": 0.0, "q5": 1.0}),
    }
    got = {(s.method, s.question_type): s for s in scores_by_type(rows, types, "f1")}
    assert list(dict.fromkeys(k for _, k in got)) == ["comparison", "compositional", "inference"]
    sr = got["sr-rag", "comparison"]
    assert (sr.n, sr.mean, sr.metric) == (2, pytest.approx(0.75), "f1")
    assert sr.low is not None and 0.5 <= sr.low <= sr.high <= 1.0
    assert got["sr-rag", "compositional"].mean == pytest.approx(0.25)
    assert got["sr-rag", "inference"].n == 0 and got["sr-rag", "inference"].mean is None
    dr = got["dragin", "inference"]
    assert (dr.n, dr.mean, dr.low, dr.high) == (1, 1.0, None, None)  # one question: no interval
    assert got["dragin", "compositional"].n == 0
    assert got["dragin", "comparison"].to_dict()["question_type"] == "comparison"


def test_one_type_gives_no_breakdown() -> None:
    assert scores_by_type({"sr-rag": _rows({"q1": 1.0})}, {"q1": "bridge", "q2": "bridge"}, "f1") == []
    assert format_type_table([]) == ""


def test_type_table_bolds_each_column_best_and_marks_missing() -> None:
    types = {"q1": "comparison", "q2": "comparison", "q3": "inference", "q4": "inference", "q5": "toolqa"}
    rows = {"wo-rag": _rows({"q1": 1.0, "q2": 1.0, "q3": 0.0, "q4": 0.0, "q5": 0.0}),
            "sr-rag": _rows({"q1": 0.0, "q2": 1.0, "q3": 1.0, "q4": 0.0, "q5": 0.0}),
            "flare": _rows({"q1": 1.0})}
    table = format_type_table(scores_by_type(rows, types, "f1"))
    lines = table.splitlines()
    assert lines[0] == "| Method | comparison (2) | inference (2) | toolqa (1) |"
    assert lines[2] == "| wo-rag | **100.0** [100, 100] | 0.0 [0, 0] | 0.0 |"
    assert lines[3] == "| sr-rag | 50.0 [0, 100] | **50.0** [0, 100] | 0.0 |"  # a column of equal scores: no bold
    assert lines[4] == "| flare | **100.0** | - | - |"  # ties for the best: bold too, without interval (n=1)
    assert "f1 in percent by question type" in table
