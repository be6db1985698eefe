"""Attention of a ragged batched decode step: many sequences, one new token each, every sequence over its own cache.

The :class:`~active_rag.decoding.decode_scheduler.DecodeScheduler` advances the sequences decoding at the same time in one
forward pass (:class:`RaggedBatch`, :class:`RaggedCache`). Projections and MLPs see the batch; attention needs each
sequence's own keys and values, which differ in length. Two ways to compute it, with the same results:

- **loop** (the original path): one call of the model's attention kernel per sequence per layer, no padding. Cost:
  ``batch x layers`` small kernel calls a step, each paying Python and dispatch overhead.
- **padded**: the sequences' keys/values padded to the longest into one ``[batch, kv_heads, longest, head_dim]``
  tensor and one call of the kernel with a key mask (``True`` = attend; an additive ``-inf``-like mask for eager
  attention), i.e. ``torch.nn.functional.scaled_dot_product_attention`` with ``attn_mask`` as transformers' sdpa
  path passes it. Padded positions get zero weight, so each row's output is its unpadded attention up to float
  rounding (greedy tokens identical in float32: ``tests/unit_tests/test_ragged_attention.py``). Cost: one copy of
  every sequence's keys/values into the padded tensor, and work on the padding (``batch x longest`` instead of
  the sum of the lengths).

``auto`` (the default) takes the padded path on a device type listed in :data:`PADDED_MIN_BATCH`, from that many
sequences on, when the padding wastes less than half the keys (:data:`PADDED_MIN_FILL`) and the layer's kernel is
sdpa or eager (other kernels, e.g. flash-attention, take a padding mask of their own form); elsewhere the loop.
Measured on the CPU (``python -m active_rag.evaluation.bench_ragged``; ``docs/speed.md``, "Ragged attention"): the
padded call is slower or even at batch 8 and 32 (``loop / padded`` 0.79-1.04x: a CPU sdpa call costs ~25 us, less
than copying the keys and values into the padded tensor and attending over the padding), so the CPU is not listed.
On CUDA (an H200, bfloat16, a model of qwen2.5-coder-0.5b's shape; ``results/bench/gpu/gpu-checks.md``) the loop's
one kernel launch per sequence and layer dominates: ``loop / padded`` is 1.93 at batch 8 and 1.84 at batch 32, so
CUDA pads from 8 sequences on. FlexAttention
compiled for the CPU computes the padded call in half the loop's time, but only from keys already padded, which
cost more to build each step than the loop spends (same page). The captured layer's attention rows (DRAGIN Eq.
2-3) are computed per sequence that asks for one, apart and in float32, on both paths.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

AttentionMode = Literal["auto", "loop", "padded"]
ATTENTION_MODES: tuple[str, ...] = ("auto", "loop", "padded")

PADDED_MIN_BATCH: dict[str, int] = {"cuda": 8}
"""Device type -> the batch size from which ``auto`` pads: CUDA from 8 (padded 1.8-1.9x the loop's speed at 8 and
32, ``results/bench/gpu/gpu-checks.md``); not the CPU, where the loop measured faster at batch 8 and 32
(``results/bench/ragged-smollm2.md``)."""
PADDED_MIN_FILL = 0.5
"""``auto`` pads only when the real keys are at least this share of the padded ones."""
PADDED_KERNELS = ("sdpa", "eager")
"""The inner kernels that take the padded path's key mask."""

Kernel = Callable[..., tuple[torch.Tensor, torch.Tensor | None]]
RowFunction = Callable[..., torch.Tensor]
"""``(module, query, key, value, mask, **kwargs) -> head-averaged float32 attention row`` of the last query."""


@dataclass
class RaggedBatch:
    """One batched decode step: row ``b`` is a sequence with its own cache.

    ``caches[b]`` is that sequence's ``DynamicCache``; ``capture[b]`` says whether its attention row is wanted;
    ``mode`` picks the attention path (see the module docstring). :class:`RaggedCache` appends each row's new
    key/value to its own cache and parks the full tensors in ``kv`` for the attention function.
    """

    caches: Sequence[Any]
    capture: Sequence[bool]
    mode: str = "auto"
    rows: list[torch.Tensor | None] = field(default_factory=list)
    kv: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = field(default_factory=dict)
    _masks: dict[tuple[int, ...], torch.Tensor] = field(default_factory=dict)
    padded_layers: int = 0
    """How many layer calls of this step took the padded path (for tests and the bench)."""

    def __post_init__(self) -> None:
        self.rows = [None] * len(self.caches)

    def key_mask(self, lengths: Sequence[int], device: torch.device) -> torch.Tensor:
        """``[batch, 1, 1, longest]`` bool, ``True`` where row ``b`` has a real key; one per set of lengths (every
        layer of a step shares it unless a layer keeps a window of its own)."""
        key = tuple(lengths)
        mask = self._masks.get(key)
        if mask is None:
            counts = torch.tensor(key, dtype=torch.long, device=device)
            mask = torch.arange(max(key), device=device)[None, :] < counts[:, None]
            mask = self._masks[key] = mask[:, None, None, :]
        return mask


