"""PNG plots of evaluation results (matplotlib, Agg backend), reusable from notebooks.

* :func:`plot_methods`: methods side by side, bars of the headline scores (EM/F1, accuracy or match) and of
  retrievals per question.
* :func:`plot_sweep`: performance and retrieval rate against a trigger threshold, as in FLARE's Figure 5
  (Jiang et al. 2023: EM against the percentage of retrieval as theta varies) and DRAGIN's Table 5 (Su et al.
  2024: scores and retrieval calls for several thresholds).

Both take plain dicts (the ``summary.json`` written by ``active-rag eval``, or :meth:`EvalReport.to_dict`) and
return the written path.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["METRIC_LABELS", "plot_methods", "plot_sweep"]

#: Display names of the score keys.
METRIC_LABELS: dict[str, str] = {
    "em": "EM",
    "f1": "F1",
    "precision": "Precision",
    "recall": "Recall",
    "accuracy": "Accuracy",
    "match": "Match",
    "match_folded": "Match (accent-folded)",
    "retrieval_accuracy": "Retrieval accuracy",
}
_SCORE_ORDER = ("em", "f1", "accuracy", "match", "match_folded")



def _save(fig: Any, path: str | Path) -> Path:
    """Lay out ``fig``, write it to ``path`` (its folder made) as a PNG and close it."""
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    _pyplot().close(fig)
    return out


def _pyplot() -> Any:
    from active_rag._optional import require_matplotlib

    require_matplotlib("The evaluation plots")
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _methods(summary: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """Accept either ``{method: metrics}`` or a summary dict with a ``"methods"`` entry."""
    inner = summary.get("methods")
    if isinstance(inner, Mapping):
        return dict(inner)
    return {k: v for k, v in summary.items() if isinstance(v, Mapping)}


def _score_keys(rows: Sequence[Mapping[str, Any]], metrics: Sequence[str] | None) -> list[str]:
    if metrics:
        return list(metrics)
    return [k for k in _SCORE_ORDER if any(isinstance(r.get(k), (int, float)) for r in rows)]


def _num(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) else 0.0


def plot_methods(
    summary: Mapping[str, Any],
    path: str | os.PathLike[str],
    *,
    metrics: Sequence[str] | None = None,
    title: str | None = None,
) -> Path:
    """Bars of the headline scores (in percent) and of retrievals per question, one group per method.

    ``summary`` is ``{method: {metric: value}}`` or a dict with a ``"methods"`` entry of that shape (as in
    ``summary.json``); ``metrics`` picks the score keys (default: those of em, f1, accuracy, match,
    match_folded that are present).
    """
    plt = _pyplot()
    methods = _methods(summary)
    names = list(methods)
    rows = [methods[n] for n in names]
    keys = _score_keys(rows, metrics)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(max(8.0, 1.3 * len(names) + 4), 4.2), gridspec_kw={"width_ratios": [2, 1]})
    width = 0.8 / max(len(keys), 1)
    xs = list(range(len(names)))
    for j, key in enumerate(keys):
        values = [100 * _num(r.get(key)) for r in rows]
        bars = ax1.bar([x + (j - (len(keys) - 1) / 2) * width for x in xs], values, width, label=METRIC_LABELS.get(key, key))
        ax1.bar_label(bars, fmt="%.1f", fontsize=7)
    top = max([100 * _num(r.get(k)) for r in rows for k in keys] or [0.0])
    ax1.set_ylim(0, max(5.0, 1.15 * top))
    ax1.set_xticks(xs, names, rotation=30, ha="right")
    ax1.set_ylabel("score (%)")
    ax1.set_title("Answer quality")
    if keys:
        ax1.legend(fontsize=8)
    ret = [_num(r.get("retrievals_per_question")) for r in rows]
    bars = ax2.bar(xs, ret, 0.6, color="tab:gray")
    ax2.bar_label(bars, fmt="%.2f", fontsize=7)
    ax2.set_xticks(xs, names, rotation=30, ha="right")
    ax2.set_ylabel("retrievals per question")
    ax2.set_title("Retrieval")
    heading = title or " / ".join(str(summary[k]) for k in ("dataset", "model") if isinstance(summary.get(k), str))
    if heading:
        fig.suptitle(heading)
    return _save(fig, path)


def plot_sweep(
    sweep_rows: Sequence[Mapping[str, Any]],
    path: str | os.PathLike[str],
    *,
    metrics: Sequence[str] | None = None,
    title: str | None = None,
) -> Path:
    """Scores and retrieval rate against the swept value, one line per method.

    Each row is ``{"method", "param", "value", <metric>: ..., "retrievals_per_question", "trigger_fire_rate"}``
    (the ``sweep`` list of ``summary.json``). Left: the scores (percent) against the value; right: retrievals
    per question and the share of trigger checks that fired (FLARE's "percentage of retrieval").
    """
    plt = _pyplot()
    keys = _score_keys(sweep_rows, metrics)
    by_method: dict[str, list[Mapping[str, Any]]] = {}
    for row in sweep_rows:
        by_method.setdefault(str(row["method"]), []).append(row)
    param = str(sweep_rows[0].get("param", "theta")) if sweep_rows else "theta"
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4.2))
    ax3 = ax2.twinx()
    styles = ("-", "--", ":", "-.")
    top = 0.0
    for i, (method, rows) in enumerate(by_method.items()):
        color = f"C{i % 10}"
        rows = sorted(rows, key=lambda r: _num(r.get("value")))
        xs = [_num(r.get("value")) for r in rows]
        for j, key in enumerate(keys):
            ys = [100 * _num(r.get(key)) for r in rows]
            top = max([top, *ys])
            ax1.plot(xs, ys, marker="o", color=color, linestyle=styles[j % len(styles)],
                     label=f"{method} {METRIC_LABELS.get(key, key)}")
        ax2.plot(xs, [_num(r.get("retrievals_per_question")) for r in rows], marker="s", color=color,
                 label=f"{method} retrievals/q")
        ax3.plot(xs, [100 * _num(r.get("trigger_fire_rate")) for r in rows], marker="^", color=color, linestyle="--",
                 label=f"{method} fire %")
    ax1.set_ylim(0, max(5.0, 1.15 * top))
    ax2.set_ylim(bottom=0)
    ax3.set_ylim(0, 105)
    ax1.set_xlabel(param)
    ax1.set_ylabel("score (%)")
    ax1.set_title("Performance")
    ax2.set_xlabel(param)
    ax2.set_ylabel("retrievals per question")
    ax3.set_ylabel("trigger checks that fired (%)")
    ax2.set_title("Retrieval rate")
    if sweep_rows:
        ax1.legend(fontsize=7)
        lines = ax2.get_legend_handles_labels()
        lines3 = ax3.get_legend_handles_labels()
        ax2.legend(lines[0] + lines3[0], lines[1] + lines3[1], fontsize=7)
    if title:
        fig.suptitle(title)
    return _save(fig, path)
