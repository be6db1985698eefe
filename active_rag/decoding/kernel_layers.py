"""Every decoder layer of a CPU decode step in one call of the kernels' ``decode_layers`` op (beyond the papers).

:mod:`active_rag.decoding.lean_step` runs a step's layers as a Python loop over ops: per layer the packed projections'
calls, the heads' rotation, each sequence's cache update and attention, two residual adds with their norms and the
MLP's activation, about 75 op calls and the Python between them. Measured on a 2-core EPYC (qwen2.5-coder-0.5b
``mixed``, batch 1), the same ops replayed in a bare loop took 3-5 ms a step less than the engine's step.

Where every part of a layer is one the kernels' library runs (``csrc/layers.cpp``), :class:`KernelLayers` hands
the whole loop to its ``decode_layers`` op: the same functions, in the same order, on tensors of the same shapes,
so the step's logits are the lean step's to the bit (``tests/unit_tests/test_kernel_layers.py``). It is built with
the lean step (:func:`kernel_layers`) only where:

- active-rag's kernels are built and decode (``ACTIVE_RAG_DECODE_KERNEL`` is not ``torch``) and the one-token
  attention runs as their op (:func:`~active_rag.decoding.one_token_attention.kernel_attends`);
- the heads' rotation is the kernels' ``rope_heads`` and every norm the kernels' ``add_rms_norm`` (the lean step's
  checks of their bits passed);
- every projection is a packed layer that uses the kernels, the MLP's activation is SiLU, and every layer attends
  over every position with the model's sdpa.

A step uses it (:meth:`KernelLayers.run`) when, in addition, the batch is at most the packed layers' row limit, the
hidden state is float32, the layers and norms still hold the tensors the plan was built from (a ``model.to(...)``
replaces them) and each sequence's cache layers are :class:`~active_rag.decoding.kv_layer.GrowingLayer` buffers, which make room for the new position first
(:meth:`~active_rag.decoding.kv_layer.GrowingLayer.step_slot`). Otherwise the step runs the lean step's loop, as
before. Where a sequence wants the captured layer's attention row (DRAGIN's), that layer runs in the loop and the
layers before and after it as two calls of the op. ``ACTIVE_RAG_DECODE_LAYERS=python`` turns it off for steps built
afterwards.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from .. import kernels
from ..models.fused_projections import FusedRun, _joins
from ..models.quantized import PackedLinear
from . import one_token_attention as one_token
from .attention import IMPLEMENTATION
from .kv_layer import GrowingLayer
from .step_norms import kernel_norm_parts

__all__ = ["DECODE_LAYERS_VARIABLE", "KernelLayers", "kernel_layers"]

DECODE_LAYERS_VARIABLE = "ACTIVE_RAG_DECODE_LAYERS"
"""Environment variable: ``python`` makes lean steps built afterwards run their layers as the Python loop."""

KIND_CODES = {"int4": 4, "int4k": 4, "int5": 5, "int6k": 6, "int8": 8}  # int4k: int4 with Q4_K scales (uint8)
"""A packed layer's kind -> the code ``decode_layers`` reads."""


