"""Which decode steps share a batched forward, by the bytes of key/value cache it reads; out-of-memory told apart.

Follows the KV-cache accounting of vLLM's scheduler (admit sequences while their KV fits a budget, queue the
rest), here for the :class:`~active_rag.decoding.decode_scheduler.DecodeScheduler`'s ragged batches:

- A sequence of ``n`` tokens holds ``layers x kv_heads x head_dim x 2 (keys and values) x dtype bytes x n``
  bytes of KV (:func:`kv_bytes_per_token`). A batched decode step reads every admitted sequence's KV, appends
  one position to it (in place: :class:`~active_rag.decoding.kv_layer.GrowingLayer`) and, on the padded
  attention path (:mod:`active_rag.decoding.ragged_attention`), copies it padded to the longest sequence. Its cost is
  counted as that padded size, ``batch x longest x bytes per token`` (an upper bound of the loop path's sum).
- :func:`admit` takes the waiting steps in arrival order while that cost stays within the budget (always at
  least one step: a sequence larger than the budget runs alone); the others wait for the next forward, first in
  line, so none starves.
- The budget (:func:`default_kv_budget_bytes`): on a CUDA GPU, :data:`CUDA_FREE_FRACTION` of the memory free
  when the scheduler is made (after the model is loaded); elsewhere :data:`DEFAULT_KV_BUDGET_MB` (the CPU's
  memory is the machine's, which torch cannot see as "free"). ``lm.scheduler.kv_budget_bytes`` overrides it.
- :func:`is_out_of_memory` recognises ``torch.OutOfMemoryError`` and the ``RuntimeError`` "out of memory" that
  some backends (older CUDA builds, MPS, XPU) raise instead; the scheduler then splits the batch in halves and
  fails only the steps that run out of memory alone (:class:`~active_rag.errors.DecodeOutOfMemoryError`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

DEFAULT_KV_BUDGET_MB = 4096.0
"""The KV budget of one batched forward off CUDA (CPU, MPS): 4 GiB, e.g. 64 sequences of 1,400 tokens of
SmolLM2-135M in float32 (46 KiB a token)."""

CUDA_FREE_FRACTION = 0.5
"""On a CUDA GPU the budget is this share of the memory free when the scheduler is made."""


def kv_bytes_per_token(model: Any) -> int:
    """Bytes of key/value cache one token costs in ``model``: layers x kv heads x head dim x 2 x dtype bytes
    (0 when the config does not say, which admits by count only)."""
    config = model.config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    layers = int(getattr(text, "num_hidden_layers", 0) or 0)
    heads = int(getattr(text, "num_attention_heads", 0) or 0)
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    dim = int(getattr(text, "head_dim", None) or (int(getattr(text, "hidden_size", 0) or 0) // max(heads, 1)))
    dtype = getattr(model, "dtype", None)
    size = dtype.itemsize if isinstance(dtype, torch.dtype) else 4
    return layers * kv_heads * dim * 2 * size


def default_kv_budget_bytes(device: torch.device) -> int:
    """The budget when none is given (see the module docstring)."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free * CUDA_FREE_FRACTION)
    return int(DEFAULT_KV_BUDGET_MB * 2**20)


def batch_cost(tokens: Sequence[int], bytes_per_token: int) -> int:
    """The KV bytes a batched step over sequences of ``tokens`` reads, counted padded: ``batch x longest``."""
    return len(tokens) * max(tokens, default=0) * bytes_per_token


def admit(tokens: Sequence[int], bytes_per_token: int, budget: int, max_batch: int) -> int:
    """How many of the waiting steps (sequences of ``tokens`` after the step, in arrival order) the next forward
    takes: the longest prefix, at most ``max_batch``, whose :func:`batch_cost` fits ``budget``; at least one."""
    admitted = 0
    longest = 0
    for n in tokens[:max_batch]:
        longest = max(longest, n)
        if admitted and (admitted + 1) * longest * bytes_per_token > budget:
            break
        admitted += 1
    return admitted


def is_out_of_memory(error: BaseException) -> bool:
    """``torch.OutOfMemoryError``, or a ``RuntimeError`` whose message says "out of memory"."""
    if isinstance(error, torch.OutOfMemoryError):
        return True
    return isinstance(error, RuntimeError) and "out of memory" in str(error).lower()


def release_cached_memory(device: torch.device) -> None:
    """Hand the caching allocator's free blocks back before a retry (CUDA only; a no-op elsewhere)."""
    if device.type == "cuda":
        torch.cuda.empty_cache()


__all__ = [
    "CUDA_FREE_FRACTION",
    "DEFAULT_KV_BUDGET_MB",
    "admit",
    "batch_cost",
    "default_kv_budget_bytes",
    "is_out_of_memory",
    "kv_bytes_per_token",
    "release_cached_memory",
]
