"""A batched decode step of a plain decoder without transformers' per-call machinery (beyond the papers).

A decode step feeds one token per sequence. Through ``model(...)`` it also pays, for every one of those tokens,
what transformers does around the arithmetic: a causal mask built and thrown away, two ``nn.Module`` calls per
projection, a ``deprecate_kwarg`` wrapper per layer and per attention, ``GradientCheckpointingLayer.__call__``,
``TransformersKwargs`` merged at each level and two output dataclasses. Measured through the engine on a 2-core CPU
(``results/bench/lean-step/``: qwen2.5-coder-0.5b and 1.5B ``mixed``, batch 1 and 8), this step takes 0.95-0.98x the
time of ``model(...)``'s, with the same tokens; the rest of a step's Python is in the packed layers' ``forward`` and
the ragged attention's dispatch, which it keeps.

:func:`lean_step` returns, for a model of a family whose decoder it knows (transformers' ``LlamaForCausalLM``, the
shipped SmolLM2, and ``Qwen2ForCausalLM``, the shipped Qwen2.5 models), a function that runs the same step as
``model(input_ids, cache=cache, position_ids=..., use_cache=True, logits_to_keep=1)`` and returns the last
position's logits. It calls what the model's own forward calls, in the same order and with the same shapes: the
embedding, the model's rotary module (so any rope scaling it has), each layer's norms through their own
``forward``, the projections (packed layers through their fused decode op), the cache's ``update`` and the
attention function the model is configured with (:mod:`active_rag.decoding.attention`, so a ragged batch, its
captured attention rows and any sequence's faults behave as before), the MLP, the final norm and the head. It is a
step of the decode scheduler only (:class:`~active_rag.decoding.decode_scheduler.DecodeScheduler`); prefills run
``model(...)``.

``None`` (and ``model(...)`` as before) for any other family, a layer of another class, a layer that does not
attend over every position (a sliding window), a head with soft-capping, or a module replaced by accelerate's
offloading. The direct calls would skip a forward hook, so a step finds the model's hooks first
(:meth:`LeanStep.hooked`, a few microseconds) and, while any module has one (a user's tracer, ``active-rag
doctor``'s injected fault), the scheduler steps through ``model(...)``. Chosen when the scheduler is built;
:data:`DECODE_STEP_VARIABLE` ``=transformers`` turns it off for schedulers built after.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["DECODE_STEP_VARIABLE", "LEAN_FAMILIES", "LeanStep", "lean_step"]

DECODE_STEP_VARIABLE = "ACTIVE_RAG_DECODE_STEP"
"""Environment variable: ``transformers`` makes decode schedulers built afterwards step through ``model(...)``."""

LEAN_FAMILIES: dict[str, str] = {"LlamaForCausalLM": "LlamaDecoderLayer", "Qwen2ForCausalLM": "Qwen2DecoderLayer"}
"""Model class -> the decoder layer class whose forward :func:`lean_step` repeats."""

Step = Callable[[torch.Tensor, torch.Tensor, Any], torch.Tensor]
"""``(input_ids [batch, 1], position_ids [batch, 1], cache) -> logits [batch, vocab]`` of the one new position."""


def _global_hooks() -> bool:
    from torch.nn.modules import module as module_globals

    return any(getattr(module_globals, name, None) for name in ("_global_forward_hooks", "_global_forward_pre_hooks"))


class LeanStep:
    """``step(input_ids, position_ids, cache) -> logits`` of a model (:func:`lean_step`), with :meth:`hooked`."""

    def __init__(self, model: torch.nn.Module, step: Step) -> None:
        modules = list(model.modules())
        # the modules' own hook tables (registering a hook adds to them, removing it deletes from them)
        self._tables = [m._forward_hooks for m in modules] + [m._forward_pre_hooks for m in modules]
        self._step = step

    def hooked(self) -> bool:
        """Whether a module of the model has a forward hook now (the direct calls would skip it)."""
        return _global_hooks() or any(self._tables)

    def __call__(self, input_ids: torch.Tensor, position_ids: torch.Tensor, cache: Any) -> torch.Tensor:
        return self._step(input_ids, position_ids, cache)


def _unsupported(model: torch.nn.Module) -> str | None:
    """Why :func:`lean_step` cannot run ``model``'s step, or ``None``."""
    name = type(model).__name__
    layer_class = LEAN_FAMILIES.get(name)
    if layer_class is None:
        return f"{name} is not a family the lean step knows"
    inner, config = getattr(model, "model", None), getattr(model, "config", None)
    layers = getattr(inner, "layers", None)
    if inner is None or config is None or layers is None or not hasattr(model, "lm_head"):
        return "the model has not the layout of its family"
    if any(type(layer).__name__ != layer_class for layer in layers):
        return "a layer of another class"
    if any(t != "full_attention" for t in (getattr(config, "layer_types", None) or ["full_attention"])):
        return "a layer that does not attend over every position"
    if getattr(config, "final_logit_softcapping", None) or getattr(config, "pretraining_tp", 1) != 1:
        return "a head the lean step does not repeat"
    if any(hasattr(m, "_hf_hook") for m in model.modules()):
        return "a module replaced by accelerate's hooks"
    return None


