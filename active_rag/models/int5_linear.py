"""A weight-only linear layer in 5 bits, for the tensors a GGUF file stores in 5 (beyond the papers).

A Q4_K_M file keeps the tensors whose width is not a multiple of Q4_K's 256 in 5 bits (Q5_0: blocks of 32 weights,
``w = d * (q - 16)``, ``q`` in [0, 31]): on qwen2.5-coder-0.5B, whose width is 896, that is every attention and
gate/up projection. ``weights="mixed"`` used to store them in int8, one byte a weight; :class:`Int5Linear` keeps their
grid (:func:`~active_rag.models.quantized.grid_quantize` with 32 levels: no new rounding of the codes, the step
rounded to bfloat16 as int4's is) in the decode kernel's 5-bit layout (:func:`active_rag.kernels.layout.pack_int5`:
the int4 layout's nibbles and a bit plane, 0.625 bytes a weight and the group's constants), which the kernel reads as
int4 with a fifth bit (``csrc/simd.cpp``). Only active-rag's kernel decodes it: torch has no 5-bit kernel, so where
that kernel is not in use the same tensors are int8 as before (:func:`active_rag.models.weights.quantize_linear`).
"""

from __future__ import annotations

import torch
from torch import nn

from .. import kernels
from .quantized import INT4_GROUP, PackedLinear, _aligned, _rounded, _scratch, _shape, grid_quantize

__all__ = ["Int5Linear"]


class Int5Linear(PackedLinear):
    """``y = x W^T + b`` with ``W`` in 5 bits per weight in groups of :data:`~active_rag.models.quantized.INT4_GROUP`
    inputs, ``w = (q - 16) * step + zero`` (``zero = low + 16 * step``, the step rounded to bfloat16).

    Built from :func:`~active_rag.models.quantized.grid_quantize`'s codes (``bits=5``) or from the kernel's layout
    (:meth:`state`); needs active-rag's decode kernel (:func:`active_rag.kernels.available`)."""

    kind = "int5"
    _scales_buffer = "tile_scales"

    def __init__(self, codes: torch.Tensor | None = None, low: torch.Tensor | None = None, step: torch.Tensor | None = None,
                 bias: torch.Tensor | None = None, *, tiles: torch.Tensor | None = None,
                 scales: torch.Tensor | None = None, shape: tuple[int, int] | None = None) -> None:
        if codes is not None:
            shape = (codes.shape[0], codes.shape[1])
        if shape is None or (codes is None and (tiles is None or scales is None)) or (codes is not None and (low is None or step is None)):
            raise ValueError("Int5Linear needs codes, low and step, or tiles, scales and shape")
        if not kernels.available():
            raise RuntimeError("Int5Linear decodes only with active-rag's kernel, which is not in use here "
                               f"({kernels.describe()}); quantize_linear stores these layers in int8 instead.")
        out_features, in_features = shape
        super().__init__(in_features, out_features, bias)
        self.uses_kernel = True
        self.isa = kernels.default_isa()
        if codes is not None:
            assert low is not None and step is not None
            step = step.float()
            tiles, scales = kernels.pack_int5(codes, step, _rounded(low.float() + 16.0 * step))
        assert tiles is not None and scales is not None
        self.register_buffer("tiles", _aligned(tiles))
        self.register_buffer("tile_scales", _aligned(scales))

    @staticmethod
    def supports(linear: nn.Linear) -> bool:
        return linear.in_features % INT4_GROUP == 0 and linear.out_features % 16 == 0

    @staticmethod
    def quantize(weight: torch.Tensor) -> dict[str, torch.Tensor]:
        return grid_quantize(weight, 5, INT4_GROUP)

    @classmethod
    def from_state(cls, state: dict[str, torch.Tensor], bias: torch.Tensor | None = None) -> Int5Linear:
        """From :func:`~active_rag.models.quantized.grid_quantize`'s codes or :meth:`state`'s layout."""
        if "codes" in state:
            return cls(state["codes"], state["low"], state["step"], bias)
        out_features, in_features = (int(v) for v in state["shape"])
        return cls(bias=bias, tiles=state["tiles5"], scales=state["scales5"], shape=(out_features, in_features))

    def _kernel(self, rows: torch.Tensor) -> torch.Tensor:
        return kernels.int5_gemm(rows, self.tiles, self.tile_scales, self.out_features, self.isa)

    def _linear(self, rows: torch.Tensor) -> torch.Tensor:
        return kernels.int5_linear(rows, self.tiles, self.tile_scales, self.out_features, self.bias, self.isa)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The weight the kernel multiplies by, with its rounded constants."""
        return kernels.int5_dequant(self.tiles, self.tile_scales, torch.empty(self.out_features, self.in_features)).to(dtype)

    def _dense_weight(self, dtype: torch.dtype) -> torch.Tensor:
        numel = self.out_features * self.in_features
        return kernels.int5_dequant(self.tiles, self.tile_scales, _scratch(numel, dtype).view(self.out_features, self.in_features))

    def state(self) -> dict[str, torch.Tensor]:
        return {"tiles5": self.tiles, "scales5": self.tile_scales, "shape": _shape(self.out_features, self.in_features)}

    @property
    def weight_bytes(self) -> int:
        return self.tiles.numel() + 2 * self.tile_scales.numel()
