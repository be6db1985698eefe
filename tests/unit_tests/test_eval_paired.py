"""The paired comparison of ``active-rag eval`` (active_rag.evaluation.paired): bootstrap, matching by id, table."""

from __future__ import annotations

from typing import Any

import pytest

from active_rag.errors import UnknownNameError
from active_rag.evaluation.metrics import bootstrap_ci
from active_rag.evaluation.paired import (
    format_paired_table,
    paired_bootstrap,
    paired_differences,
    resolve_baseline,
)


def _rows(scores: dict[str, float], metric: str = "f1") -> list[dict[str, Any]]:
    return [{"id": qid, "metrics": {metric: value}} for qid, value in scores.items()]


def test_paired_bootstrap_of_a_constant_shift_is_that_shift() -> None:
    base = [0.0, 1.0, 0.5, 0.25, 0.75, 0.0, 1.0, 0.5]
    assert paired_bootstrap([b + 0.1 for b in base], base) == pytest.approx((0.1, 0.1))
    assert paired_bootstrap(base, base) == (0.0, 0.0)


def test_pairing_separates_what_two_unpaired_intervals_cannot() -> None:
    # Scores that vary a lot between questions, with the method 0.05 above the baseline on every question:
    # the two per-method intervals overlap, the interval of the paired difference excludes zero.
    base = [(i % 5) / 5 for i in range(40)]
    mine = [b + 0.05 for b in base]
    lo_m, _ = bootstrap_ci(mine)
    _, hi_b = bootstrap_ci(base)
    assert lo_m < hi_b
    low, high = paired_bootstrap(mine, base)
    assert low > 0 and high < 0.1 + 1e-9


def test_paired_bootstrap_checks_its_input() -> None:
    assert paired_bootstrap([1.0], [0.0]) is None
    with pytest.raises(ValueError, match="equal lengths"):
        paired_bootstrap([1.0, 0.0], [0.0])


def test_paired_differences_match_questions_by_id_and_count_wins() -> None:
    rows = {
        "sr-rag": _rows({"q1": 1.0, "q2": 0.0, "q3": 0.5, "q4": 0.0}),
        # q5 has no baseline row and q4 no row of this method: both are left out of the pairs
        "dragin": _rows({"q3": 0.5, "q1": 0.0, "q2": 1.0, "q5": 1.0}),
    }
    (d,) = paired_differences(rows, "sr-rag", ["f1"])
    assert (d.method, d.baseline, d.metric, d.n) == ("dragin", "sr-rag", "f1", 3)
    assert d.method_mean == pytest.approx(0.5) and d.baseline_mean == pytest.approx(0.5)
    assert d.difference == pytest.approx(0.0)
    assert (d.wins, d.losses, d.ties) == (1, 1, 1)
    assert d.low is not None and d.low < 0 < d.high and not d.separated
    assert d.to_dict()["separated"] is False
    with pytest.raises(UnknownNameError, match="baseline"):
        paired_differences(rows, "wo-rag", ["f1"])


def test_resolve_baseline() -> None:
    assert resolve_baseline(None, ["wo-rag", "sr-rag", "dragin"]) == "sr-rag"
    assert resolve_baseline(None, ["wo-rag", "dragin"]) is None  # no sr-rag: no comparison unless asked
    assert resolve_baseline(None, ["sr-rag"]) is None  # nothing to compare with
    assert resolve_baseline("none", ["wo-rag", "sr-rag"]) is None
    assert resolve_baseline("wo-rag", ["wo-rag", "sr-rag"]) == "wo-rag"
    with pytest.raises(UnknownNameError, match="one of the run's methods"):
        resolve_baseline("fs-rag", ["wo-rag", "sr-rag"])


def test_table_marks_separated_differences_in_bold() -> None:
    ids = [f"q{i}" for i in range(20)]
    rows = {"sr-rag": _rows({q: float(i % 2) for i, q in enumerate(ids)}), "dragin": _rows({q: 1.0 for q in ids}),
            "flare": _rows({q: float((i + 1) % 2) for i, q in enumerate(ids)})}
    table = format_paired_table(paired_differences(rows, "sr-rag", ["f1"]))
    dragin = next(line for line in table.splitlines() if line.startswith("| dragin"))
    assert dragin.startswith("| dragin | f1 | 100.0 | 50.0 | **+50.0** [+") and dragin.endswith("| 10 / 0 / 10 | 20 |")
    flare = next(line for line in table.splitlines() if line.startswith("| flare"))
    assert "**" not in flare and "| +0.0 [-" in flare and "10 / 10 / 0" in flare
    assert format_paired_table([]) == ""


def test_the_interval_does_not_depend_on_the_order_of_the_methods_rows() -> None:
    ids = [f"q{i}" for i in range(30)]
    base = {q: float(i % 3 == 0) for i, q in enumerate(ids)}
    mine = {q: float(i % 2 == 0) for i, q in enumerate(ids)}
    forward = paired_differences({"sr-rag": _rows(base), "dragin": _rows(mine)}, "sr-rag", ["f1"])
    shuffled = dict(reversed(list(mine.items())))
    backward = paired_differences({"sr-rag": _rows(base), "dragin": _rows(shuffled)}, "sr-rag", ["f1"])
    assert forward == backward


def test_no_shared_question_gives_no_numbers_and_valid_json() -> None:
    import json

    (d,) = paired_differences({"sr-rag": _rows({"q1": 1.0}), "dragin": _rows({"q2": 0.0})}, "sr-rag", ["f1"])
    assert d.n == 0 and d.difference is None and d.low is None
    json.dumps(d.to_dict(), allow_nan=False)
    assert "| dragin | f1 | - | - | - | - | 0 |" in format_paired_table([d])