def lean_step(model: torch.nn.Module) -> LeanStep | None:
    """The decode step of ``model`` without transformers' per-call machinery, or ``None`` where it does not
    apply (see the module docstring)."""
    if os.environ.get(DECODE_STEP_VARIABLE, "").strip().lower() in ("transformers", "off", "0", "false", "no"):
        return None
    if _unsupported(model) is not None:
        return None
    family = sys.modules[type(model).__module__]
    apply_rotary_pos_emb, eager = family.apply_rotary_pos_emb, family.eager_attention_forward
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    inner = model.model  # type: ignore[attr-defined]
    layers = list(inner.layers)
    final_norm, rotary, embed, head = inner.norm, inner.rotary_emb, inner.embed_tokens, model.lm_head  # type: ignore[attr-defined]

    def attention(attn: Any, hidden: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor], cache: Any,
                  position_ids: torch.Tensor) -> torch.Tensor:
        """``Qwen2Attention.forward`` / ``LlamaAttention.forward`` for a decode step."""
        input_shape = hidden.shape[:-1]
        hidden_shape = (*input_shape, -1, attn.head_dim)
        query = attn.q_proj.forward(hidden).view(hidden_shape).transpose(1, 2)
        key = attn.k_proj.forward(hidden).view(hidden_shape).transpose(1, 2)
        value = attn.v_proj.forward(hidden).view(hidden_shape).transpose(1, 2)
        cos, sin = cos_sin
        query, key = apply_rotary_pos_emb(query, key, cos, sin)
        kwargs: dict[str, Any] = {"position_ids": position_ids, "use_cache": True}
        key, value = cache.update(key, value, attn.layer_idx, kwargs=kwargs)
        function = ALL_ATTENTION_FUNCTIONS.get_interface(attn.config._attn_implementation, eager)
        extra = {"sliding_window": attn.sliding_window} if hasattr(attn, "sliding_window") else {}
        out, _ = function(attn, query, key, value, None, dropout=0.0, scaling=attn.scaling, **extra, **kwargs)
        return attn.o_proj.forward(out.reshape(*input_shape, -1).contiguous())

    def step(input_ids: torch.Tensor, position_ids: torch.Tensor, cache: Any) -> torch.Tensor:
        hidden = embed(input_ids)
        cos_sin = rotary(hidden, position_ids)
        for layer in layers:
            residual = hidden
            hidden = residual + attention(layer.self_attn, layer.input_layernorm.forward(hidden), cos_sin, cache,
                                          position_ids)
            residual = hidden
            mlp = layer.mlp
            x = layer.post_attention_layernorm.forward(hidden)
            hidden = residual + mlp.down_proj.forward(mlp.act_fn(mlp.gate_proj.forward(x)) * mlp.up_proj.forward(x))
        hidden = final_norm.forward(hidden)
        return head.forward(hidden[:, -1:, :])[:, -1]

    return LeanStep(model, step)
