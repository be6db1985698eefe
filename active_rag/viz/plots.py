"""Plots of *why* and *where* an active RAG run retrieved, drawn from an :class:`~active_rag.types.ActiveRAGResult`.

Every function reads what the engine recorded and returns a :class:`matplotlib.figure.Figure`; none of them
re-runs a model or recomputes a signal. The figures are built without ``pyplot`` (no global state, safe
under the Agg backend and from several threads): save them with ``fig.savefig("x.png")``, or let Jupyter
display the returned figure.

- :func:`plot_token_signals`: per-token signals as a heat map over the generated text, one row per signal
  (FLARE's token probability, DRAGIN's entropy ``H_i`` (Eq. 1), ``a_max(i)`` (Eq. 3) and ``S_RIND`` (Eq. 5)),
  with the trigger threshold and the tokens that fired.
- :func:`plot_qfs_attention`: DRAGIN's QFS (§3.2): the triggering token's attention over the context, with
  the positions chosen for the query highlighted.
- :func:`compare_methods`: several methods on the same question side by side.
- :func:`plot_retrieval_timeline`: where along the output each retrieval happened, with its query.

What the token heat map shows. The x axis is the *accepted* output (``result.tokens``) in order. Probability
and entropy are known for every accepted token. The trigger's own signals (``a_max``, ``S_RIND``) exist only
for the tokens it checked: they come from ``result.decisions`` (``token_signals``, placed on the output by
``output_start``), with the values the trigger saw at check time (``a_max`` covers the later tokens of the
same segment). Tokens the trigger never checked (DRAGIN accepts the continuation after a retrieval without
a check, FLARE accepts its regenerated sentence) are drawn grey. A token that fired but was discarded
(DRAGIN truncates the output before it; FLARE throws the whole look-ahead sentence away) is inserted as an
extra column, outlined in red, at the point where the retrieval happened; the rest of a discarded look-ahead
is not shown (its scores remain in ``decision.token_scores``). :func:`token_signal_table` returns the same
columns as plain rows.

This module draws the figures; what they read from the trace (:func:`token_signal_table`, which retrieval
each decision caused, where the retrievals fall in the answer) is in :mod:`active_rag.viz.trace`, which
needs no matplotlib; :func:`token_signal_table` is re-exported here.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from .._optional import require_matplotlib
from ..types import ActiveRAGResult, Retrieval
from .trace import (
    _initial_retrievals,
    _marked_answer,
    _trigger_threshold,
    token_signal_table,
)

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "SIGNALS",
    "compare_methods",
    "plot_qfs_attention",
    "plot_retrieval_timeline",
    "plot_token_signals",
    "token_signal_table",
]

SIGNALS: dict[str, str] = {
    "prob": "token probability (FLARE)",
    "entropy": "entropy H_i (DRAGIN Eq. 1)",
    "max_attention": "a_max(i) (DRAGIN Eq. 3)",
    "semantic": "s_i content word (DRAGIN Eq. 4)",
    "rind": "S_RIND (DRAGIN Eq. 5)",
}
"""Signal names accepted by :func:`plot_token_signals`, with what they are."""

# colour maps oriented so that a darker cell is always "more reason to retrieve"
_CMAPS = {"prob": "YlOrRd_r", "semantic": "Greys"}
_FIRED = "#d62728"
_SELECTED = "#1f4e9c"
_MISSING = "#e6e6e6"


# ------------------------------------------------------------------------------------------------- helpers
def _figure(width: float, height: float) -> Figure:
    require_matplotlib("active_rag.viz")
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout=None)


def _tex(text: str, *, newlines: bool = False) -> str:
    """Text safe for matplotlib: no mathtext, control characters made visible (newlines too unless
    ``newlines``)."""
    out = []
    for ch in text.replace("$", r"\$"):
        if ch == "\n":
            out.append("\n" if newlines else "↵")
        elif ch == "\t":
            out.append("⇥")
        elif ord(ch) < 32 or 127 <= ord(ch) < 160:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out)


def _token_label(text: str, limit: int = 14) -> str:
    label = _tex(text)
    if not label.strip():
        label = "·" * max(1, len(label)) if label else "∅"
    return label if len(label) <= limit else label[: limit - 1] + "…"


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _crosses(value: float, threshold: float, direction: str) -> bool:
    if math.isnan(value):
        return False
    return value < threshold if direction == "below" else value > threshold


# ----------------------------------------------------------------------------------------- token signals
def plot_token_signals(
    result: ActiveRAGResult,
    signals: Sequence[str] = ("prob", "entropy", "max_attention", "rind"),
    threshold: float | None = None,
    *,
    annotate: bool | None = None,
    max_label: int = 12,
) -> Figure:
    """Per-token signals as a heat map over the generated text: one row per signal, one column per token.

    ``threshold`` defaults to the trigger's own (``RindTrigger.theta`` on the ``rind`` row,
    ``LowConfidenceTrigger.theta`` on the ``prob`` row); cells past it are outlined and the threshold is
    marked on that row's colour bar. Columns of tokens that fired are outlined in red and labelled in red
    with the retrieval number; grey cells are signals the trigger did not compute for that token. Cell values
    are written in the cells when there are at most 60 columns (``annotate`` forces it on or off).
    """
    require_matplotlib("active_rag.viz")
    import numpy as np
    from matplotlib import colormaps
    from matplotlib.colors import Normalize
    from matplotlib.patches import Rectangle

    signals = list(signals)
    if not signals:
        raise ValueError("plot_token_signals needs at least one signal, e.g. signals=('prob', 'rind').")
    rows = token_signal_table(result)
    known = set(SIGNALS) | {k for d in result.decisions for k in (d.token_signals or {})}
    unknown = [s for s in signals if s not in known]
    if unknown:
        raise ValueError(f"Unknown signal(s) {unknown}: choose from {sorted(known)}.")
    th_signal, th_value, direction = _trigger_threshold(result)
    if threshold is not None:
        th_value = float(threshold)
        if th_signal is None:
            th_signal = "rind" if "rind" in signals else signals[-1]
            direction = "below" if th_signal == "prob" else "above"
    ncols = max(len(rows), 1)
    annotate = ncols <= 60 if annotate is None else annotate
    width = min(max(8.0, 0.34 * ncols + 3.2), 60.0)
    row_h, title_h, label_h, tick_h, note_h = 0.8, 0.45, 0.25, 0.9, 0.3
    height = row_h * len(signals) + title_h + label_h + tick_h + note_h
    fig = _figure(width, height)
    top = 1.0 - (title_h + label_h) / height
    bottom = (tick_h + note_h) / height
    gs = fig.add_gridspec(len(signals), 2, width_ratios=[60, 1], left=1.9 / width, right=1.0 - 0.9 / width,
                          top=top, bottom=bottom, hspace=0.12, wspace=0.02)
    axes: list[Axes] = []
    for r, name in enumerate(signals):
        ax = fig.add_subplot(gs[r, 0], sharex=axes[0] if axes else None)
        cax = fig.add_subplot(gs[r, 1])
        axes.append(ax)
        values = np.array([row.get(name, float("nan")) for row in rows] or [float("nan")], dtype=float)
        finite = values[np.isfinite(values)]
        if name in ("prob", "semantic"):
            vmin, vmax = 0.0, 1.0
        else:
            vmin = 0.0
            vmax = float(finite.max()) if finite.size else 1.0
            if name == th_signal and th_value is not None:
                vmax = max(vmax, th_value * 1.1)
            vmax = vmax if vmax > 0 else 1.0
        cmap = colormaps[_CMAPS.get(name, "YlOrRd")].with_extremes(bad=_MISSING)
        norm = Normalize(vmin=vmin, vmax=vmax)
        im = ax.imshow(np.ma.masked_invalid(values)[None, :], aspect="auto", cmap=cmap, norm=norm,
                       interpolation="nearest", extent=(-0.5, ncols - 0.5, 0.5, -0.5))
        im.set_gid(f"heatmap:{name}")
        cb = fig.colorbar(im, cax=cax)
        cb.ax.tick_params(labelsize=7)
        label = name
        if name == th_signal and th_value is not None:
            label = f"{name}\n({'<' if direction == 'below' else '>'} θ={th_value:g})"
            line = cb.ax.axhline(th_value, color="black", linewidth=2)
            line.set_gid("threshold-line")
            for c, v in enumerate(values):
                if _crosses(float(v), th_value, direction):
                    rect = Rectangle((c - 0.5, -0.5), 1, 1, fill=False, edgecolor="black", linewidth=1.2, linestyle="--")
                    rect.set_gid("threshold")
                    ax.add_patch(rect)
        ax.set_ylabel(label, rotation=0, ha="right", va="center", fontsize=9)
        ax.set_yticks([])
        if annotate:
            for c, v in enumerate(values):
                if np.isfinite(v):
                    shade = norm(v)
                    dark = shade > 0.6 if name != "prob" else shade < 0.4
                    ax.text(c, 0, f"{v:.2f}" if abs(v) < 10 else f"{v:.0f}", ha="center", va="center", fontsize=5.5,
                            color="white" if dark else "black")
        for c, row in enumerate(rows):
            if row["kind"] == "fired":  # a black frame under a red one, visible on any cell colour
                frame = Rectangle((c - 0.5, -0.5), 1, 1, fill=False, edgecolor="black", linewidth=4.2, zorder=5)
                frame.set_gid("fired-frame")
                ax.add_patch(frame)
                rect = Rectangle((c - 0.5, -0.5), 1, 1, fill=False, edgecolor=_FIRED, linewidth=2.2, zorder=6)
                rect.set_gid("fired")
                ax.add_patch(rect)
        if r < len(signals) - 1:
            ax.tick_params(axis="x", labelbottom=False, length=0)
    bottom_ax = axes[-1]
    bottom_ax.set_xticks(range(len(rows)))
    labels = bottom_ax.set_xticklabels([_token_label(row["text"], max_label) for row in rows], rotation=90, fontsize=7)
    for label, row in zip(labels, rows, strict=False):
        if row["kind"] == "fired":
            label.set_color(_FIRED)
            label.set_fontweight("bold")
    bottom_ax.set_xlim(-0.5, ncols - 0.5)
    # retrieval markers on the top row: the fired columns, and the retrievals before generation
    top_ax = axes[0]
    for c, row in enumerate(rows):
        if row["kind"] == "fired" or (row["kind"] == "accepted" and row["retrieval"] is not None):
            tag = f"R{row['retrieval'] + 1}" if row["retrieval"] is not None else "fired"
            top_ax.annotate(tag, xy=(c, -0.5), xytext=(c, -0.5), textcoords="data", ha="center", va="bottom",
                            fontsize=7, color=_FIRED, fontweight="bold", annotation_clip=False).set_gid("retrieval-label")
    for k, _ in enumerate(_initial_retrievals(result)):
        top_ax.annotate(f"R{k + 1} (input) ▸", xy=(-0.6, -0.5 - 0.35 * k), ha="right", va="bottom", fontsize=7,
                        color=_FIRED, annotation_clip=False).set_gid("retrieval-label")
    for ax in axes:
        for c, row in enumerate(rows):
            if row["kind"] == "fired":
                ax.axvline(c - 0.5, color=_FIRED, linewidth=0.8, alpha=0.6)
    title = f"Why it retrieved · {result.method} · {_short(result.question, 90)}"
    fig.suptitle(_tex(title), fontsize=10, x=0.5, y=1.0 - 0.1 / height, va="top")
    fired = sum(1 for row in rows if row["kind"] == "fired")
    note = (
        f"{len(result.tokens)} accepted tokens, {fired} fired token(s) inserted in red where the retrieval happened"
        " (discarded from the answer); dashed: past the threshold; grey: not computed for that token (not checked"
        " by the trigger)."
    )
    fig.text(0.01, 0.12 / height, _tex(note), fontsize=7, color="#555555", ha="left", va="bottom")
    return fig


# ------------------------------------------------------------------------------------------ QFS attention
def plot_qfs_attention(retrieval: Retrieval, *, chars_per_line: int = 120) -> Figure:
    """DRAGIN's QFS (§3.2): the triggering token's attention over every context position it ranked.

    Top: the attention weight of each context token (bars; the ``top_n`` chosen positions in blue). Bottom:
    the context as text, each token shaded by its weight, the chosen tokens boxed in bold; the trigger token
    closes the text in red. The retrieval's query is in the title. Needs a retrieval made by
    :class:`~active_rag.components.queries.AttentionQuery` (the ``dragin`` preset).
    """
    require_matplotlib("active_rag.viz")
    import numpy as np
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize
    from matplotlib.patches import Rectangle

    d = retrieval.details or {}
    needed = ("context_tokens", "weights", "context_positions", "selected_positions")
    if any(k not in d for k in needed):
        raise ValueError(
            "This retrieval has no QFS attention details: plot_qfs_attention needs a retrieval made by the "
            "attention query formulator (AttentionQuery, e.g. the 'dragin' preset)."
        )
    tokens: list[str] = list(d["context_tokens"])
    weights = np.asarray(d["weights"], dtype=float)
    positions: list[int] = list(d["context_positions"])
    selected = set(d["selected_positions"])
    is_sel = [p in selected for p in positions]
    trigger_token = d.get("trigger_token", retrieval.token or "")
    runs: list[int] = [0] * len(positions)  # contiguous run of positions each token belongs to
    for k in range(1, len(positions)):
        runs[k] = runs[k - 1] + (0 if positions[k] == positions[k - 1] + 1 else 1)
    run_names = {0: "question", 1: "output before the trigger"} if (runs[-1] if runs else 0) == 1 else {}

    # lay the context out as lines of monospaced text
    layout: list[tuple[int, int, int, str]] = []  # (token index, line, column, label)
    line, col = 0, 0
    headers: list[tuple[int, str]] = []
    for k, text in enumerate(tokens):
        if k == 0 or runs[k] != runs[k - 1]:
            if k > 0:
                line, col = line + 1, 0
            if runs[k] in run_names:
                headers.append((line, run_names[runs[k]]))
                line += 1
        label = text.replace("\n", "↵").replace("\t", " ")
        if not label:
            continue
        if col + len(label) > chars_per_line and col > 0:
            line, col = line + 1, 0
            label = label.lstrip(" ") or label
        layout.append((k, line, col, label))
        col += len(label)
        if "\n" in text:
            line, col = line + 1, 0
    trig_label = "→" + _token_label(trigger_token, 30).replace("·", " ")
    if col + len(trig_label) + 1 > chars_per_line:
        line, col = line + 1, 0
    trig_at = (line, col + (1 if col else 0))
    nlines = line + 1

    width = 13.0
    ticks = len(tokens) <= 70
    # vertical layout in inches, top to bottom
    title_h, bar_h, tick_h, gap_h = 0.75, 1.3, (0.45 if ticks else 0.3), 0.1
    text_h = 0.22 * nlines + 0.1
    cbar_h, foot_h = 0.12, 0.75
    height = title_h + bar_h + tick_h + gap_h + text_h + cbar_h + foot_h
    fig = _figure(width, height)
    left, right = 0.06, 0.98
    y = height - title_h - bar_h
    bar_ax = fig.add_axes((left, y / height, right - left, bar_h / height))
    y -= tick_h + gap_h + text_h
    text_ax = fig.add_axes((left, y / height, right - left, text_h / height))
    y -= 0.15 + cbar_h
    cax = fig.add_axes((left + 0.3, y / height, 0.4, cbar_h / height))

    vmax = float(weights.max()) if weights.size and weights.max() > 0 else 1.0
    norm = Normalize(vmin=0.0, vmax=vmax)
    cmap = colormaps["Oranges"]
    x = np.arange(len(tokens))
    colors = [_SELECTED if s else "#bbbbbb" for s in is_sel]
    bars = bar_ax.bar(x, weights, width=0.9, color=colors)
    for bar, s in zip(bars, is_sel, strict=True):
        bar.set_gid("selected" if s else "context")
    for k in range(1, len(positions)):
        if runs[k] != runs[k - 1]:
            bar_ax.axvline(k - 0.5, color="black", linewidth=0.8, linestyle=":")
    for k, name in run_names.items():
        idx = [i for i, r in enumerate(runs) if r == k]
        if idx:
            right_side = idx[0] > 0.6 * len(tokens)
            bar_ax.text(idx[-1] + 0.4 if right_side else idx[0] - 0.4, 1.0, f"{name} ▾", ha="right" if right_side else "left",
                        transform=bar_ax.get_xaxis_transform(), va="bottom", fontsize=8, color="#444444")
    bar_ax.set_xlim(-0.5, max(len(tokens), 1) - 0.5)
    bar_ax.set_ylabel("attention", fontsize=8)
    bar_ax.tick_params(labelsize=7)
    if ticks:
        bar_ax.set_xticks(x)
        bar_ax.set_xticklabels([_token_label(t, 10) for t in tokens], rotation=90, fontsize=6)
    query = retrieval.query
    fig.suptitle(
        _tex(f"QFS attention of the trigger token {trigger_token!r} (DRAGIN §3.2) → query: {_short(query, 110)}")
        + f"\nattention over the {len(tokens)} ranked context tokens; the {len(selected)} chosen for the query in blue",
        fontsize=10, y=1.0 - 0.08 / height, va="top", linespacing=1.5,
    )

    # text view: the axes spans chars_per_line character cells per line
    axes_w_pt = (right - left) * width * 72
    fontsize = min(10.0, axes_w_pt / chars_per_line / 0.602)
    text_ax.set_xlim(0, chars_per_line)
    text_ax.set_ylim(nlines, 0)
    text_ax.axis("off")
    for ln, name in headers:
        text_ax.text(0, ln + 0.5, f"— {name} —", fontsize=fontsize * 0.9, va="center", ha="left", color="#444444",
                     family="DejaVu Sans", style="italic")
    for k, ln, c, label in layout:
        rect = Rectangle((c, ln + 0.08), len(label), 0.84, facecolor=cmap(norm(weights[k])),
                         edgecolor=_SELECTED if is_sel[k] else "none", linewidth=1.4 if is_sel[k] else 0)
        rect.set_gid("selected" if is_sel[k] else "context")
        text_ax.add_patch(rect)
        text_ax.text(c, ln + 0.5, _tex(label), fontsize=fontsize, family="DejaVu Sans Mono", va="center", ha="left",
                     fontweight="bold" if is_sel[k] else "normal", color="black")
    tl, tc = trig_at
    rect = Rectangle((tc, tl + 0.08), len(trig_label), 0.84, facecolor="white", edgecolor=_FIRED, linewidth=1.8)
    rect.set_gid("trigger")
    text_ax.add_patch(rect)
    text_ax.text(tc, tl + 0.5, _tex(trig_label), fontsize=fontsize, family="DejaVu Sans Mono", va="center", ha="left",
                 color=_FIRED, fontweight="bold")
    sm = ScalarMappable(norm=norm, cmap=cmap)
    cb = fig.colorbar(sm, cax=cax, orientation="horizontal")
    cb.set_label("attention of the trigger token (shading); blue boxes: the chosen positions", fontsize=8)
    cb.ax.tick_params(labelsize=7)
    words = d.get("selected_words")
    if words:
        fig.text(0.01, 0.08 / height, _tex(_short("chosen words: " + " ".join(w.strip() for w in words), 220)),
                 fontsize=7, color="#333333")
    return fig


# -------------------------------------------------------------------------------------------- timelines
def _retrieval_label(k: int, r: Retrieval, limit: int = 60) -> str:
    head = f"R{k + 1}"
    if r.position == 0 and r.token is None:
        head += " before generation"
    elif r.token is not None:
        head += f" at {r.token!r}"
    if r.score is not None and r.threshold is not None:
        head += f" ({r.score:.3g} vs θ={r.threshold:g})"
    titles = ", ".join(p.title or p.id for p in r.passages)
    return f"{head}\nq: {_short(r.query, limit)}\n→ {_short(titles, limit)}"


def plot_retrieval_timeline(result: ActiveRAGResult, *, max_query: int = 60) -> Figure:
    """Where along the output each retrieval happened (a red line before the ``position``-th output token),
    with its trigger token, score and query; the grey curve is each accepted token's probability and the
    shaded spans show which retrieval's passages were in the prompt while the tokens were generated."""
    import numpy as np

    n = len(result.tokens)
    ordered = sorted(enumerate(result.retrievals), key=lambda kr: kr[1].position)
    levels = min(max(len(ordered), 1), 3)
    width = min(max(10.0, 0.16 * n + 3.0), 40.0)
    ticks = 0 < n <= 90
    title_h, label_h, plot_h, tick_h = 0.45, 0.65 * levels, 1.8, (0.8 if ticks else 0.45)
    height = title_h + label_h + plot_h + tick_h
    fig = _figure(width, height)
    ax = fig.add_axes((0.7 / width, tick_h / height, 1.0 - 0.9 / width, plot_h / height))
    x = np.arange(n)
    if n:
        ax.plot(x, [t.prob for t in result.tokens], color="#888888", linewidth=1, marker=".", markersize=3,
                label="token probability")
    bounds = [r.position for _, r in ordered] + [n]
    shades = ["#fde0dd", "#deebf7", "#e5f5e0", "#fff7bc", "#efedf5"]
    xmax = max(n, 1)
    for s, (k, r) in enumerate(ordered):
        ax.axvspan(r.position - 0.5, max(bounds[s + 1], r.position) - 0.5, color=shades[k % len(shades)], alpha=0.6,
                   zorder=0)
        line = ax.axvline(r.position - 0.5, color=_FIRED, linewidth=1.6)
        line.set_gid("retrieval")
        level = s % levels
        y = 1.0 + (0.12 + 0.65 * (levels - 1 - level)) / plot_h
        right_side = r.position > 0.6 * xmax
        ax.annotate(_tex(_retrieval_label(k, r, max_query), newlines=True), xy=(r.position - 0.5, 1.0),
                    xycoords=("data", "axes fraction"), xytext=(r.position - 0.5, y),
                    textcoords=("data", "axes fraction"), fontsize=7, ha="right" if right_side else "left",
                    va="bottom", color=_FIRED, annotation_clip=False,
                    arrowprops={"arrowstyle": "-", "color": _FIRED, "linewidth": 0.6}).set_gid("retrieval-label")
    ax.set_ylim(0, 1.05)
    ax.set_yticks([0, 0.5, 1.0])
    ax.set_ylabel("p(token)", fontsize=8)
    ax.set_xlim(-1, xmax)
    if ticks:
        ax.set_xticks(x)
        ax.set_xticklabels([_token_label(t.text, 10) for t in result.tokens], rotation=90, fontsize=6.5)
    else:
        ax.set_xlabel("output token", fontsize=8)
    ax.tick_params(axis="y", labelsize=7)
    fig.suptitle(_tex(f"Retrievals along the output · {result.method} · {_short(result.question, 90)}"), fontsize=10,
                 y=1.0 - 0.08 / height, va="top")
    if not result.retrievals:
        ax.text(0.5, 0.5, "no retrieval", transform=ax.transAxes, ha="center", va="center", fontsize=12,
                color="#999999")
    return fig


