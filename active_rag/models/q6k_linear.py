"""Layers that keep a GGUF's Q6_K tensors in 6 bits as the file stores them (beyond the papers).

A Q6_K tensor stores per 256 weights a float16 ``d`` and per 16 weights a signed 8-bit scale ``sc``:
``w = d * sc * (q - 32)`` with ``q`` in [0, 63], 6.5625 bits a weight. A Q4_K_M file keeps its output head and about
half of its value and down projections so (on qwen2.5-coder-1.5b 432 MB of the 1,127 a decode step read), and
``weights="mixed"`` stored them in int8 with a float32 scale per output: 8 bits a weight, requantised.
:class:`Int6KLinear` keeps the file's codes, scales and constants (:func:`active_rag.kernels.layout.pack_int6k`), read
from the GGUF the model was converted from (:class:`~active_rag.models.gguf_layers.GGUFLayers`) and checked bit for
bit against the converted weight; the kernel (``csrc/int6.cpp``) multiplies them with the int8 activations as the
int4 path does, a group's two halves of 16 inputs apart. Only active-rag's kernel decodes it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .. import kernels
from .file_layout_linear import FileLayoutLinear

__all__ = ["Int6KLinear", "Q6KBlocks", "q6k_blocks"]

BLOCK_BYTES = 210
"""Bytes of one Q6_K block of 256 weights: 128 of low nibbles, 64 of high bit pairs, 16 signed scales, a float16 d."""

SUB = 16
"""Weights per Q6_K scale."""


@dataclass(frozen=True)
class Q6KBlocks:
    """A Q6_K tensor's values: ``codes`` uint8 ``[out, in]`` in [0, 63], ``sc`` int8 ``[out, in / 16]``, ``d``
    float16 ``[out, in / 256]``."""

    codes: torch.Tensor
    sc: torch.Tensor
    d: torch.Tensor

    def weight(self) -> torch.Tensor:
        """The float32 weight as gguf-py's dequantisation computes it (``(d * sc) * (q - 32)`` in float32), which is
        what a converted model holds."""
        out_features, in_features = self.codes.shape
        step = self.d.float().repeat_interleave(256 // SUB, dim=1) * self.sc.float()
        q = self.codes.float().view(out_features, -1, SUB) - 32
        return (step[..., None] * q).view(out_features, in_features)

    def rows(self, order: torch.Tensor) -> Q6KBlocks:
        return Q6KBlocks(self.codes[order], self.sc[order], self.d[order])


def q6k_blocks(data: np.ndarray) -> Q6KBlocks:
    """A GGUF Q6_K tensor's bytes (uint8 ``[out, in / 256 * 210]``) unpacked, in gguf-py's order of the weights."""
    rows = data.shape[0]
    blocks = np.ascontiguousarray(data).reshape(-1, BLOCK_BYTES)
    n = blocks.shape[0]
    ql = blocks[:, :128].reshape(n, -1, 1, 64) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    ql = (ql & 0x0F).reshape(n, -1, 32)
    qh = blocks[:, 128:192].reshape(n, -1, 1, 32) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
    qh = (qh & 0x03).reshape(n, -1, 32)
    codes = (ql | (qh << 4)).reshape(rows, -1)
    sc = blocks[:, 192:208].copy().view(np.int8).reshape(rows, -1)
    d = blocks[:, 208:210].copy().view(np.float16).reshape(rows, -1)
    return Q6KBlocks(torch.from_numpy(np.ascontiguousarray(codes)), torch.from_numpy(sc.copy()), torch.from_numpy(d.copy()))


class Int6KLinear(FileLayoutLinear):
    """``y = x W^T + b`` with ``W`` a Q6_K tensor's values, ``w = d * sc * (q - 32)``
    (:func:`~active_rag.kernels.layout.pack_int6k`). Needs active-rag's decode kernel
    (:func:`active_rag.kernels.available`)."""

    kind = "int6k"
    _op = "int6"
    _state_names = ("tiles6k", "scales6k")
    _instead = "int8"

    @classmethod
    def from_blocks(cls, blocks: Q6KBlocks, bias: torch.Tensor | None = None) -> Int6KLinear:
        tiles, scales = kernels.pack_int6k(blocks.codes, blocks.sc, blocks.d)
        out_features, in_features = blocks.codes.shape
        return cls(tiles=tiles, scales=scales, shape=(out_features, in_features), bias=bias)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The weight the kernel multiplies by, ``(q - 32) * step``: the Q6_K tensor's values."""
        return super().dequantize(dtype)
