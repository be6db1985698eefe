"""The attention function every layer of an :class:`~active_rag.decoding.model.ActiveLM` runs through.

It is wired through transformers' ``AttentionInterface``: each attention module gets its own shallow copy
of the config whose ``_attn_implementation`` names :data:`IMPLEMENTATION`. The function has three paths:

- **Ragged batched decode** (:class:`RaggedBatch`): one forward pass advances many sequences by one token
  each. The projections and MLPs run batched; attention runs over each sequence's own KV cache, row by row
  or in one padded call with a key mask (:mod:`active_rag.decoding.ragged_attention`), so sequences of any length
  share the pass (the idea of vLLM's paged attention, here with one contiguous cache per sequence). On the
  captured layer, rows that ask for it compute explicit weights and record the head-averaged attention row
  (DRAGIN Eq. 2-3 need it).
- **Single-sequence capture**: a one-token decode step outside a batch records its row the same way.
- **Anything else** (prefill, plain ``model.generate``): the model's own kernel (sdpa), unchanged, except that a
  prompt after a cached prefix runs its queries in chunks over the key blocks each sees, with the same outputs bit
  for bit (:mod:`active_rag.decoding.prefill_attention`).

In every path a one-token step over a long cache on the CPU gives sdpa the query heads that share a key/value head as
that head's rows, so each key/value head is read once (:mod:`active_rag.decoding.one_token_attention`).

Capture state lives in :class:`contextvars.ContextVar` objects, so several threads never share it.
"""

from __future__ import annotations

import contextvars
import copy
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from . import one_token_attention as one_token
from . import prefill_attention as prefill
from .ragged_attention import RaggedBatch, RaggedCache, ragged_attention

IMPLEMENTATION = "active_rag"


@dataclass
class Capture:
    """Receives the captured layer's head-averaged attention row of a one-token step."""

    row: torch.Tensor | None = None


CAPTURE: contextvars.ContextVar[Capture | None] = contextvars.ContextVar("active_rag_capture", default=None)
RAGGED: contextvars.ContextVar[RaggedBatch | None] = contextvars.ContextVar("active_rag_ragged", default=None)


def eager_function(module: torch.nn.Module) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """The model family's own eager attention (handles GQA, soft-capping, sinks where the family has them)."""
    fn = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
    if fn is None:
        from transformers.models.llama.modeling_llama import eager_attention_forward as fn
    return fn


def _model_function(module: torch.nn.Module) -> Callable[..., tuple[torch.Tensor, torch.Tensor | None]]:
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    inner = module._active_rag_inner  # type: ignore[attr-defined]
    if inner == "eager":
        return eager_function(module)
    return ALL_ATTENTION_FUNCTIONS.get_interface(inner, eager_function(module))


