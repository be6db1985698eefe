"""What fits the model's context window: the retrieved passages a prompt can hold, with room for the answer.

Every retrieval (and every prompt the loop reopens) must leave room in the model's context for the tokens
still to generate. When the passages held do not fit, :func:`fit_passages` keeps the longest version of
them that does: passages of earlier retrievals leave first (oldest first), then the newest retrieval's
lowest-ranked. What the newest retrieval loses moves from ``Retrieval.passages`` to ``Retrieval.dropped``
with the reason, and the call warns once (:data:`DROP_WARNING`). The prompt grows with every passage, so a
binary search needs O(log n) prompt renderings.

Which passages the prompt holds in the first place is the context policy's (:mod:`active_rag.components.context`);
the loop (:class:`~active_rag.engine.loop.ActiveRAG`) applies the policy, then this.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

from ..types import Passage, Retrieval

__all__ = ["DROP_WARNING", "fit_passages"]

#: How the warning of a retrieval that lost passages to the context window begins (warned once per call).
DROP_WARNING = "Context window full:"


def fit_passages(
    held: Sequence[Passage],
    retrieval: Retrieval,
    fits: Callable[[Sequence[Passage]], bool],
    *,
    model: Any,
    max_new_tokens: int,
    run_warnings: list[str],
    retrieval_number: int,
    stacklevel: int = 2,
) -> list[Passage]:
    """The longest version of ``held`` for which ``fits`` (the prompt with these passages leaves room for the
    tokens still to generate) holds; see the module docstring. ``retrieval`` is the newest retrieval, whose
    passages that do not fit are moved to its ``dropped``; ``run_warnings`` (the call's warnings) gets one
    warning per call, also issued with :func:`warnings.warn` (``stacklevel`` as there: the loop points it at
    the caller of its ``stream``). ``model`` names the model and its context (``name``, ``max_context``) in
    the messages."""
    held = list(held)
    if fits(held):
        return held
    new_ids = {p.id for p in retrieval.passages}
    old = [p for p in held if p.id not in new_ids]
    new = [p for p in held if p.id in new_ids]

    def longest(fits_n: Callable[[int], bool], n: int) -> int:
        lo, hi = 0, n  # fits_n(lo) assumed (0 passages are checked when the session opens); not fits_n(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fits_n(mid):
                lo = mid
            else:
                hi = mid
        return lo

    if old and fits(new):  # only earlier passages need to leave: the newest of them stay
        keep_old = longest(lambda n: fits(old[len(old) - n :] + new), len(old))
        return old[len(old) - keep_old :] + new
    keep = longest(lambda n: fits(new[:n]), len(new))
    total = len(retrieval.passages)
    dropped = new[keep:]
    reason = (
        f"context window: {model.name}'s context of {model.max_context} tokens holds the prompt, "
        f"{max_new_tokens} tokens to generate and only the {keep} best-ranked of the {total} passages"
    )
    retrieval.dropped = dropped + retrieval.dropped
    retrieval.passages = [p for p in retrieval.passages if p.id not in {d.id for d in dropped}]
    retrieval.dropped_reason = reason
    if not any(w.startswith(DROP_WARNING) for w in run_warnings):
        message = (
            f"{DROP_WARNING} retrieval {retrieval_number} kept {keep} of {total} passages, "
            f"{model.name}'s context of {model.max_context} tokens holds no more with the prompt and "
            f"{max_new_tokens} tokens to generate. The trace lists the passages in the prompt, and each "
            "retrieval's 'dropped' the rest (warned once per call). Lower top_k or max_new_tokens."
        )
        run_warnings.append(message)
        warnings.warn(message, stacklevel=stacklevel)
    return new[:keep]
