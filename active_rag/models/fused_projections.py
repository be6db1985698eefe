"""Projections that read the same input, run as one call of active-rag's kernel in a decode step (beyond the papers).

A decoder layer's query, key and value projections read the same normed hidden state, and so do its MLP's gate and
up projections. In a decode step each packed projection is one call of the kernel's fused op
(:meth:`~active_rag.models.quantized.PackedLinear.decode_function`): the input quantised to int8, the kernels' thread
pool woken, the product, the output rounded and the bias added. For the small key and value projections (128 outputs
on qwen2.5-coder-0.5b, 256 on the 1.5B) that overhead is most of the call.

The kernel computes each tile of 16 outputs from its own weights and the shared quantised input, whatever the other
tiles are, so layers of one kind laid end to end (their tiles, scales and biases concatenated along the outputs) give
one call whose outputs are the separate calls' to the bit. :func:`fuse_projections` does that for consecutive layers
that can share a call (the same kind, instruction-set path, input width, row limit and presence of a bias; outputs a
multiple of 16) and leaves the others to their own call. The layers then read views of the concatenated tensors, so
the weights are held once and a prefill's dense path reads what it read before (the pages of the originals, which
are views of the weights' file mapping when read from the cache, are handed back: :func:`_page_out`). A call checks that the layers still
hold those views (a ``model.to(...)`` or ``bfloat16()`` replaces them) and otherwise runs each layer's own call.

Measured on qwen2.5-coder-0.5b and 1.5B ``mixed`` (2 threads, batch 1, one layer): query, key and value 25-29 us
against 67-72 us as three calls (0.5B) and 40-45 against 73-83 (1.5B); gate and up 166-167 against 178-197 (0.5B)
and 351-369 against 392-423 (1.5B). ``results/bench/fused-projections/`` has the step's.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import mmap
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import nn

from .. import kernels
from .quantized import PackedLinear, _aligned

__all__ = ["FusedRun", "fuse_projections"]

TILE = 16
"""Outputs per tile of the kernel's layout: a layer is laid after another only when its outputs fill whole tiles."""

Projections = Callable[[torch.Tensor], Sequence[torch.Tensor]]
"""``x -> (y_1, ..., y_n)``: each layer's output of ``x``, in the layers' order."""

_LOCK = threading.Lock()
"""Held while layers' tensors are concatenated and replaced by views (two schedulers built at once on one model)."""


MADV_PAGEOUT = 21
"""Linux's ``madvise`` advice (5.4 and later): reclaim these pages now; their bytes stay what they were."""


@functools.cache
def _madvise() -> Any:
    """libc's ``madvise`` on Linux, else ``None``."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        madvise = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes, madvise.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
    return madvise


def _page_out(tensors: Iterable[torch.Tensor]) -> int:
    """Ask Linux to reclaim the pages that lie wholly inside each CPU tensor's bytes (``madvise(MADV_PAGEOUT)``) and
    return the bytes asked for. A packed layer read from the weights' safetensors file is a view of that file's
    mapping, which the other layers keep mapped: once the layer reads a concatenated copy, the file's pages of the
    original would stay in the resident set beside it (measured on qwen2.5-coder-0.5b: 170 MB). Reclaiming never
    changes a tensor's bytes (a file's page is read again if touched; an anonymous page without swap stays), so it is
    safe for a tensor someone else still holds. Elsewhere than Linux, or on a kernel without the advice, nothing."""
    madvise = _madvise()
    if madvise is None:
        return 0
    page, asked = mmap.PAGESIZE, 0
    for tensor in tensors:
        if tensor.device.type != "cpu" or tensor.numel() == 0:
            continue
        start = tensor.data_ptr()
        first, end = -(-start // page) * page, (start + tensor.numel() * tensor.element_size()) // page * page
        if end > first and madvise(first, end - first, MADV_PAGEOUT) == 0:
            asked += end - first
    return asked


def _joins(a: nn.Module, b: nn.Module) -> bool:
    """Whether ``b`` can share ``a``'s kernel call."""
    return (isinstance(a, PackedLinear) and isinstance(b, PackedLinear) and a.uses_kernel and b.uses_kernel
            and a.kind == b.kind and a.isa == b.isa and a.in_features == b.in_features
            and a.packed_max_rows == b.packed_max_rows and (a.bias is None) == (b.bias is None)
            and (a.bias is None or (b.bias is not None and a.bias.dtype == b.bias.dtype))
            and a.out_features % TILE == 0 and b.out_features % TILE == 0)


