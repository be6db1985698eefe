"""Token-level signals, each a plain function named after the paper's equation it computes."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .text import is_content_word, word_groups, word_of


def entropy(logits: torch.Tensor) -> float:
    """DRAGIN Eq. 1: ``H_i = -sum_v p_i(v) log p_i(v)`` over the full vocabulary, in nats."""
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    return float(-(logprobs.exp() * logprobs).nan_to_num().sum())


def max_later_attention(rows: Sequence[torch.Tensor], length: int) -> torch.Tensor:
    """DRAGIN Eq. 3: ``a_max(i) = max_{j>i} A_{j,i}`` from attention rows ``A_{j,<j}`` (row ``j`` has length ``j``).

    Positions no later row covers get 0. The engine keeps the same vector as a running maximum
    (``DecodingSession.max_attention``); this function is the from-scratch definition."""
    out = torch.zeros(length, dtype=torch.float32)
    for row in rows:
        n = min(row.shape[0], length)
        torch.maximum(out[:n], row[:n].float(), out=out[:n])
    return out


def semantic_indicator(pieces: Sequence[str]) -> list[int]:
    """DRAGIN Eq. 4: ``s_i = 0`` if token ``t_i`` belongs to a stop word (spaCy's list), else 1.

    Sub-word tokens take the value of the whole word they belong to."""
    s = [0] * len(pieces)
    for group in word_groups(pieces):
        value = 1 if is_content_word(word_of(pieces, group)) else 0
        for i in group:
            s[i] = value
    return s


def rind_scores(entropies: Sequence[float], max_attention: Sequence[float], semantic: Sequence[int]) -> list[float]:
    """DRAGIN Eq. 5: ``S_RIND(t_i) = H_i * a_max(i) * s_i``."""
    return [float(h) * float(a) * int(s) for h, a, s in zip(entropies, max_attention, semantic, strict=True)]


def low_probability(logprobs: Sequence[float], threshold: float) -> list[bool]:
    """FLARE §3.2 (Eq. 3/4): which tokens have probability below ``threshold`` (theta to trigger, beta to mask)."""
    return [float(torch.tensor(lp).exp()) < threshold for lp in logprobs]


def top_attended_positions(row: torch.Tensor, candidates: Sequence[int], top_n: int) -> list[int]:
    """DRAGIN §3.2 QFS steps (1)-(3): the ``top_n`` candidate positions by attention, in original order."""
    if not candidates or top_n <= 0:
        return []
    idx = torch.tensor([c for c in candidates if c < row.shape[0]], dtype=torch.long)
    if idx.numel() == 0:
        return []
    weights = row[idx]
    k = min(top_n, idx.numel())
    chosen = idx[torch.topk(weights, k).indices]
    return sorted(int(c) for c in chosen)
