"""Scores broken down by question type, so that a method's average does not hide where it wins and where it loses.

The slices label their questions: 2WikiMultihopQA by reasoning type (Ho et al. 2020, §2: *compositional*,
*comparison*, *inference*, *bridge_comparison*), RetrievalQA by source (Zhang et al. 2024, §3: *freshqa*,
*realtimeqa*, *toolqa*, *popqa*, *triviaqa*). StrategyQA has no type; its questions are grouped by the gold
answer instead, which shows a method that scores by answering "no" (Geva et al. 2021 report the classes'
imbalance). The HotpotQA slices (IRCoT's format) drop HotpotQA's own *bridge*/*comparison* label; their questions
are grouped by form: *yes/no* (a yes or no gold answer: comparisons), *A or B* (the question offers two options,
:func:`~active_rag.answer.options.question_options`: comparisons) and *other* (nearly all bridge questions). ``active-rag eval`` appends the table to ``results.md`` and writes it to ``summary.json``
(``by_type``) whenever the questions fall into two groups or more.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from active_rag.evaluation.datasets import Example
from active_rag.evaluation.metrics import bootstrap_ci

#: The metric each dataset's breakdown reports (its headline score).
TYPE_METRIC: dict[str, str] = {"hotpotqa": "f1", "2wikimultihopqa": "f1", "strategyqa": "accuracy", "pydocs": "f1",
                               "retrievalqa": "match"}


@dataclass(frozen=True)
class TypeScore:
    """``method``'s mean ``metric`` over the ``n`` questions of type ``question_type`` it answered, with the
    percentile-bootstrap interval (``None`` below two questions; ``mean`` is ``None`` when ``n`` is 0)."""

    method: str
    question_type: str
    metric: str
    n: int
    mean: float | None
    low: float | None
    high: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def question_type(example: Example) -> str | None:
    """The type an example is grouped under: its record's ``type`` (2WikiMultihopQA; HotpotQA in its original
    format), RetrievalQA's ``data_source``, StrategyQA's gold answer (``"answer yes"``/``"answer no"``), else, for a
    question answered with a span, its form: ``"yes/no"``, ``"A or B"`` or ``"other"``."""
    kind = example.raw.get("type")
    if isinstance(kind, str) and kind:
        return kind
    if example.data_source:
        return example.data_source
    if example.kind == "bool":
        return f"answer {example.answers[0]}"
    if example.kind == "qa":
        from active_rag.answer.options import question_options
        from active_rag.answer.normalize import normalize_answer

        if normalize_answer(example.answers[0]) in ("yes", "no"):
            return "yes/no"
        return "A or B" if question_options(example.question) else "other"
    return None


def question_types(examples: Sequence[Example]) -> dict[str, str]:
    """Question id -> type, for the examples that have one (see :func:`question_type`)."""
    return {ex.id: t for ex in examples if (t := question_type(ex)) is not None}


def scores_by_type(
    rows: Mapping[str, Sequence[Mapping[str, Any]]], types: Mapping[str, str], metric: str
) -> list[TypeScore]:
    """Every method of ``rows`` (method name -> its JSONL rows) scored on each question type of ``types``
    (question id -> type; rows of untyped questions are left out). Types in order of first appearance in
    ``types``; an empty list when ``types`` holds fewer than two types, where the overall table says it all."""
    order = list(dict.fromkeys(types.values()))
    if len(order) < 2:
        return []
    out: list[TypeScore] = []
    for method, method_rows in rows.items():
        values: dict[str, list[float]] = {t: [] for t in order}
        for row in method_rows:
            kind = types.get(str(row.get("id")))
            value = (row.get("metrics") or {}).get(metric)
            if kind is not None and value is not None:
                values[kind].append(float(value))
        for kind in order:
            xs = values[kind]
            ci = bootstrap_ci(xs)
            out.append(TypeScore(method=method, question_type=kind, metric=metric, n=len(xs),
                                 mean=sum(xs) / len(xs) if xs else None,
                                 low=ci[0] if ci else None, high=ci[1] if ci else None))
    return out


def format_type_table(scores: Sequence[TypeScore]) -> str:
    """One row per method, one column per question type (with its question count), in percent with intervals;
    the best mean of each column in bold."""
    if not scores:
        return ""
    kinds = list(dict.fromkeys(s.question_type for s in scores))
    methods = list(dict.fromkeys(s.method for s in scores))
    cell = {(s.method, s.question_type): s for s in scores}
    counts = {k: max(cell[m, k].n for m in methods if (m, k) in cell) for k in kinds}
    means = {k: [s.mean for s in scores if s.question_type == k and s.mean is not None] for k in kinds}
    # the best of a column, when the column is not one value throughout (nothing to single out then)
    best = {k: max(v) if len(set(v)) > 1 else None for k, v in means.items()}
    lines = ["| Method | " + " | ".join(f"{k} ({counts[k]})" for k in kinds) + " |",
             "|---|" + "---:|" * len(kinds)]
    for m in methods:
        parts = []
        for k in kinds:
            s = cell.get((m, k))
            if s is None or s.mean is None:
                parts.append("-")
                continue
            mark = "**" if s.mean == best[k] else ""
            ci = f" [{100 * s.low:.0f}, {100 * s.high:.0f}]" if s.low is not None and s.high is not None else ""
            parts.append(f"{mark}{100 * s.mean:.1f}{mark}{ci}")
        lines.append(f"| {m} | " + " | ".join(parts) + " |")
    metric = scores[0].metric
    note = (f"\n{metric} in percent by question type (questions per type in brackets); [low, high]: 95% "
            "percentile-bootstrap interval over that type's questions; bold: the best method of each type (none where all score the same).\n")
    return "\n".join(lines) + "\n" + note
