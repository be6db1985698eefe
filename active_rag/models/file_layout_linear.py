"""The common part of the layers that keep a GGUF tensor's own values in active-rag's kernel layout
(:class:`~active_rag.models.q4k_linear.Int4KLinear`, :class:`~active_rag.models.q6k_linear.Int6KLinear`).

A subclass names its kernel ops (``_op``: ``"int4"`` or ``"int6"``, :mod:`active_rag.kernels`' ``*_gemm``,
``*_linear`` and ``*_dequant``) and its state keys (``_state_names``); built from the kernel layout's tiles and scales,
it decodes only with active-rag's kernel.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from .. import kernels
from .quantized import PackedLinear, _aligned, _scratch, _shape

__all__ = ["FileLayoutLinear"]


class FileLayoutLinear(PackedLinear):
    """``y = x W^T + b`` with ``W`` in a GGUF tensor's own integers and constants, as ``tiles`` and ``scales`` of
    active-rag's kernel layout; ``shape`` is ``(out_features, in_features)``."""

    _scales_buffer = "tile_scales"
    _op: ClassVar[str] = ""
    _state_names: ClassVar[tuple[str, str]] = ("", "")
    _instead: ClassVar[str] = ""
    """What :func:`~active_rag.models.weights.quantize_model` stores such a layer in where the kernel is not in use."""

    def __init__(self, *, tiles: torch.Tensor, scales: torch.Tensor, shape: tuple[int, int],
                 bias: torch.Tensor | None = None) -> None:
        if not kernels.available():
            raise RuntimeError(f"{type(self).__name__} decodes only with active-rag's kernel, which is not in use here "
                               f"({kernels.describe()}); quantize_model stores these layers in {self._instead} instead.")
        out_features, in_features = shape
        super().__init__(in_features, out_features, bias)
        self.uses_kernel = True
        self.isa = kernels.default_isa()
        self.register_buffer("tiles", _aligned(tiles))
        self.register_buffer("tile_scales", _aligned(scales))

    @classmethod
    def from_state(cls, state: dict[str, torch.Tensor], bias: torch.Tensor | None = None) -> FileLayoutLinear:
        out_features, in_features = (int(v) for v in state["shape"])
        tiles, scales = cls._state_names
        return cls(tiles=state[tiles], scales=state[scales], shape=(out_features, in_features), bias=bias)

    def _kernel(self, rows: torch.Tensor) -> torch.Tensor:
        return getattr(kernels, f"{self._op}_gemm")(rows, self.tiles, self.tile_scales, self.out_features, self.isa)

    def _linear(self, rows: torch.Tensor) -> torch.Tensor:
        return getattr(kernels, f"{self._op}_linear")(rows, self.tiles, self.tile_scales, self.out_features, self.bias,
                                                      self.isa)

    def _dequantized(self, out: torch.Tensor) -> torch.Tensor:
        return getattr(kernels, f"{self._op}_dequant")(self.tiles, self.tile_scales, out)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The weight the kernel multiplies by (see the subclass)."""
        return self._dequantized(torch.empty(self.out_features, self.in_features)).to(dtype)

    def _dense_weight(self, dtype: torch.dtype) -> torch.Tensor:
        numel = self.out_features * self.in_features
        return self._dequantized(_scratch(numel, dtype).view(self.out_features, self.in_features))

    def state(self) -> dict[str, torch.Tensor]:
        tiles, scales = self._state_names
        return {tiles: self.tiles, scales: self.tile_scales, "shape": _shape(self.out_features, self.in_features)}

    @property
    def weight_bytes(self) -> int:
        return self.tiles.numel() + self.tile_scales.numel()