class FusedRun:
    """Packed layers of one kind that read the same input, as one call of the kernel's op (:func:`fuse_projections`).

    Built once: the layers' ``tiles``, scales and biases are concatenated and each layer's buffers and bias are
    replaced by views of the result. ``run(x)`` gives each layer's output (views of the one output tensor) and counts
    a packed call on each layer, as their own calls would."""

    def __init__(self, layers: Sequence[PackedLinear]) -> None:
        first = layers[0]
        self.layers = tuple(layers)
        self.in_features, self.limit = first.in_features, first.packed_max_rows
        self.sizes = [layer.out_features for layer in layers]
        self.out_features = sum(self.sizes)
        self.op, self.code = kernels.linear_op(first.kind, first.isa)
        self.scales_name = first._scales_buffer
        originals = [layer._buffers[name] for layer in layers for name in ("tiles", self.scales_name)]
        tiles = _aligned(torch.cat([layer._buffers["tiles"] for layer in layers]))
        scales = _aligned(torch.cat([layer._buffers[self.scales_name] for layer in layers]))
        bias = None if first.bias is None else torch.cat([layer.bias.detach() for layer in layers])  # type: ignore[union-attr]
        self.tiles, self.scales, self.bias = tiles, scales, bias
        # (table, key, the tensor it must still hold) for each layer's tiles, scales and bias: read at every call
        self._checks: list[tuple[dict, str, torch.Tensor | None]] = []
        start = 0
        for layer, size in zip(layers, self.sizes, strict=True):
            end = start + size
            # tiles are [outputs / 16, ...]; int4/int5 scales [outputs / 16, ...], int8 scales [outputs]
            layer._buffers["tiles"] = tiles[start // TILE:end // TILE]
            layer._buffers[self.scales_name] = scales[start // TILE:end // TILE] if scales.dim() > 1 else scales[start:end]
            if bias is not None:
                layer._parameters["bias"] = nn.Parameter(bias[start:end], requires_grad=False)
            self._checks += [(layer._buffers, "tiles", layer._buffers["tiles"]),
                             (layer._buffers, self.scales_name, layer._buffers[self.scales_name]),
                             (layer._parameters, "bias", layer._parameters.get("bias"))]
            start = end
        _page_out(originals)  # the weights' file pages the layers no longer read
        self.alone = [layer.decode_function() for layer in layers]

    def current(self) -> bool:
        """Whether every layer still holds the views it was given (else its own call reads what it holds now)."""
        return all(table.get(key) is tensor for table, key, tensor in self._checks)

    def __call__(self, x: torch.Tensor) -> Sequence[torch.Tensor]:
        rows = x.numel() // self.in_features
        limit = self.limit
        if x.dtype != torch.float32 or rows == 0 or (limit is not None and rows > limit) or not self.current():
            return [decode(x) for decode in self.alone]
        for layer in self.layers:
            layer._calls[0] += 1
        out = self.op(x.reshape(rows, self.in_features), self.tiles, self.scales, self.out_features, self.bias, self.code)
        return out.view(*x.shape[:-1], self.out_features).split_with_sizes(self.sizes, dim=-1)


def _alone(layer: nn.Module) -> Projections:
    decode = getattr(layer, "decode_function", None)
    forward = decode() if callable(decode) else layer.forward
    return lambda x: (forward(x),)


def fuse_projections(layers: Sequence[nn.Module]) -> Projections:
    """``x -> (layers[0](x), layers[1](x), ...)`` for a decode step, with the consecutive layers that can share a
    kernel call (see the module docstring) run as one :class:`FusedRun`; any other layer runs its own decode call
    (a packed layer's :meth:`~active_rag.models.quantized.PackedLinear.decode_function`, else its ``forward``). A run
    built before for the same layers, whose views they still hold, is reused."""
    groups: list[list[nn.Module]] = []
    for layer in layers:
        if groups and _joins(groups[-1][-1], layer):
            groups[-1].append(layer)
        else:
            groups.append([layer])
    parts: list[Projections] = []
    with _LOCK:
        for group in groups:
            if len(group) == 1:
                parts.append(_alone(group[0]))
                continue
            run = getattr(group[0], "_active_rag_fused_run", None)
            if not (isinstance(run, FusedRun) and run.layers == tuple(group) and run.current()):
                run = FusedRun(group)  # type: ignore[arg-type]
                object.__setattr__(group[0], "_active_rag_fused_run", run)
            parts.append(run)
    if len(parts) == 1:
        return parts[0]
    return lambda x: [y for part in parts for y in part(x)]