class _Plan:
    """The lists ``decode_layers`` reads for one layer (``csrc/layers.cpp``'s header comment), and what a step
    checks."""

    def __init__(self) -> None:
        self.tensors: list[torch.Tensor] = []
        self.ints: list[int] = []
        self.reals: list[float] = []
        self.held: list[tuple[dict[str, Any], str, torch.Tensor | None]] = []  # (table, key, tensor it must hold)
        self.counters: list[list[int]] = []  # each packed layer's call counts (PackedLinear._calls)

    def norm(self, module: nn.Module) -> tuple[int, float] | None:
        parts = kernel_norm_parts(module)
        if parts is None:
            return None
        weight, eps, lanes = parts
        self.held.append((module._parameters, "weight", weight))
        return lanes, eps

    def group(self, modules: Sequence[nn.Module]) -> bool:
        """Add the packed layers that read one input (as the lean step groups them), or say they cannot be."""
        runs: list[list[PackedLinear]] = []
        for module in modules:
            if not (isinstance(module, PackedLinear) and module.uses_kernel and module.kind in KIND_CODES):
                return False
            if runs and _joins(runs[-1][-1], module):
                runs[-1].append(module)
            else:
                runs.append([module])
        self.ints.append(len(runs))
        for run in runs:
            first = run[0]
            if len(run) > 1:
                fused = getattr(first, "_active_rag_fused_run", None)
                if not (isinstance(fused, FusedRun) and fused.layers == tuple(run) and fused.current()):
                    return False
                tiles, scales, bias, n = fused.tiles, fused.scales, fused.bias, fused.out_features
                for layer in run:  # the views FusedRun gave the layers: still held, or the plan is stale
                    self.held += [(layer._buffers, "tiles", layer._buffers["tiles"]),
                                  (layer._buffers, fused.scales_name, layer._buffers[fused.scales_name])]
            else:
                tiles, scales, n = first._buffers["tiles"], first._buffers[first._scales_buffer], first.out_features
                bias = first._parameters.get("bias")
                self.held += [(first._buffers, "tiles", tiles), (first._buffers, first._scales_buffer, scales)]
            for layer in run:
                self.held.append((layer._parameters, "bias", layer._parameters.get("bias")))
                self.counters.append(layer._calls)
            if tiles is None or scales is None:
                return False
            self.ints += [KIND_CODES[first.kind], n, kernels.linear_op(first.kind, first.isa)[1], int(bias is not None),
                          len(run), *(layer.out_features for layer in run)]
            self.tensors += [tiles, scales] + ([bias.detach()] if bias is not None else [])
        return True


def _silu(act: Any) -> bool:
    from transformers.activations import SiLUActivation

    return type(act) in (SiLUActivation, nn.SiLU)


def kernel_layers(model: nn.Module) -> KernelLayers | None:
    """:class:`KernelLayers` for ``model`` (a family the lean step knows), or ``None`` where it does not apply
    (module docstring). Called by :func:`~active_rag.decoding.lean_step.lean_step` after its own layers are built
    (their fused projections and checks are the ones this reads)."""
    if os.environ.get(DECODE_LAYERS_VARIABLE, "").strip().lower() in ("python", "off", "0", "false", "no"):
        return None
    if not kernels.available() or not one_token.kernel_attends() or not hasattr(torch.ops.active_rag, "decode_layers"):
        return None
    inner = model.model  # type: ignore[attr-defined]
    layers = list(inner.layers)
    norms = [layer.input_layernorm for layer in layers[1:]] + [inner.norm]
    plans = []
    for layer, next_norm in zip(layers, norms, strict=True):
        plan = _Plan()
        plans.append(plan)
        attn, mlp = layer.self_attn, layer.mlp
        config = attn.config
        if (getattr(attn, "_active_rag_inner", None) != "sdpa" or type(attn).__name__ not in one_token.FAMILIES
                or getattr(config, "_attn_implementation", None) != IMPLEMENTATION
                or getattr(attn, "sliding_window", None) is not None or not _silu(mlp.act_fn)):
            return None
        post, following = plan.norm(layer.post_attention_layernorm), plan.norm(next_norm)
        if post is None or following is None:
            return None
        heads = config.num_attention_heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        dim = attn.head_dim
        plan.ints += [heads, kv_heads, dim, post[0], following[0]]
        plan.reals += [dim**-0.5 if attn.scaling is None else float(attn.scaling), post[1], following[1]]
        plan.tensors += [layer.post_attention_layernorm.weight.detach(), next_norm.weight.detach()]
        for group in ([attn.q_proj, attn.k_proj, attn.v_proj], [attn.o_proj], [mlp.gate_proj, mlp.up_proj],
                      [mlp.down_proj]):
            if not plan.group(group):
                return None
    packed = [m for m in model.modules() if isinstance(m, PackedLinear)]
    return KernelLayers(plans, [layer.self_attn for layer in layers], packed)


