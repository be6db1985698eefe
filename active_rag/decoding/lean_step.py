"""A batched decode step of a plain decoder without transformers' per-call machinery (beyond the papers).

A decode step feeds one token per sequence. Through ``model(...)`` it also pays, for every one of those tokens,
what transformers does around the arithmetic: a causal mask built and thrown away, two ``nn.Module`` calls per
projection, a ``deprecate_kwarg`` wrapper per layer and per attention, ``GradientCheckpointingLayer.__call__``,
``TransformersKwargs`` merged at each level and two output dataclasses. Measured through the engine on a 2-core CPU
(``results/bench/lean-step/``: qwen2.5-coder-0.5b and 1.5B ``mixed``, batch 1 and 8), this step takes 0.875-0.98x the
time of ``model(...)``'s, with the same tokens: each layer's modules are read once when the step is built, a packed
projection is its kernel's op with its tensors bound (:meth:`~active_rag.models.quantized.PackedLinear.
decode_function`), and the rotation's ``cos``/``sin`` are prepared once a step (:class:`_Rotary`).

:func:`lean_step` returns, for a model of a family whose decoder it knows (transformers' ``LlamaForCausalLM``, the
shipped SmolLM2, and ``Qwen2ForCausalLM``, the shipped Qwen2.5 models), a function that runs the same step as
``model(input_ids, cache=cache, position_ids=..., use_cache=True, logits_to_keep=1)`` and returns the last
position's logits. It calls what the model's own forward calls, in the same order and with the same shapes: the
embedding, the model's rotary module (so any rope scaling it has; its rotation is the family's function's, in fewer
ops only where a check at build gives the same bits), each layer's residual adds and norms (one op each where a
check at build gives their own ``forward``'s bits: :mod:`active_rag.decoding.step_norms`), the projections (packed
layers through their fused decode op, those that read one input in one call where they can:
:mod:`active_rag.models.fused_projections`), the cache's ``update`` and the
attention function the model is configured with (:mod:`active_rag.decoding.attention`, so a ragged batch, its
captured attention rows and any sequence's faults behave as before), the MLP, the final norm and the head. Where the
kernels' library runs every part of a layer, that loop over the layers is its ``decode_layers`` op instead, with the
same bits (:mod:`active_rag.decoding.kernel_layers`). It is a step of the decode scheduler only
(:class:`~active_rag.decoding.decode_scheduler.DecodeScheduler`); prefills run ``model(...)``.

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

from ..models.fused_projections import fuse_projections
from . import step_norms
from .attention import IMPLEMENTATION, kernel_step_attention
from .kernel_layers import kernel_layers

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

    def __init__(self, model: torch.nn.Module, step: Step, *, layers_op: bool = False) -> None:
        self.layers_op = layers_op
        """Whether the step runs its layers as the kernels' one op where a batch allows
        (:mod:`active_rag.decoding.kernel_layers`); ``False`` runs the Python loop (``active-rag doctor`` compares
        the two)."""
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


def _projection(linear: torch.nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """A projection's decode forward: a packed layer's bound op (:meth:`~active_rag.models.quantized.PackedLinear.
    decode_function`), any other module's own ``forward``."""
    decode = getattr(linear, "decode_function", None)
    return decode() if callable(decode) else linear.forward


class _Layer:
    """A decoder layer's modules and constants, read once when the step is built instead of through
    ``nn.Module.__getattr__`` at every step."""

    def __init__(self, layer: Any) -> None:
        attn, mlp = layer.self_attn, layer.mlp
        self.attn, self.index, self.head_dim, self.scaling = attn, attn.layer_idx, attn.head_dim, attn.scaling
        self.extra = {"sliding_window": attn.sliding_window} if hasattr(attn, "sliding_window") else {}
        self.full = self.extra.get("sliding_window") is None  # attends over every cached position
        # the projections that read one input share a kernel call where they can (the same bits)
        self.qkv = fuse_projections([attn.q_proj, attn.k_proj, attn.v_proj])
        self.gate_up = fuse_projections([mlp.gate_proj, mlp.up_proj])
        self.o, self.down, self.act = _projection(attn.o_proj), _projection(mlp.down_proj), mlp.act_fn
        self.input_norm = step_norms.norm(layer.input_layernorm)
        self.post_norm = step_norms.norm(layer.post_attention_layernorm)
        self.input_add_norm = step_norms.add_norm(layer.input_layernorm)
        self.post_add_norm = step_norms.add_norm(layer.post_attention_layernorm)


