"""Paired comparison of methods on the same questions: is a method better than its baseline, or is the gap noise?

Two methods' per-question intervals overlap long before their difference is uncertain: the questions that are hard
for one are hard for the other. The paired bootstrap (Koehn 2004, "Statistical significance tests for machine
translation evaluation"; Efron & Tibshirani 1993, ch. 13) resamples *questions*, keeping each question's pair of
scores together, and reads the interval of the mean difference. ``active-rag eval`` prints this table against
``sr-rag`` (the papers' single-retrieval baseline) whenever it is among the methods, or against ``--baseline``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from active_rag.errors import UnknownNameError
from active_rag.evaluation.metrics import bootstrap_ci

#: The baseline an evaluation compares every method against when the user names none and it was run.
DEFAULT_BASELINE = "sr-rag"


@dataclass(frozen=True)
class PairedDifference:
    """``method`` minus ``baseline`` on ``metric`` over the ``n`` questions both answered.

    ``low``/``high``: the percentile-bootstrap interval of the mean difference (``None`` below two questions);
    ``wins``/``losses``/``ties``: questions where the method scored above, below or equal to the baseline."""

    method: str
    baseline: str
    metric: str
    n: int
    method_mean: float | None  # None (also the two below) when no question has both scores
    baseline_mean: float | None
    difference: float | None
    low: float | None
    high: float | None
    wins: int
    losses: int
    ties: int

    @property
    def separated(self) -> bool:
        """True when the interval excludes zero: the difference is not resampling noise at this level."""
        return self.low is not None and self.high is not None and (self.low > 0 or self.high < 0)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "separated": self.separated}


def paired_bootstrap(
    scores: Sequence[float], baseline: Sequence[float], *, resamples: int = 1000, level: float = 0.95, seed: int = 0
) -> tuple[float, float] | None:
    """Percentile-bootstrap interval of ``mean(scores) - mean(baseline)``, resampling the pairs together.

    ``scores[i]`` and ``baseline[i]`` belong to the same question. ``None`` for fewer than two pairs; a fixed
    ``seed`` makes tables reproducible."""
    if len(scores) != len(baseline):
        raise ValueError(f"paired scores need equal lengths, got {len(scores)} and {len(baseline)}.")
    # resampling the pairs together is resampling their differences: the interval of the mean difference
    return bootstrap_ci([float(a) - float(b) for a, b in zip(scores, baseline, strict=True)],
                        resamples=resamples, level=level, seed=seed)


def _scores(rows: Sequence[Mapping[str, Any]], metric: str) -> dict[str, float]:
    return {str(r["id"]): float(r["metrics"][metric]) for r in rows
            if r.get("metrics", {}).get(metric) is not None}


def paired_differences(
    rows: Mapping[str, Sequence[Mapping[str, Any]]], baseline: str, metrics: Sequence[str]
) -> list[PairedDifference]:
    """Every method of ``rows`` (method name -> its JSONL rows) against ``baseline`` on each of ``metrics``,
    over the questions both answered (rows are matched by question id)."""
    if baseline not in rows:
        raise UnknownNameError("baseline method", baseline, rows)
    out: list[PairedDifference] = []
    for metric in metrics:
        base = _scores(rows[baseline], metric)
        for method, method_rows in rows.items():
            if method == baseline:
                continue
            mine = _scores(method_rows, metric)
            # pairs in the baseline's question order, so that the interval does not depend on the order of
            # the method's own rows (the bootstrap draws positions)
            ids = [i for i in base if i in mine]
            a, b = [mine[i] for i in ids], [base[i] for i in ids]
            n = len(ids)
            ci = paired_bootstrap(a, b)
            out.append(PairedDifference(
                method=method, baseline=baseline, metric=metric, n=n,
                method_mean=sum(a) / n if n else None, baseline_mean=sum(b) / n if n else None,
                difference=(sum(a) - sum(b)) / n if n else None,
                low=ci[0] if ci else None, high=ci[1] if ci else None,
                wins=sum(x > y for x, y in zip(a, b, strict=True)), losses=sum(x < y for x, y in zip(a, b, strict=True)),
                ties=sum(x == y for x, y in zip(a, b, strict=True)),
            ))
    return out


def resolve_baseline(baseline: str | None, methods: Sequence[str]) -> str | None:
    """The baseline of a run: ``baseline`` itself (it must be one of ``methods``), ``None`` for ``"none"``, and
    for ``None`` (the default) :data:`DEFAULT_BASELINE` when it is among ``methods`` and there is another method."""
    if baseline == "none":
        return None
    if baseline is None:
        return DEFAULT_BASELINE if DEFAULT_BASELINE in methods and len(methods) > 1 else None
    if baseline not in methods:
        raise UnknownNameError("baseline method (it must be one of the run's methods)", baseline, methods)
    return baseline


def format_paired_table(diffs: Sequence[PairedDifference]) -> str:
    """The differences as a markdown table, in points (scores in percent)."""
    if not diffs:
        return ""
    base = diffs[0].baseline
    lines = [f"| Method | Metric | Score | {base} | Difference [95% CI] | Wins / losses / ties | n |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for d in diffs:
        if d.n == 0 or d.method_mean is None or d.baseline_mean is None or d.difference is None:
            lines.append(f"| {d.method} | {d.metric} | - | - | - | - | 0 |")
            continue
        ci = f" [{100 * d.low:+.1f}, {100 * d.high:+.1f}]" if d.low is not None and d.high is not None else ""
        mark = "**" if d.separated else ""
        lines.append(f"| {d.method} | {d.metric} | {100 * d.method_mean:.1f} | {100 * d.baseline_mean:.1f} | "
                     f"{mark}{100 * d.difference:+.1f}{mark}{ci} | {d.wins} / {d.losses} / {d.ties} | {d.n} |")
    note = ("\nPaired bootstrap over the questions both methods answered (1000 resamples of question pairs); "
            "bold: the interval excludes zero.\n")
    return "\n".join(lines) + "\n" + note