class KernelLayers:
    """A model's decoder layers as ``decode_layers`` calls: one a step, or two around the captured layer when a
    sequence wants its attention row (module docstring)."""

    def __init__(self, plans: Sequence[_Plan], attention: Sequence[nn.Module], packed: Sequence[PackedLinear]) -> None:
        self._plans = list(plans)
        self._attention = list(attention)
        self._layers = len(attention)
        self._packed = list(packed)  # their row limits, read at each step as their own calls read them
        self._op = torch.ops.active_rag.decode_layers.default
        self._ranges: dict[tuple[int, int], tuple[list[torch.Tensor], list[int], list[float]]] = {}

    def _over_limit(self, rows: int) -> bool:
        """Whether a packed layer takes fewer rows than ``rows`` in its decode op (its ``packed_max_rows``)."""
        return any(m.packed_max_rows is not None and rows > m.packed_max_rows for m in self._packed)

    def _current(self) -> bool:
        return all(table.get(key) is tensor for plan in self._plans for table, key, tensor in plan.held)

    def _lists(self, start: int, stop: int) -> tuple[list[torch.Tensor], list[int], list[float]]:
        """The op's plan lists for layers ``[start, stop)`` (made once a range)."""
        lists = self._ranges.get((start, stop))
        if lists is None:
            plans = self._plans[start:stop]
            lists = self._ranges[(start, stop)] = ([t for p in plans for t in p.tensors],
                                                   [stop - start] + [i for p in plans for i in p.ints],
                                                   [r for p in plans for r in p.reals])
        return lists

    def ranges(self, hidden: torch.Tensor, batch: Any) -> list[tuple[int, int]]:
        """The ranges of layers this step runs as the op, in order: every layer; the layers before and after the
        captured one when a sequence wants its attention row; none where the step must run the lean step's loop
        (module docstring)."""
        rows = hidden.shape[0]
        if (batch is None or batch.mode == "padded" or hidden.dtype != torch.float32 or hidden.device.type != "cpu"
                or len(batch.caches) != rows or self._over_limit(rows) or not self._current()):
            return []
        if not any(batch.capture):
            return [(0, self._layers)]
        captured = [i for i, m in enumerate(self._attention) if getattr(m, "_active_rag_captured", False)]
        if not captured:
            return [(0, self._layers)]
        index = captured[0]
        return [r for r in ((0, index), (index + 1, self._layers)) if r[0] < r[1]]

    def _slots(self, caches: Sequence[Any], start: int,
               stop: int) -> tuple[list[torch.Tensor], list[torch.Tensor], list[int]] | None:
        """Layers ``[start, stop)``'s cache buffers and write positions for every sequence (layer-major), room made
        for the new position; ``None``, nothing changed, where a sequence's cache is not made of float32
        :class:`GrowingLayer` buffers holding keys."""
        cache_layers = []
        for cache in caches:
            held = getattr(cache, "layers", None)
            if held is None or len(held) != self._layers or any(type(layer) is not GrowingLayer for layer in held):
                return None
            if held[0].keys is None or held[0].keys.dtype != torch.float32:
                return None
            cache_layers.append(held)
        keys: list[torch.Tensor] = []
        values: list[torch.Tensor] = []
        lengths: list[int] = []
        slotted: list[GrowingLayer] = []
        for index in range(start, stop):
            for held in cache_layers:
                layer = held[index]
                slot = layer.step_slot()
                if slot is None:  # the layers given room so far go back to their length
                    for done, length in zip(slotted, lengths, strict=True):
                        done.keys, done.values = done.keys[:, :, :length], done.values[:, :, :length]
                    return None
                slotted.append(layer)
                keys.append(slot[0])
                values.append(slot[1])
                lengths.append(slot[2])
        return keys, values, lengths

    def run(self, hidden: torch.Tensor, x: torch.Tensor, rotation: Any, batch: Any, start: int = 0,
            stop: int | None = None) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``(hidden, x)`` after layers ``[start, stop)`` (all by default), ``x`` the next layer's normed input (after
        the last layer, the final norm's output), each sequence's new key and value written into its cache; ``hidden``
        and ``x`` are the first layer's. ``None``, nothing written, where a cache cannot take the op's writes
        (:meth:`_slots`); the caller checks the rest first (:meth:`ranges`)."""
        stop = self._layers if stop is None else stop
        slots = self._slots(batch.caches, start, stop)
        if slots is None:
            return None
        for plan in self._plans[start:stop]:
            for calls in plan.counters:
                calls[0] += 1
        return self._op(hidden, x, rotation[0], rotation[1], *self._lists(start, stop), *slots)
