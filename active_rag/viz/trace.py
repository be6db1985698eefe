"""What the plots of :mod:`active_rag.viz` read from an :class:`~active_rag.types.ActiveRAGResult`, without matplotlib.

:func:`token_signal_table` lays the accepted and the discarded fired tokens out in output order with their
signals; the helpers match fired decisions to the retrievals they caused, find the trigger's threshold and
mark the retrieval points in the answer text.
"""

from __future__ import annotations

from typing import Any

from ..types import ActiveRAGResult, Retrieval, TriggerDecision

__all__ = ["token_signal_table"]

# the signal a trigger compares with its threshold, and in which direction it fires
_TRIGGER_SIGNAL = {"rind": ("rind", "above"), "low-confidence": ("prob", "below")}


def _action(trigger: str) -> str:
    from ..components.triggers import TRIGGERS

    cls = TRIGGERS.get(trigger)
    return cls.action if cls is not None else "continue"


def _decision_signals(decision: TriggerDecision) -> dict[str, list[float]]:
    if decision.token_signals:
        return {k: [float(v) for v in vs] for k, vs in decision.token_signals.items()}
    if decision.token_scores is not None:
        name = _TRIGGER_SIGNAL.get(decision.trigger, ("score", "above"))[0]
        return {name: [float(v) for v in decision.token_scores]}
    return {}


def _fired_pairs(result: ActiveRAGResult) -> list[tuple[int, Retrieval | None]]:
    """``(decision index, retrieval)`` for every decision that fired, matched in order with the retrievals
    it caused (the loop retrieves once per fired decision; an initial retrieval has no decision)."""
    fired = [j for j, d in enumerate(result.decisions) if d.fire]
    initial = max(0, len(result.retrievals) - len(fired))
    out: list[tuple[int, Retrieval | None]] = []
    for k, j in enumerate(fired):
        r = initial + k
        out.append((j, result.retrievals[r] if r < len(result.retrievals) else None))
    return out


def _initial_retrievals(result: ActiveRAGResult) -> list[Retrieval]:
    fired = sum(1 for d in result.decisions if d.fire)
    return list(result.retrievals[: max(0, len(result.retrievals) - fired)])


def _trigger_threshold(result: ActiveRAGResult) -> tuple[str | None, float | None, str]:
    """The signal the run's trigger thresholds, its threshold and direction (from the decisions)."""
    for d in result.decisions:
        if d.trigger in _TRIGGER_SIGNAL and d.threshold is not None:
            name, direction = _TRIGGER_SIGNAL[d.trigger]
            return name, float(d.threshold), direction
    for d in result.decisions:
        if d.trigger in _TRIGGER_SIGNAL:
            name, direction = _TRIGGER_SIGNAL[d.trigger]
            return name, None, direction
    return None, None, "above"


# ----------------------------------------------------------------------------------------- token signals
def token_signal_table(result: ActiveRAGResult) -> list[dict[str, Any]]:
    """The columns of :func:`plot_token_signals` as rows, in output order.

    Each row: ``column``, ``kind`` (``"accepted"``: a token of the answer; ``"fired"``: a token that fired
    and was discarded, placed where the retrieval happened), ``output_index`` (index in ``result.tokens``,
    ``None`` for a discarded token), ``text``, ``checked`` (the trigger scored this token), ``decision``
    (index in ``result.decisions``), ``retrieval`` (index in ``result.retrievals`` of the retrieval this
    token caused, else ``None``), and one value per signal (``nan`` where unknown): ``prob``, ``entropy``,
    ``max_attention``, ``semantic``, ``rind`` and any other signal the trigger recorded.
    """
    nan = float("nan")
    n = len(result.tokens)
    accepted: list[dict[str, Any]] = []
    for i, t in enumerate(result.tokens):
        accepted.append(
            {
                "kind": "accepted",
                "output_index": i,
                "text": t.text,
                "checked": False,
                "decision": None,
                "retrieval": None,
                "prob": float(t.prob),
                "entropy": float(t.entropy),
                "max_attention": nan,
                "semantic": nan,
                "rind": nan,
            }
        )
    inserted: dict[int, list[dict[str, Any]]] = {}
    retrieval_of = {j: r for j, r in _fired_pairs(result)}
    retrieval_index = {id(r): k for k, r in enumerate(result.retrievals)}
    for j, d in enumerate(result.decisions):
        if d.output_start is None:
            continue  # not placed by the loop (hand-made or older result): nothing to map it onto
        signals = _decision_signals(d)
        length = max((len(v) for v in signals.values()), default=0)
        action = _action(d.trigger)
        if not d.fire:
            kept = length
        elif action == "truncate":
            kept = d.index if d.index is not None else length
        elif action == "regenerate":
            kept = 0
        else:
            kept = length
        for k in range(kept):
            i = d.output_start + k
            if i >= n:
                break
            row = accepted[i]
            row["checked"] = True
            row["decision"] = j
            for name, values in signals.items():
                if k < len(values) and name not in ("prob", "entropy"):
                    row[name] = values[k]
        if not d.fire:
            continue
        r = retrieval_of.get(j)
        r_idx = retrieval_index.get(id(r)) if r is not None else None
        index = d.index
        if action in ("truncate", "regenerate") and index is not None and index >= kept:
            row = {
                "kind": "fired",
                "output_index": None,
                "text": d.token if d.token is not None else "?",
                "checked": True,
                "decision": j,
                "retrieval": r_idx,
                "prob": nan,
                "entropy": nan,
                "max_attention": nan,
                "semantic": nan,
                "rind": nan,
            }
            for name, values in signals.items():
                if index < len(values):
                    row[name] = values[index]
            at = d.output_start + kept if r is None else r.position
            inserted.setdefault(min(at, n), []).append(row)
        else:  # continue-style triggers: the segment is kept, the retrieval follows its last token
            last = (r.position if r is not None else d.output_start + kept) - 1
            if 0 <= last < n:
                accepted[last]["retrieval"] = r_idx
    rows: list[dict[str, Any]] = []
    for i in range(n + 1):
        rows.extend(inserted.get(i, []))
        if i < n:
            rows.append(accepted[i])
    for c, row in enumerate(rows):
        row["column"] = c
    return rows


def _char_offsets(result: ActiveRAGResult) -> list[int]:
    """Character offset in ``result.answer`` where each output token starts (and one past the end)."""
    text = "".join(t.text for t in result.tokens)
    lead = len(text) - len(text.lstrip())
    offsets, pos = [], 0
    for t in result.tokens:
        offsets.append(max(0, pos - lead))
        pos += len(t.text)
    offsets.append(max(0, pos - lead))
    return offsets


def _marked_answer(result: ActiveRAGResult) -> str:
    answer = result.answer
    if not result.tokens:
        return answer
    offsets = _char_offsets(result)
    marks = sorted(((min(r.position, len(offsets) - 1), k) for k, r in enumerate(result.retrievals)), reverse=True)
    for pos, k in marks:
        at = min(offsets[pos], len(answer))
        answer = answer[:at] + f" ⟦R{k + 1}⟧ " + answer[at:]
    return answer