def use_padded(module: torch.nn.Module, batch: RaggedBatch, lengths: Sequence[int], device_type: str) -> bool:
    """Whether this layer's call takes the padded path (see the module docstring)."""
    if batch.mode == "loop" or getattr(module, "_active_rag_inner", None) not in PADDED_KERNELS:
        return False
    if batch.mode == "padded":
        return True
    threshold = PADDED_MIN_BATCH.get(device_type)
    n = len(lengths)
    return threshold is not None and n >= threshold and sum(lengths) >= PADDED_MIN_FILL * n * max(lengths)


def _additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    zero = torch.zeros((), dtype=dtype, device=mask.device)
    neg = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=mask.device)
    return torch.where(mask, zero, neg)


def _pad(tensors: Sequence[torch.Tensor], longest: int) -> torch.Tensor:
    """``[1, heads, length_b, dim]`` each -> one contiguous ``[batch, heads, longest, dim]``, zeros after each length
    (a copy per sequence into a zeroed tensor: on the CPU 4x faster than ``pad_sequence``, whose transposed result
    sdpa copies again)."""
    first = tensors[0]
    padded = first.new_zeros((len(tensors), first.shape[1], longest, first.shape[3]))
    for b, t in enumerate(tensors):
        padded[b, :, : t.shape[-2]] = t[0]
    return padded


def ragged_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    batch: RaggedBatch,
    *,
    inner: Kernel,
    captured: bool,
    row_function: RowFunction,
    **kwargs: Any,
) -> torch.Tensor:
    """The attention output ``[batch, 1, heads, head_dim]`` of one layer of a ragged step; fills ``batch.rows`` on
    the captured layer. ``inner`` is the layer's own kernel; ``row_function`` computes a captured row."""
    kv = batch.kv[module.layer_idx]  # type: ignore[attr-defined]
    lengths = [k.shape[-2] for k, _ in kv]
    if use_padded(module, batch, lengths, query.device.type):
        out = padded_attention(module, query, kv, lengths, batch, inner, **kwargs)
    else:
        out = loop_attention(module, query, kv, inner, **kwargs)
    if captured:
        kwargs.pop("is_causal", None)
        for b, (k, v) in enumerate(kv):
            if batch.capture[b]:
                batch.rows[b] = row_function(module, query[b : b + 1], k, v, None, **kwargs)
    return out


def loop_attention(
    module: torch.nn.Module, query: torch.Tensor, kv: Sequence[tuple[torch.Tensor, torch.Tensor]], inner: Kernel, **kwargs: Any
) -> torch.Tensor:
    """One kernel call per sequence over its own keys/values, without padding."""
    outputs = [inner(module, query[b : b + 1], k, v, None, **kwargs)[0] for b, (k, v) in enumerate(kv)]
    return torch.cat(outputs, dim=0)


def padded_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    kv: Sequence[tuple[torch.Tensor, torch.Tensor]],
    lengths: Sequence[int],
    batch: RaggedBatch,
    inner: Kernel,
    **kwargs: Any,
) -> torch.Tensor:
    """One kernel call over the keys/values padded to the longest sequence, with a key mask."""
    longest = max(lengths)
    keys = _pad([k for k, _ in kv], longest)
    values = _pad([v for _, v in kv], longest)
    mask = batch.key_mask(lengths, query.device)
    if getattr(module, "_active_rag_inner", None) == "eager":  # eager attention adds its mask to the scores
        mask = _additive_mask(mask, query.dtype)
    kwargs["is_causal"] = False
    batch.padded_layers += 1
    out, _ = inner(module, query, keys, values, mask, **kwargs)
    return out


class RaggedCache:
    """The ``cache`` of a :class:`RaggedBatch` forward: appends row ``b``'s new key/value to
    sequence ``b``'s own cache and parks the result for the attention function.

    To the model it looks like an empty cache (mask sizes of the new token only): the causal mask is not
    needed, because a one-token query may attend to every cached position of its own sequence."""

    is_compileable = False
    layers: list[Any] = []

    def __init__(self, batch: RaggedBatch) -> None:
        self.batch = batch

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        self.batch.kv[layer_idx] = [
            cache.update(key_states[b : b + 1], value_states[b : b + 1], layer_idx) for b, cache in enumerate(self.batch.caches)
        ]
        return key_states, value_states

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0) -> tuple[int, int]:
        return query_length, 0

    def get_query_offset(self, layer_idx: int = 0) -> int:
        return 0

    @property
    def is_sliding(self) -> list[bool]:
        return [False]

    @property
    def is_linear(self) -> list[bool]:
        return [False]

    @property
    def is_dummy(self) -> list[bool]:
        return [False]

    def __len__(self) -> int:
        return 0


__all__ = [
    "ATTENTION_MODES",
    "AttentionMode",
    "PADDED_KERNELS",
    "PADDED_MIN_BATCH",
    "PADDED_MIN_FILL",
    "RaggedBatch",
    "RaggedCache",
    "loop_attention",
    "padded_attention",
    "ragged_attention",
    "use_padded",
]
