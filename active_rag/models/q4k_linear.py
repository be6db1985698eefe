"""int4 layers that keep a GGUF's Q4_K scales as the file stores them (beyond the papers).

A Q4_K tensor (llama.cpp's ``k``-quants) stores per 256 weights two float16 constants ``d`` and ``dmin`` and per 32
weights a 6-bit scale ``sc`` and a 6-bit min ``m``: ``w = d * sc * q - dmin * m`` with ``q`` in [0, 15], 4.5 bits a
weight. ``weights="mixed"`` kept those layers exact in :class:`~active_rag.models.quantized.Int4Linear`'s layout, a
bfloat16 step and zero per 32 weights: 5 bits a weight, and the step rounded to bfloat16. :class:`Int4KLinear` keeps
the file's own integers and constants (:func:`active_rag.kernels.layout.pack_int4k`: 4.625 bits a weight), read from
the GGUF the model was converted from (:class:`~active_rag.models.gguf_layers.GGUFLayers`) and checked bit for bit
against the converted weight; the kernel computes each group's step and zero from them (``csrc/kernels.h``,
``k_step_zero``). On qwen2.5-coder-1.5b the int4 layers read 643 MB a decode step instead of 695. Only active-rag's
kernel decodes it, as with 5-bit layers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .. import kernels
from ..kernels.layout import GROUP, SUPER
from .file_layout_linear import FileLayoutLinear

__all__ = ["Int4KLinear", "Q4KBlocks", "q4k_blocks"]

BLOCK_BYTES = 144
"""Bytes of one Q4_K block of 256 weights: d, dmin (float16), 12 bytes of packed 6-bit scales and mins, 128 of
nibbles."""


@dataclass(frozen=True)
class Q4KBlocks:
    """A Q4_K tensor's values: ``codes`` uint8 ``[out, in]``, ``sc`` and ``m`` uint8 ``[out, in / 32]``, ``d`` and
    ``dmin`` float16 ``[out, in / 256]``."""

    codes: torch.Tensor
    sc: torch.Tensor
    m: torch.Tensor
    d: torch.Tensor
    dmin: torch.Tensor

    def weight(self) -> torch.Tensor:
        """The float32 weight, computed as gguf-py's dequantisation computes it (``(d * sc) * q - dmin * m``, each
        step in float32), which is what a converted model holds."""
        out_features, in_features = self.codes.shape
        step = self.d.float().repeat_interleave(SUPER // GROUP, dim=1) * self.sc.float()
        low = self.dmin.float().repeat_interleave(SUPER // GROUP, dim=1) * self.m.float()
        q = self.codes.float().view(out_features, -1, GROUP)
        return (step[..., None] * q - low[..., None]).view(out_features, in_features)

    def rows(self, order: torch.Tensor) -> Q4KBlocks:
        return Q4KBlocks(self.codes[order], self.sc[order], self.m[order], self.d[order], self.dmin[order])


def q4k_blocks(data: np.ndarray) -> Q4KBlocks:
    """A GGUF Q4_K tensor's bytes (uint8 ``[out, in / 256 * 144]``, as ``gguf.GGUFReader`` gives them) unpacked."""
    from gguf.quants import Q4_K

    rows = data.shape[0]
    blocks = np.ascontiguousarray(data).reshape(-1, BLOCK_BYTES)
    d = blocks[:, 0:2].copy().view(np.float16).reshape(rows, -1)
    dmin = blocks[:, 2:4].copy().view(np.float16).reshape(rows, -1)
    sc, m = Q4_K.get_scale_min(blocks[:, 4:16].copy())
    qs = blocks[:, 16:].reshape(-1, 4, 1, 32)  # chunk i: group 2i in its low nibbles, group 2i + 1 in its high ones
    codes = ((qs >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)) & 0x0F).reshape(rows, -1)
    return Q4KBlocks(torch.from_numpy(np.ascontiguousarray(codes)), torch.from_numpy(sc.reshape(rows, -1).copy()),
                     torch.from_numpy(m.reshape(rows, -1).copy()), torch.from_numpy(d.copy()),
                     torch.from_numpy(dmin.copy()))


class Int4KLinear(FileLayoutLinear):
    """``y = x W^T + b`` with ``W`` a Q4_K tensor's values: ``w = d * sc * q - dmin * m``
    (:func:`~active_rag.kernels.layout.pack_int4k`). Needs active-rag's decode kernel
    (:func:`active_rag.kernels.available`)."""

    kind = "int4k"
    _op = "int4"
    _state_names = ("tiles4k", "scales4k")
    _instead = "Int4Linear"

    @classmethod
    def from_blocks(cls, blocks: Q4KBlocks, bias: torch.Tensor | None = None) -> Int4KLinear:
        tiles, scales = kernels.pack_int4k(blocks.codes, blocks.sc, blocks.m, blocks.d, blocks.dmin)
        out_features, in_features = blocks.codes.shape
        return cls(tiles=tiles, scales=scales, shape=(out_features, in_features), bias=bias)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The weight the kernel multiplies by, ``(q - 8) * step + zero`` from its step and zero (within a rounding of
        the Q4_K tensor's own values)."""
        return super().dequantize(dtype)