def compare_methods(results: Mapping[str, ActiveRAGResult], *, wrap: int | None = None) -> Figure:
    """The same question under several methods, side by side.

    Top: one lane per method along its output tokens, a red tick (``R1``, ``R2``...) where each retrieval
    happened. Below: one column per method with its answer (``⟦Rk⟧`` marks the retrieval points in the text)
    and the list of its retrievals: trigger token, score against the threshold, query and passage titles.
    """
    if not results:
        raise ValueError("compare_methods needs at least one result, e.g. {'flare': r1, 'dragin': r2}.")
    names = list(results)
    ncol = len(names)
    col_w = 6.0
    wrap = wrap or int((col_w - 0.4) * 72 / (7.5 * 0.602))
    width = col_w * ncol + 0.6
    blocks: list[str] = []
    for name in names:
        res = results[name]
        parts = [f"{len(res.retrievals)} retrieval(s), {len(res.tokens)} answer tokens, {res.generated_tokens} generated"]
        if res.route is not None:
            parts.append(f"router {res.route.router}: {'retrieve' if res.route.retrieve else 'no retrieval'}")
        parts.append("")
        parts.append("Answer:")
        for para in _marked_answer(res).split("\n"):
            parts.extend(textwrap.wrap(para, wrap) or [""])
        parts.append("")
        parts.append("Retrievals:" if res.retrievals else "Retrievals: none")
        for k, r in enumerate(res.retrievals):
            head = f"R{k + 1} @ token {r.position}"
            if r.token is not None:
                head += f", trigger {r.token!r}"
            if r.score is not None and r.threshold is not None:
                head += f" ({r.score:.3g} vs θ={r.threshold:g})"
            parts.extend(textwrap.wrap(head, wrap))
            parts.extend(textwrap.wrap(f"query: {r.query}", wrap, initial_indent="   ", subsequent_indent="   "))
            titles = ", ".join(p.title or p.id for p in r.passages)
            parts.extend(textwrap.wrap(f"passages: {titles}", wrap, initial_indent="   ", subsequent_indent="   "))
        blocks.append("\n".join(parts))
    nlines = max(b.count("\n") + 1 for b in blocks)
    # vertical layout in inches, top to bottom
    title_h, lane_h, axis_h, head_h = 0.55, 0.42 * ncol + 0.25, 0.5, 0.35
    text_h = 0.132 * nlines + 0.15
    height = title_h + lane_h + axis_h + head_h + text_h
    fig = _figure(width, height)
    lane_ax = fig.add_axes((1.2 / width, (height - title_h - lane_h) / height, 1.0 - 1.5 / width, lane_h / height))
    longest = max((len(results[n].tokens) for n in names), default=1) or 1
    for y, name in enumerate(names):
        res = results[name]
        lane = lane_ax.barh(y, max(len(res.tokens), 0.001), left=-0.5, height=0.45, color="#dddddd")
        lane.patches[0].set_gid(f"lane:{name}")
        at: dict[int, list[str]] = {}
        for k, r in enumerate(res.retrievals):
            tick = lane_ax.plot([r.position - 0.5] * 2, [y - 0.3, y + 0.3], color=_FIRED, linewidth=2.2)[0]
            tick.set_gid(f"retrieval:{name}")
            at.setdefault(r.position, []).append(f"R{k + 1}")
        for position, tags in at.items():
            lane_ax.text(position - 0.5, y - 0.32, ",".join(tags), color=_FIRED, fontsize=7, ha="center", va="bottom")
    lane_ax.set_yticks(range(ncol))
    lane_ax.set_yticklabels([_tex(n) for n in names], fontsize=9)
    lane_ax.set_ylim(ncol - 0.5, -0.75)
    lane_ax.set_xlim(-1, longest + 0.5)
    lane_ax.set_xlabel("output token (grey: the answer; red: retrieval points)", fontsize=8)
    lane_ax.tick_params(axis="x", labelsize=7)
    for spine in ("top", "right"):
        lane_ax.spines[spine].set_visible(False)
    for c, (name, block) in enumerate(zip(names, blocks, strict=True)):
        ax = fig.add_axes((c * col_w / width + 0.3 / width, 0.05 / height, (col_w - 0.4) / width, text_h / height))
        ax.axis("off")
        ax.set_title(_tex(name), fontsize=11, fontweight="bold", loc="left")
        ax.text(0, 1, _tex(block, newlines=True), transform=ax.transAxes, va="top", ha="left", fontsize=7.5,
                family="DejaVu Sans Mono", linespacing=1.25)
    question = next(iter(results.values())).question
    fig.suptitle(_tex(f"Same question, {ncol} method(s): {_short(question, 120)}"), fontsize=10.5,
                 y=1.0 - 0.1 / height, va="top")
    return fig