class _Rotary:
    """The family's ``apply_rotary_pos_emb`` for one step: ``q * cos + rotate_half(q) * sin`` with ``cos`` and
    ``sin`` unsqueezed once a step, not once a layer, and ``rotate_half(q) * sin`` computed as ``roll(q) *
    sin_signed`` (``rotate_half(q) = cat(-q2, q1) = roll(q)`` with the first half negated, and ``-a * b = a * -b``
    exactly): four ops a tensor instead of eight, the same bits. Used only when a check on the model's own
    ``cos``/``sin`` shapes gives the family function's bits (:func:`_rotary`)."""

    @staticmethod
    def prepare(cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        half = sin.shape[-1] // 2
        return cos, torch.cat((-sin[..., :half], sin[..., half:]), dim=-1), half

    def __call__(self, query: torch.Tensor, key: torch.Tensor,
                 rotation: tuple[torch.Tensor, torch.Tensor, int]) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin_signed, half = rotation
        return (query * cos + query.roll(half, -1) * sin_signed, key * cos + key.roll(half, -1) * sin_signed)


class _FamilyRotary:
    """The family's ``apply_rotary_pos_emb`` itself, once a layer (where :class:`_Rotary`'s check fails)."""

    def __init__(self, family_function: Callable[..., tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.family_function = family_function

    @staticmethod
    def prepare(cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return cos, sin

    def __call__(self, query: torch.Tensor, key: torch.Tensor,
                 rotation: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return self.family_function(query, key, *rotation)


def _rotary(family_function: Callable[..., tuple[torch.Tensor, torch.Tensor]],
            model: torch.nn.Module) -> _Rotary | _FamilyRotary:
    """:class:`_Rotary` when it gives ``family_function``'s bits on random queries and keys rotated by the model's
    own rotary embedding at a few positions (a family whose rotation differs, partial or interleaved, would not),
    else :class:`_FamilyRotary`."""
    inner, config = model.model, model.config  # type: ignore[attr-defined]
    attn = inner.layers[0].self_attn
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    try:
        device, dtype = next(model.parameters()).device, torch.float32
        generator = torch.Generator(device="cpu").manual_seed(0)
        query = torch.randn(2, heads, 1, attn.head_dim, generator=generator).to(device, dtype)
        key = torch.randn(2, kv_heads, 1, attn.head_dim, generator=generator).to(device, dtype)
        positions = torch.tensor([[3], [517]], device=device)
        hidden = torch.zeros(2, 1, config.hidden_size, device=device, dtype=dtype)
        cos, sin = inner.rotary_emb(hidden, positions)
        fast = _Rotary()
        mine = fast(query, key, fast.prepare(cos, sin))
        theirs = family_function(query, key, cos, sin)
    except Exception:  # noqa: BLE001 - any shape the check does not know: the family's function
        return _FamilyRotary(family_function)
    if all(torch.equal(a, b) for a, b in zip(mine, theirs)):
        return fast
    return _FamilyRotary(family_function)


HeadsRope = Callable[[torch.Tensor, torch.Tensor, Any], tuple[torch.Tensor, torch.Tensor]]
"""``(q, k, rotation) -> (query, key)``: a layer's query and key projections ``[batch, 1, heads * head_dim]`` as
rotated heads ``[batch, heads, 1, head_dim]``."""


def _kernel_rope(rope: _Rotary | _FamilyRotary, model: torch.nn.Module) -> HeadsRope | None:
    """The kernels' ``rope_heads`` op (``csrc/rope.cpp``: the projections' views, transposes and :class:`_Rotary`'s
    four ops a tensor in one op) where :class:`_Rotary` is the step's rotation, active-rag's kernels decode and a check
    on the model's own rotary embedding (batch 1 and 3, positions up to 4,000, views of a wider output as the fused
    projections give) gives :class:`_Rotary`'s bits; else ``None``."""
    from .. import kernels

    if not isinstance(rope, _Rotary) or not kernels.available():
        return None
    inner, config = model.model, model.config  # type: ignore[attr-defined]
    attn = inner.layers[0].self_attn
    dim, heads = attn.head_dim, config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    op = torch.ops.active_rag.rope_heads.default

    def heads_rope(q: torch.Tensor, k: torch.Tensor, rotation: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return op(q, k, rotation[0], rotation[1], dim)

    try:
        device = next(model.parameters()).device
        generator = torch.Generator(device="cpu").manual_seed(1)
        for rows, positions in ((1, [[7]]), (3, [[0], [511], [3999]])):
            wide = torch.randn(rows, 1, (heads + 3 * kv_heads) * dim, generator=generator).to(device) * 4
            q, k = wide[..., : heads * dim], wide[..., heads * dim : (heads + kv_heads) * dim]
            ids = torch.tensor(positions, device=device)
            rotation = rope.prepare(*inner.rotary_emb(torch.zeros(rows, 1, config.hidden_size, device=device), ids))
            theirs = rope(q.view(rows, 1, -1, dim).transpose(1, 2), k.view(rows, 1, -1, dim).transpose(1, 2), rotation)
            if not all(torch.equal(a, b) for a, b in zip(heads_rope(q, k, rotation), theirs)):
                return None
    except Exception:  # noqa: BLE001 - a rotation, dtype or device the op does not take: the step's own ops
        return None
    return heads_rope


def decode_step_choice() -> str:
    """:data:`DECODE_STEP_VARIABLE` as set now, stripped and lower-cased (``""`` when unset)."""
    return os.environ.get(DECODE_STEP_VARIABLE, "").strip().lower()


def lean_step(model: torch.nn.Module) -> LeanStep | None:
    """The decode step of ``model`` without transformers' per-call machinery, or ``None`` where it does not
    apply (see the module docstring)."""
    if decode_step_choice() in ("transformers", "off", "0", "false", "no"):
        return None
    if _unsupported(model) is not None:
        return None
    family = sys.modules[type(model).__module__]
    apply_rotary_pos_emb, eager = family.apply_rotary_pos_emb, family.eager_attention_forward
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    inner = model.model  # type: ignore[attr-defined]
    final_norm, rotary, embed, head = inner.norm, inner.rotary_emb, inner.embed_tokens, model.lm_head  # type: ignore[attr-defined]
    rope = _rotary(apply_rotary_pos_emb, model)
    heads_rope = _kernel_rope(rope, model)
    layers = [_Layer(layer) for layer in inner.layers]
    final_add_norm = step_norms.add_norm(final_norm)
    # the layers as calls of the kernels' op where all of a layer's parts are theirs (the same bits)
    kernel_loop = kernel_layers(model) if heads_rope is not None else None
    # the norm that follows each layer's MLP: the next layer's input norm, after the last layer the final norm
    next_add_norms = [layer.input_add_norm for layer in layers[1:]] + [final_add_norm]

    def attention(layer: _Layer, hidden: torch.Tensor, rotation: Any, cache: Any,
                  position_ids: torch.Tensor) -> torch.Tensor:
        """``Qwen2Attention.forward`` / ``LlamaAttention.forward`` for a decode step."""
        attn = layer.attn
        hidden_shape = (*hidden.shape[:-1], -1, layer.head_dim)
        q, k, v = layer.qkv(hidden)
        value = v.view(hidden_shape).transpose(1, 2)
        if heads_rope is not None and q.dtype == torch.float32 and q.device.type == "cpu":
            query, key = heads_rope(q, k, rotation)
        else:
            query, key = rope(q.view(hidden_shape).transpose(1, 2), k.view(hidden_shape).transpose(1, 2), rotation)
        kwargs: dict[str, Any] = {"position_ids": position_ids, "use_cache": True}
        key, value = cache.update(key, value, layer.index, kwargs=kwargs)
        implementation = attn.config._attn_implementation
        out = (kernel_step_attention(attn, query, layer.scaling)
               if implementation == IMPLEMENTATION and layer.full else None)
        if out is None:
            function = ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager)
            out, _ = function(attn, query, key, value, None, dropout=0.0, scaling=layer.scaling, **layer.extra, **kwargs)
        return layer.o(out.reshape(*hidden.shape[:-1], -1).contiguous())

    def loop(start: int, stop: int, hidden: torch.Tensor, x: torch.Tensor, rotation: Any, cache: Any,
             position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Layers ``[start, stop)`` as Python: the residual stream and the next layer's normed input after them."""
        for layer, next_add_norm in zip(layers[start:stop], next_add_norms[start:stop]):
            hidden, x = layer.post_add_norm(hidden, attention(layer, x, rotation, cache, position_ids))
            gate, up = layer.gate_up(x)
            hidden, x = next_add_norm(hidden, layer.down(layer.act(gate) * up))
        return hidden, x

    def step(input_ids: torch.Tensor, position_ids: torch.Tensor, cache: Any) -> torch.Tensor:
        hidden = embed(input_ids)
        rotation = rope.prepare(*rotary(hidden, position_ids))
        x = layers[0].input_norm(hidden)  # on the embeddings: no residual to add yet
        done = 0
        if kernel_loop is not None and lean.layers_op:  # the kernels' op for the layers it can run this step
            batch = getattr(cache, "batch", None)
            for start, stop in kernel_loop.ranges(hidden, batch):
                hidden, x = loop(done, start, hidden, x, rotation, cache, position_ids)
                out = kernel_loop.run(hidden, x, rotation, batch, start, stop)
                hidden, x = loop(start, stop, hidden, x, rotation, cache, position_ids) if out is None else out
                done = stop
        hidden, x = loop(done, len(layers), hidden, x, rotation, cache, position_ids)
        return head.forward(x[:, -1:, :])[:, -1]

    lean = LeanStep(model, step, layers_op=kernel_loop is not None)
    return lean
