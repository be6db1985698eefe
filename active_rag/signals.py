"""Token-level signals, each a plain function named after the paper's equation it computes."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from .errors import NonFiniteLogitsError
from .text import is_content_word, word_groups, word_of


def entropy(logits: torch.Tensor) -> float:
    """DRAGIN Eq. 1: ``H_i = -sum_v p_i(v) log p_i(v)`` over the full vocabulary, in nats."""
    return entropy_from_logprobs(torch.log_softmax(logits.float(), dim=-1))


def entropy_from_logprobs(logprobs: torch.Tensor) -> float:
    """:func:`entropy` from the log-probabilities (``log_softmax`` of the logits), when they are at hand: the
    decoding loop computes them once for the token's log-probability and its entropy. ``0 * log 0`` counts as 0
    (only the terms whose probability is exactly 0); NaN or infinite logits raise
    :class:`~active_rag.errors.NonFiniteLogitsError` rather than read as a confident entropy of 0."""
    return finite_entropy(float(entropies(logprobs)), f"{logprobs.dtype} on {logprobs.device}")


def entropies(logprobs: torch.Tensor) -> torch.Tensor:
    """DRAGIN Eq. 1 over the last dimension of ``logprobs``, as a tensor (one entropy per row; ``0 * log 0``
    counts as 0), without the finite check :func:`entropy_from_logprobs` adds."""
    p = logprobs.exp()
    return -torch.where(p == 0, 0.0, p * logprobs).sum(dim=-1)


def finite_entropy(value: float, where: str) -> float:
    """``value`` (an entropy computed from logits ``where`` says) if finite, else
    :class:`~active_rag.errors.NonFiniteLogitsError`."""
    if not math.isfinite(value):
        raise NonFiniteLogitsError(
            f"The model produced non-finite logits (NaN or inf; {where}): its "
            "signals would be meaningless. float16 overflows on some models (Qwen2): load it with "
            "dtype='bfloat16' or 'float32'."
        )
    return value


def max_later_attention(rows: Sequence[torch.Tensor], length: int) -> torch.Tensor:
    """DRAGIN Eq. 3: ``a_max(i) = max_{j>i} A_{j,i}`` from attention rows ``A_{j,<j}`` (row ``j`` has length ``j``).

    Positions no later row covers get 0. The engine keeps the same vector as a running maximum
    (``DecodingSession.max_attention``); this function is the from-scratch definition."""
    out = torch.zeros(length, dtype=torch.float32, device="cpu")  # a_max lives on the CPU, as the captured rows
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


def whitespace_words(pieces: Sequence[str]) -> list[list[int]]:
    """Group token indices into whitespace-delimited words, as DRAGIN's released code merges tokens
    (``generate_attn``: a token that starts with the tokenizer's space marker, or a newline, starts a word;
    punctuation stays with its word, so ``" Peter."`` is one word). Empty pieces join the current word."""
    groups: list[list[int]] = []
    for i, piece in enumerate(pieces):
        if not groups or (piece and piece[0].isspace()) or (i > 0 and pieces[i - 1].endswith("\n")):
            groups.append([i])
        else:
            groups[-1].append(i)
    return groups


def sentence_word_groups(pieces: Sequence[str], words: Sequence[Sequence[int]]) -> list[list[int]]:
    """Indices into ``words`` grouped by sentence (punkt over the joined text, line breaks end a sentence):
    a word belongs to the sentence that holds its first non-space character."""
    from .text import sentence_spans

    text = "".join(pieces)
    ends = [end for _, end in sentence_spans(text)]
    starts: list[int] = []
    pos = 0
    for i, piece in enumerate(pieces):
        starts.append(pos)
        pos += len(piece)
    out: list[list[int]] = []
    current = -1
    for w, group in enumerate(words):
        word_text = "".join(pieces[i] for i in group)
        first = starts[group[0]] + (len(word_text) - len(word_text.lstrip()))
        k = next((n for n, end in enumerate(ends) if first < end), len(ends))
        if k != current or not out:
            out.append([])
            current = k
        out[-1].append(w)
    return out


def normalized_rind_word_scores(
    entropies: Sequence[float], max_attention: Sequence[float], semantic: Sequence[int]
) -> list[float]:
    """RIND on the scale of DRAGIN's released code for the words of ONE sentence (Eq. 1, 3, 4, 5 there).

    ``src/generate.py``, ``AttnWeightRAG.modifier``: ``attns = attns / sum(attns)`` over the sentence's words,
    then ``value_i = attns_i * weight_i * (tr - tl)``, i.e. each word's attention is divided by the sentence's
    mean word attention (the normalised attentions average 1) and multiplied by its entropy. ``entropies[i]``
    is the word's mean token entropy (Eq. 1), ``max_attention[i]`` the sum of its tokens' ``a_max`` (Eq. 3),
    ``semantic[i]`` the stop-word indicator ``s_i`` (Eq. 4), which the paper multiplies in (Eq. 5). A sentence
    whose words got no attention at all scores 0."""
    n = len(entropies)
    total = float(sum(max_attention))
    if n == 0 or total <= 0.0:
        return [0.0] * n
    return [float(h) * (float(a) / total) * n * int(s) for h, a, s in zip(entropies, max_attention, semantic, strict=True)]


def normalized_rind_scores(
    pieces: Sequence[str], entropies: Sequence[float], max_attention: Sequence[float]
) -> tuple[list[float], list[list[int]], list[list[int]]]:
    """Per-token RIND on the released code's scale (:func:`normalized_rind_word_scores`) over a segment.

    Tokens are merged into whitespace words (:func:`whitespace_words`; a word's entropy is the mean of its
    tokens', its attention the sum, as ``generate_attn`` does), words into sentences
    (:func:`sentence_word_groups`, DRAGIN uses spaCy's sentencizer), attention is normalised per sentence, and
    every token carries its word's score. Returns ``(token scores, words, sentences)``; ``sentences`` holds
    indices into ``words``."""
    words = whitespace_words(pieces)
    sentences = sentence_word_groups(pieces, words)
    scores = [0.0] * len(pieces)
    for sentence in sentences:
        groups = [words[w] for w in sentence]
        h = [sum(entropies[i] for i in g) / len(g) for g in groups]
        a = [sum(max_attention[i] for i in g) for g in groups]
        s = [1 if is_content_word("".join(pieces[i] for i in g)) else 0 for g in groups]
        for g, value in zip(groups, normalized_rind_word_scores(h, a, s), strict=True):
            for i in g:
                scores[i] = value
    return scores, words, sentences


def low_probability(logprobs: Sequence[float], threshold: float) -> list[bool]:
    """FLARE §3.2 (Eq. 3/4): which tokens have probability below ``threshold`` (theta to trigger, beta to mask)."""
    return [float(torch.tensor(lp, device="cpu").exp()) < threshold for lp in logprobs]  # float32, as recorded


def top_attended_positions(row: torch.Tensor, candidates: Sequence[int], top_n: int) -> list[int]:
    """DRAGIN §3.2 QFS steps (1)-(3): the ``top_n`` candidate positions by attention, in original order."""
    if not candidates or top_n <= 0:
        return []
    idx = torch.tensor([c for c in candidates if c < row.shape[0]], dtype=torch.long, device=row.device)
    if idx.numel() == 0:
        return []
    weights = row[idx]
    k = min(top_n, idx.numel())
    chosen = idx[torch.topk(weights, k).indices]
    return sorted(int(c) for c in chosen)