def _inner_function(module: torch.nn.Module) -> Callable[..., tuple[torch.Tensor, torch.Tensor | None]]:
    """The layer's kernel: the model's own (sdpa, eager...), except a one-token step over a long cache, whose heads
    sdpa reads grouped by the key/value head they share where that is the same attention
    (:mod:`active_rag.decoding.one_token_attention`), and a prompt after a cached prefix, whose queries sdpa reads in
    chunks over the key blocks they see, bit for bit the same (:mod:`active_rag.decoding.prefill_attention`)."""
    model_function = _model_function(module)

    def kernel(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               mask: torch.Tensor | None, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        if one_token.applies(module, query, key, mask, kwargs):
            return one_token.one_token_attention(query, key, value, kwargs.get("scaling")), None
        if prefill.applies(module, query, key, mask, kwargs):
            out = prefill.prefill_attention(query, key, value, mask, kwargs.get("scaling"))  # type: ignore[arg-type]
            if out is not None:
                return out, None
        return model_function(module, query, key, value, mask, **kwargs)

    return kernel


def _additive_mask(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    if mask is None or mask.dtype != torch.bool:
        return mask
    zero = torch.zeros((), dtype=dtype, device=mask.device)
    neg = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=mask.device)
    return torch.where(mask, zero, neg)


def _attention_row(
    module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None, **kwargs: Any
) -> torch.Tensor:
    """The head-averaged attention row of the last query, by the family's eager function in float32."""
    kwargs.pop("is_causal", None)
    last = query[:, :, -1:, :].float()
    row_mask = None if mask is None else _additive_mask(mask, torch.float32)[..., -1:, :].float()
    _, weights = eager_function(module)(module, last, key.float(), value.float(), row_mask, **kwargs)
    return weights[0, :, -1, :].mean(dim=0).cpu()


def _captured_row(
    module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None, **kwargs: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """The layer's output from the model's own kernel (so capturing never changes the generated tokens: eager
    attention rounds ``QK^T`` to bfloat16 before the softmax where sdpa keeps float32), and the head-averaged
    attention row of the last query computed apart, by the family's eager function in float32."""
    out, _ = _inner_function(module)(module, query, key, value, mask, **kwargs)
    return out, _attention_row(module, query, key, value, mask, **kwargs)


def attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The registered attention function (see the module docstring for its three paths)."""
    captured = getattr(module, "_active_rag_captured", False)
    batch = RAGGED.get()
    if batch is not None:
        out = ragged_attention(
            module, query, batch, inner=_inner_function(module), captured=captured, row_function=_attention_row, **kwargs
        )
        return out, None
    capture = CAPTURE.get() if captured else None
    if capture is None or query.shape[2] != 1 or query.shape[0] != 1:
        return _inner_function(module)(module, query, key, value, attention_mask, **kwargs)
    out, capture.row = _captured_row(module, query, key, value, attention_mask, **kwargs)
    return out, None


def kernel_step_attention(module: torch.nn.Module, query: torch.Tensor, scaling: float | None) -> torch.Tensor | None:
    """The output ``[batch, 1, heads, dim]`` that :func:`attention_forward` gives ``module``'s layer in a ragged
    decode step (after the step's cache update), where each sequence's call would be the kernels' one-token op
    (:func:`~active_rag.decoding.one_token_attention.kernel_attends`): the same calls, without the layers of Python
    around them (the decode step of :mod:`active_rag.decoding.lean_step`; about 20 us a layer). ``None`` where
    anything else would run: no ragged batch, a padded one, a captured layer whose row a sequence wants, another
    attention, dtype or device."""
    batch = RAGGED.get()
    if (batch is None or batch.mode == "padded" or query.device.type != "cpu" or query.dtype != torch.float32
            or getattr(module, "_active_rag_inner", None) != "sdpa" or type(module).__name__ not in one_token.FAMILIES
            or (getattr(module, "_active_rag_captured", False) and any(batch.capture))
            or not one_token.kernel_attends()):
        return None
    kv = batch.kv[module.layer_idx]  # type: ignore[attr-defined]
    if kv[0][0].dtype != torch.float32:
        return None
    outputs = [one_token.one_token_attention(query[b : b + 1], k, v, scaling) for b, (k, v) in enumerate(kv)]
    return outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=0)


def _register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(IMPLEMENTATION, attention_forward)


_register()


def attention_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's self-attention modules, in layer order."""
    mods = [
        m
        for m in model.modules()
        if isinstance(getattr(m, "layer_idx", None), int) and hasattr(m, "config") and "Attention" in type(m).__name__
    ]
    return sorted(mods, key=lambda m: m.layer_idx)


def install(modules: Sequence[torch.nn.Module], captured: torch.nn.Module) -> None:
    """Route every module through :func:`attention_forward`; ``captured`` records attention rows.

    Idempotent: a model already wired (e.g. wrapped by a second ``ActiveLM``) keeps its wiring, with the
    captured layer moved to ``captured``."""
    for module in modules:
        if getattr(module.config, "_attn_implementation", None) != IMPLEMENTATION:
            config = copy.copy(module.config)
            module._active_rag_inner = module.config._attn_implementation or "eager"  # type: ignore[attr-defined]
            config._attn_implementation_internal = IMPLEMENTATION
            module.config = config
        module._active_rag_captured = module is captured  # type: ignore[attr-defined]


__all__ = [
    "IMPLEMENTATION",
    "Capture",
    "RaggedBatch",
    "RaggedCache",
    "CAPTURE",
    "RAGGED",
    "attention_forward",
    "attention_modules",
    "eager_function",
    "install",
    "kernel_step_attention",
]
