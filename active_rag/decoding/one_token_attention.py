"""A decode step's attention over a long cache: the query heads that share a key/value head read it together
(beyond the papers).

A decode step attends from one query position over every cached key. On the CPU, torch's fused kernel
(``scaled_dot_product_attention``, which transformers' ``sdpa`` attention calls with ``enable_gqa``) then works one
query head at a time, so each key/value head is read once for every query head that shares it (six times for
qwen2.5-coder-1.5b's 12 query heads over 2 key/value heads). :func:`one_token_attention` gives the same kernel the
heads that share a key/value head as that head's query rows (not causal: they are heads, not positions), so each
key/value head is read once, in one call. Measured on 2 threads in the thread the engine decodes in
(``results/bench/decode-attention/``): a layer of the 1.5B model's shape over 2,000 cached keys takes 0.63x the
fused kernel's time (0.55x at 4,000, 0.76x at 512), the 0.5B's 0.46x; through the engine, a step of the 1.5B model
after a 2,000-token prompt takes 0.82x the time at batch 1 and 0.77x at batch 8 (after 4,000 tokens 0.82x and 0.62x),
of the 0.5B 0.92x and 0.97x (0.88x and 0.83x). Below :data:`MIN_KEYS` keys it gains little or loses, and the model's kernel stays.

Where active-rag's CPU kernels decode (:func:`active_rag.kernels.available`), the grouped attention is their own op
(``csrc/attention.cpp``, :func:`kernel_attends`): the keys in blocks of 256, each block's keys and values streamed
once for the heads that share them in the kernels' own thread pool, the blocks combined as flash-decoding does. A layer
of qwen2.5-coder-0.5b's shape over 1,000 keys read from memory took 77 us where the grouped sdpa call took 120, of the
1.5B's 155 against 234 (``results/bench/decode-attention-op/``); it applies from the first key on (100 keys: 13 us
against 20).

Its outputs differ from the fused kernel's by float32 rounding (about 2e-7 here), the size of the differences
another CPU's or thread count's kernels make; the grouped sdpa call's greedy tokens were the same in every run
measured, the op's moved the 0.5B's text once, at the 20th of 128 tokens (the next layers' int8 activations carry a
rounding difference), so evaluation rows written with it have keys of their own.
:func:`applies` says where the engine uses it: a float32 one-token step of one sequence on the CPU, without a mask,
of a family whose attention is plain scaled dot-product over ``repeat_kv``'s heads (Llama, Qwen2: query head ``h``
reads key/value head ``h // (heads / kv_heads)``; no soft-capping, sinks or sliding window), through ``sdpa``, over at
least :data:`MIN_KEYS` keys (any number with the kernels' op). :data:`VARIABLE` ``=sdpa`` keeps the model's own call
everywhere, ``=grouped`` the grouped sdpa call instead of the kernels' op.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.nn.functional as F

from .. import kernels

__all__ = ["FAMILIES", "MIN_KEYS", "VARIABLE", "applies", "describe", "kernel_attends", "one_token_attention"]

VARIABLE = "ACTIVE_RAG_DECODE_ATTENTION"
"""Environment variable: ``sdpa`` keeps the model's own attention kernel for every decode step; ``grouped`` groups the
heads in sdpa's call where the kernels' op would run (as before the op existed)."""

MIN_KEYS = 512
"""From this many cached keys on, a one-token step's attention groups its heads (0.76-0.82x the fused kernel's time
at 512 keys in the engine's thread; about as fast at 256, slower below: ``results/bench/decode-attention/``)."""

FAMILIES = frozenset({"LlamaAttention", "Qwen2Attention"})
"""Attention modules whose ``sdpa`` forward is plain scaled dot-product attention over ``repeat_kv``'s heads."""


def _choice() -> str:
    return os.environ.get(VARIABLE, "").strip().lower()


def enabled() -> bool:
    """Whether :data:`VARIABLE` leaves the grouped call on (it is unless set to ``sdpa``)."""
    return _choice() not in ("sdpa", "model", "off", "0", "false", "no")


_KERNEL: dict[tuple[str | None, ...], bool] = {}


def kernel_attends() -> bool:
    """Whether the grouped attention runs as active-rag's kernels' op: they decode here
    (:func:`active_rag.kernels.available`) and :data:`VARIABLE` asks for neither sdpa call (a step asks once a layer:
    the answer is kept for the variables' values)."""
    environ = os.environ
    key = (environ.get(VARIABLE), environ.get(kernels.DECODE_KERNEL_VARIABLE), environ.get(kernels.ISA_VARIABLE))
    known = _KERNEL.get(key)
    if known is None:
        known = _KERNEL[key] = enabled() and _choice() != "grouped" and kernels.available()
    return known


def describe() -> str:
    """How a one-token step's attention runs on the CPU, for ``active-rag doctor``: the kernels' op, sdpa with the
    heads grouped (from :data:`MIN_KEYS` keys), or the model's own sdpa call."""
    if not enabled():
        return f"the model's sdpa ({VARIABLE}={os.environ.get(VARIABLE)})"
    return "active-rag's op" if kernel_attends() else f"sdpa, heads grouped from {MIN_KEYS} keys"


def applies(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, mask: torch.Tensor | None,
            kwargs: dict[str, Any]) -> bool:
    """Whether the layer ``module``'s attention of this call runs as :func:`one_token_attention` (module docstring)."""
    return (
        query.shape[0] == 1
        and query.shape[2] == 1
        and mask is None
        and query.device.type == "cpu"
        and query.dtype == torch.float32
        and key.dtype == torch.float32
        and type(module).__name__ in FAMILIES
        and getattr(module, "_active_rag_inner", None) == "sdpa"
        and not kwargs.get("dropout")
        and kwargs.get("sliding_window") is None
        and enabled()
        and (key.shape[2] >= MIN_KEYS or kernel_attends())
    )


def one_token_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        scaling: float | None = None) -> torch.Tensor:
    """``softmax(q K^T * scaling) V`` of one query position of one sequence: ``query`` ``[1, heads, 1, dim]``,
    ``key`` and ``value`` ``[1, kv_heads, keys, dim]`` -> ``[1, 1, heads, dim]`` (the layout transformers' attention
    functions return). ``scaling``: ``dim ** -0.5`` when ``None``.

    The query heads that share a key/value head are that head's query rows in one fused call (not causal: they are
    heads, not positions), so each key/value head is read once."""
    heads, kv_heads, dim = query.shape[1], key.shape[1], query.shape[3]
    if heads % kv_heads:
        raise ValueError(f"{heads} query heads do not share {kv_heads} key/value heads evenly")
    if kernel_attends() and key.stride(-1) == 1 and value.stride() == key.stride():
        return torch.ops.active_rag.decode_attention.default(query, key, value, dim**-0.5 if scaling is None else scaling)
    grouped = query.reshape(1, kv_heads, heads // kv_heads, dim)
    out = F.scaled_dot_product_attention(grouped, key, value, scale=scaling)
    return out.reshape(1, 1, heads, dim)
