"""Weight-only int8 and int4 linear layers for decoding on the CPU.

Decoding one token on a CPU is memory-bound: every linear layer reads all its weights once per forward
pass, whatever the batch. Storing weights in 8 or 4 bits reads 4 or 8 times fewer bytes than float32.
torch ships packed weight-only kernels for this, vectorised for AVX2 and AVX-512 when the activations are
bfloat16 (:func:`torch.ops.aten._weight_int8pack_mm`, :func:`torch.ops.aten._weight_int4pack_mm_for_cpu`);
with float32 activations they fall back to a scalar loop, so the layers here round their input to
bfloat16 for the kernel and return the model's dtype.

- :class:`Int8Linear`: per-output-channel symmetric int8 (``w ~ q * s``, ``q`` in [-127, 127]).
- :class:`Int4Linear`: per-group affine int4 (groups of :data:`INT4_GROUP` inputs, ``w ~ low + step * q``,
  ``q`` in [0, 15]); a layer whose weights already lie on such a grid (read from a 4-bit GGUF tensor, e.g.
  Q4_K) keeps it exactly (:func:`grid_quantize`), so ``weights="mixed"`` stores those layers in 4 bits with no
  new rounding and the others in 8.

Which path runs depends on the shape. A forward of at most :data:`PACKED_MAX_ROWS` rows (every decode step,
batched or not, and the output head, which prefill computes for one position) runs the packed kernel. A longer
one (a prompt's prefill: compute-bound, where the kernels are far slower than a dense matrix product) runs a
dense product in :func:`prefill_dtype`: bfloat16 where the CPU multiplies it natively (AMX, AVX512-BF16: four
to five times float32's speed), float32 elsewhere. int8 multiplies its integers (exact in either dtype) and
scales the product's columns; int4 dequantises into a per-thread scratch buffer. Both paths read the input
rounded to bfloat16 and round the output to bfloat16, as the kernels do.

The quantised tensors are plain integers and scales, independent of the CPU; the int4 kernel's packed
layout depends on the CPU's instruction set, so it is built at load from the stored nibbles
(:meth:`Int4Linear.from_state`). Saving and loading them is in :mod:`active_rag.models.weights`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

PACKED_MAX_ROWS = 64
"""Forwards with at most this many rows use the packed kernel; longer ones run a dense product (prefill)."""

INT4_GROUP = 32
"""Inputs per int4 quantisation group (GGUF's Q4 blocks have 32 too)."""

KERNEL_DTYPE = torch.bfloat16
"""Activation dtype of the packed kernels: the one they vectorise on the CPU."""

_SCRATCH = threading.local()

PREFILL_DTYPE_VARIABLE = "ACTIVE_RAG_PREFILL_DTYPE"
"""Environment variable that forces the dense prefill's dtype: ``bfloat16`` or ``float32``."""


def native_bfloat16() -> bool:
    """Whether this CPU multiplies bfloat16 matrices natively (AVX512-BF16 or AMX-BF16) and torch is allowed
    to use AVX-512 (``ATEN_CPU_CAPABILITY=avx2`` forces the AVX2 code paths, as on a CPU without AVX-512, where
    bfloat16 is emulated and slower than float32)."""
    if torch.backends.cpu.get_cpu_capability() not in ("AVX512",):
        return False
    cpu = torch.cpu
    return bool(getattr(cpu, "_is_avx512_bf16_supported", lambda: False)() or getattr(cpu, "_is_amx_tile_supported", lambda: False)())


def int4_kernel_available() -> bool:
    """Whether this torch has the CPU int4 kernels (torch 2.6 and later; 2.4 and 2.5 have only the CUDA ones)."""
    aten = torch.ops.aten
    return hasattr(aten, "_convert_weight_to_int4pack_for_cpu") and hasattr(aten, "_weight_int4pack_mm_for_cpu")


def prefill_dtype() -> torch.dtype:
    """The dtype of a packed layer's dense prefill: bfloat16 where the CPU multiplies it natively (several
    times float32's speed), float32 elsewhere; :data:`PREFILL_DTYPE_VARIABLE` overrides."""
    forced = os.environ.get(PREFILL_DTYPE_VARIABLE, "").strip().lower()
    if forced in ("bfloat16", "bf16"):
        return torch.bfloat16
    if forced in ("float32", "fp32"):
        return torch.float32
    return torch.bfloat16 if native_bfloat16() else torch.float32


def _scratch(numel: int, dtype: torch.dtype) -> torch.Tensor:
    """A buffer of this thread per dtype, reused by every dequantised prefill: a fresh allocation of a layer's
    size (55 MB for the 1.5B model's MLP) would page-fault on first touch at every call, which cost int8 prefill
    about a quarter of its time."""
    buffers = getattr(_SCRATCH, "buffers", None)
    if buffers is None:
        buffers = _SCRATCH.buffers = {}
    buffer = buffers.get(dtype)
    if buffer is None or buffer.numel() < numel:
        with torch.inference_mode(False):  # a normal tensor: writable in and out of inference mode
            buffer = torch.empty(numel, dtype=dtype, device="cpu")  # packed weights are CPU-only
        buffers[dtype] = buffer
    return buffer[:numel]


class PackedLinear(nn.Module):
    """Base of the weight-only layers: shape handling, bias and the packed/dense dispatch.

    A forward of at most :attr:`packed_max_rows` rows (every decode step, batched or not, and the output head,
    which prefill computes for one position) runs the packed kernel on bfloat16 inputs. A longer one (a prompt's
    prefill, compute-bound) dequantises the layer into a scratch buffer and runs a dense matrix product in
    :func:`prefill_dtype`: bfloat16 where the CPU has native bfloat16 (AMX, AVX512-BF16), float32 elsewhere. Both
    paths read the input rounded to bfloat16 and round the output to bfloat16, as the kernel does.
    """

    kind = "packed"
    packed_max_rows: int | None = PACKED_MAX_ROWS
    """Forwards with more rows dequantise for a dense matmul; ``None``: always the packed kernel."""

    def __init__(self, in_features: int, out_features: int, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), requires_grad=False)
        self.packed_calls = 0
        self.dense_calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        rows = x.reshape(-1, self.in_features)
        limit = self.packed_max_rows
        if rows.shape[0] == 0:
            out = rows.new_zeros((0, self.out_features), dtype=KERNEL_DTYPE)
        elif limit is None or rows.shape[0] <= limit:
            self.packed_calls += 1
            # the kernels read their input as a dense row-major matrix: a strided view (a transposed attention
            # output) must be copied first, and .to() keeps a view's strides
            out = self._kernel(rows.to(KERNEL_DTYPE).contiguous())
        else:
            self.dense_calls += 1
            dtype = prefill_dtype()
            out = self._dense(rows.to(KERNEL_DTYPE).to(dtype), dtype)
        out = out.to(KERNEL_DTYPE).to(x.dtype)  # the kernel's output rounding, on both paths
        if self.bias is not None:
            out = out + self.bias.to(x.dtype)
        return out.reshape(*shape[:-1], self.out_features)

    def _kernel(self, rows: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:  # pragma: no cover - abstract
        """The ``[out, in]`` weight the quantised values stand for."""
        raise NotImplementedError

    def _dense(self, rows: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """The dense product of ``rows`` (already in ``dtype``) with the layer's weight."""
        return F.linear(rows, self._dense_weight(dtype))

    def _dense_weight(self, dtype: torch.dtype) -> torch.Tensor:
        """The weight in ``dtype`` for a dense prefill (valid until this thread's next one)."""
        return self.dequantize(dtype)

    def state(self) -> dict[str, torch.Tensor]:  # pragma: no cover - abstract
        """The CPU-independent tensors that rebuild this layer (saved by :mod:`active_rag.models.weights`)."""
        raise NotImplementedError

    @property
    def weight_bytes(self) -> int:
        """Bytes the packed kernel reads per forward (weights and scales)."""
        raise NotImplementedError  # pragma: no cover - abstract

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, {self.kind}"


class Int8Linear(PackedLinear):
    """``y = x W^T + b`` with ``W`` stored as int8 per output channel (scale = absmax / 127)."""

    kind = "int8"

    def __init__(self, qweight: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        out_features, in_features = qweight.shape
        super().__init__(in_features, out_features, bias)
        # a fresh, 64-byte aligned copy: tensors read from a safetensors file may start anywhere in it, and the
        # kernel's vector loads fault on a misaligned weight matrix (seen with AVX-512 from 4 rows on)
        self.register_buffer("qweight", qweight.to(torch.int8).clone(memory_format=torch.contiguous_format))
        self.register_buffer("scales", scales.to(KERNEL_DTYPE).contiguous())

    @staticmethod
    def quantize(weight: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{"qweight": int8 [out, in], "scales": float32 [out]}``; the scales are rounded to the kernel's
        dtype first, so the integers are the nearest for the scale that the kernel multiplies by."""
        w = weight.detach().float()
        scales = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-8).to(KERNEL_DTYPE).float()
        qweight = torch.round(w / scales[:, None]).clamp_(-127, 127).to(torch.int8)
        return {"qweight": qweight, "scales": scales}

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> Int8Linear:
        return cls.from_state(cls.quantize(linear.weight), linear.bias)

    @classmethod
    def from_state(cls, state: dict[str, torch.Tensor], bias: torch.Tensor | None = None) -> Int8Linear:
        return cls(state["qweight"], state["scales"], bias)

    def _kernel(self, rows: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int8pack_mm(rows, self.qweight, self.scales)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return self.qweight.to(dtype) * self.scales.to(dtype)[:, None]

    def _dense(self, rows: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        # x W^T = (x Q^T) * s per output channel: the integers are exact in bfloat16 as in float32, so the product
        # runs on them (one conversion pass, no weight rounding) and the scales multiply the [rows, out] result
        return F.linear(rows, self._dense_weight(dtype)).float().mul_(self.scales.float())

    def _dense_weight(self, dtype: torch.dtype) -> torch.Tensor:
        """The integers as ``dtype`` (exact), in this thread's scratch buffer."""
        return _scratch(self.qweight.numel(), dtype).view(self.out_features, self.in_features).copy_(self.qweight)

    def state(self) -> dict[str, torch.Tensor]:
        return {"qweight": self.qweight, "scales": self.scales.float()}

    @property
    def weight_bytes(self) -> int:
        return self.qweight.numel() + 2 * self.scales.numel()


def _pack_nibbles(q: torch.Tensor) -> torch.Tensor:
    """``[out, in]`` values in [0, 15] -> ``[out, in / 2]`` bytes, the even input in the high nibble."""
    q = q.to(torch.uint8)
    return (q[:, 0::2] << 4) | q[:, 1::2]


def _unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`_pack_nibbles`: ``[out, in / 2]`` bytes -> ``[out, in]`` uint8 values."""
    return torch.stack([packed >> 4, packed & 0x0F], dim=-1).reshape(packed.shape[0], -1)


def _rounded(values: torch.Tensor) -> torch.Tensor:
    """``values`` rounded to the kernel's dtype, as float32."""
    return values.to(KERNEL_DTYPE).float()


GRID_TOLERANCE = 1e-3
"""How far (in grid steps) a weight may lie from a grid point and still count as on it: the float32 weights
of a dequantised GGUF file lie on their block's grid up to float32 rounding (about 1e-6 of a step)."""


def grid_quantize(weight: torch.Tensor, bits: int, group_size: int = INT4_GROUP) -> dict[str, torch.Tensor]:
    """Affine quantisation of ``weight`` ``[out, in]`` in groups of ``group_size`` inputs, ``w ~ low + step * q``
    with ``q`` in ``[0, 2**bits - 1]``, that keeps an existing grid.

    Weights read from a quantised file (GGUF's Q4_K, Q5_0, Q8_0, ...) already lie on a grid per block:
    ``w = low + step * j`` for integers ``j``. Min/max quantisation (``step = (max - min) / (2**bits - 1)``)
    would put a new grid over it whenever a block leaves its top or bottom level unused, and move every weight
    by up to half a step. Here each group's step is found from its values: the smallest gap between two of its
    distinct values is a multiple ``j`` of the step, and when every value lies on the grid of that gap divided by
    some ``j`` within :data:`GRID_TOLERANCE`, and the grid has at most ``2**bits`` levels, the group is stored
    exactly. Any other group gets min/max quantisation. ``exact`` says which groups were exact.

    Returns ``{"codes": uint8 [out, in], "low": float32 [out, groups], "step": float32 [out, groups],
    "exact": bool [out, groups]}``.
    """
    w = weight.detach().float()
    out_features, in_features = w.shape
    groups = w.reshape(out_features, in_features // group_size, group_size)
    low = groups.amin(dim=-1)
    span = groups.amax(dim=-1) - low
    levels = 2**bits - 1
    ordered = groups.sort(dim=-1).values
    gaps = ordered.diff(dim=-1)
    tiny = (span * GRID_TOLERANCE)[..., None]
    gap = torch.where(gaps > tiny, gaps, torch.full_like(gaps, float("inf"))).amin(dim=-1)
    step = span / levels  # min/max, the fallback
    exact = span == 0
    # the smallest gap is j steps for some j <= levels (j > 1 when no two values sit on neighbouring levels);
    # each divisor is tried on the groups no earlier one fitted
    for divisor in range(1, levels + 1):
        todo = (~exact & torch.isfinite(gap)).nonzero(as_tuple=True)
        if todo[0].numel() == 0 or (divisor > 3 and todo[0].numel() > exact.numel() // 2):
            break  # done, or most groups are on no such grid after the common cases (a layer of another format)
        count = torch.round(span[todo] / (gap[todo] / divisor))
        fits = (count <= levels) & (count >= 1)
        grid_step = span[todo] / count.clamp(min=1)
        position = (groups[todo] - low[todo][..., None]) / grid_step[..., None]
        on_grid = ((position - torch.round(position)).abs().amax(dim=-1) <= GRID_TOLERANCE) & fits
        step[todo] = torch.where(on_grid, grid_step, step[todo])
        exact[todo] = on_grid
    # the kernel multiplies by the step rounded to its dtype: the codes are the nearest for that step (on an
    # exact grid of at most 16 levels they stay the grid's own: the rounding moves a weight by at most 15 / 512
    # of a step)
    step = step.clamp(min=1e-12).to(KERNEL_DTYPE).float()
    codes = torch.round((groups - low[..., None]) / step[..., None]).clamp_(0, levels).to(torch.uint8)
    return {"codes": codes.reshape(out_features, in_features), "low": low, "step": step, "exact": exact}


class Int4Linear(PackedLinear):
    """``y = x W^T + b`` with ``W`` stored in 4 bits per weight in groups of :data:`INT4_GROUP` inputs,
    ``w = low + step * q`` per group (:func:`grid_quantize`: a layer read from a 4-bit GGUF tensor keeps its
    grid), run by torch's packed int4 kernel, which computes ``(q - 8) * scale + zero`` with the scale and zero
    rounded to its dtype. Needs ``in_features`` divisible by the group size.
    """

    kind = "int4"

    def __init__(self, codes: torch.Tensor, low: torch.Tensor, step: torch.Tensor, bias: torch.Tensor | None = None,
                 group_size: int = INT4_GROUP) -> None:
        out_features, in_features = codes.shape
        super().__init__(in_features, out_features, bias)
        self.group_size = group_size
        # the stored values (CPU-independent: what is saved, and what the dense prefill dequantises) ...
        self.register_buffer("codes", codes.to(torch.uint8).clone(memory_format=torch.contiguous_format))
        self.register_buffer("low", low.float().contiguous())
        self.register_buffer("step", step.float().contiguous())
        # ... and the kernel's layout, built for this CPU, with its [in / group, out, 2] scales_and_zeros
        zero = _rounded(self.low + 8.0 * self.step)  # step is in the kernel's dtype already (grid_quantize)
        self.register_buffer("packed", torch.ops.aten._convert_weight_to_int4pack_for_cpu(self.codes.to(torch.int32), 1))
        self.register_buffer("scales_and_zeros", torch.stack([self.step.t(), zero.t()], dim=-1).to(KERNEL_DTYPE).contiguous())
        # the dense prefill's dequantisation in one pass, w = q * step + offset, with the kernel's constants
        self.register_buffer("dense_offset", (zero - 8.0 * self.step).contiguous())

    @staticmethod
    def supports(linear: nn.Linear, group_size: int = INT4_GROUP) -> bool:
        return linear.in_features % group_size == 0 and linear.out_features % 16 == 0  # the kernel packs 16 rows

    @staticmethod
    def quantize(weight: torch.Tensor, group_size: int = INT4_GROUP) -> dict[str, torch.Tensor]:
        return grid_quantize(weight, 4, group_size)

    @classmethod
    def from_linear(cls, linear: nn.Linear, group_size: int = INT4_GROUP) -> Int4Linear:
        return cls.from_state(cls.quantize(linear.weight, group_size), linear.bias, group_size)

    @classmethod
    def from_state(cls, state: dict[str, torch.Tensor], bias: torch.Tensor | None = None, group_size: int = INT4_GROUP) -> Int4Linear:
        codes = state["codes"] if "codes" in state else _unpack_nibbles(state["nibbles"])
        return cls(codes, state["low"], state["step"], bias, group_size)

    def _kernel(self, rows: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int4pack_mm_for_cpu(rows, self.packed, self.group_size, self.scales_and_zeros)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The weight the kernel multiplies by: ``q * step + offset`` with its rounded constants."""
        q = self.codes.float().reshape(self.out_features, -1, self.group_size)
        return (q * self.step[..., None] + self.dense_offset[..., None]).reshape(self.out_features, self.in_features).to(dtype)

    def _dense_weight(self, dtype: torch.dtype) -> torch.Tensor:
        numel = self.codes.numel()
        weight = _scratch(numel, torch.float32).view(self.out_features, -1, self.group_size)
        weight.copy_(self.codes.view(weight.shape))  # uint8 -> float32, exact
        weight.mul_(self.step[..., None]).add_(self.dense_offset[..., None])
        weight = weight.view(self.out_features, self.in_features)
        if dtype == torch.float32:
            return weight
        return _scratch(numel, dtype).view(self.out_features, self.in_features).copy_(weight)

    def state(self) -> dict[str, torch.Tensor]:
        return {"nibbles": _pack_nibbles(self.codes), "low": self.low, "step": self.step}

    @property
    def weight_bytes(self) -> int:
        return self.packed.numel() * self.packed.element_size() + 2 * self.scales_and_zeros.numel()


def linear_layers(model: nn.Module) -> Iterator[tuple[str, nn.Linear]]:
    """Every ``nn.Linear`` of ``model`` by its qualified name (the output head included)."""
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            yield name, module


def packed_layers(model: nn.Module) -> Iterator[tuple[str, PackedLinear]]:
    for name, module in model.named_modules():
        if isinstance(module, PackedLinear):
            yield name, module


def replace_module(model: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, new)


def quantize_linear(linear: nn.Linear, kind: str) -> PackedLinear | None:
    """The packed layer of ``kind`` for ``linear``, or ``None`` when its shape does not fit the kernel
    (it then stays dense).

    - ``int4``: 4 bits in groups (:class:`Int4Linear`);
    - ``int8``: 8 bits per output channel (:class:`Int8Linear`);
    - ``mixed``: 4 bits where every group of the layer lies on a grid of at most 16 levels (a layer read from
      a 4-bit GGUF tensor such as Q4_K: stored exactly), 8 bits elsewhere (Q5_0, Q6_K, Q8_0 tensors).
    """
    grouped = Int4Linear.supports(linear)
    if kind == "int4":
        return Int4Linear.from_linear(linear) if grouped else None
    if kind == "mixed" and grouped:
        state = Int4Linear.quantize(linear.weight)
        if bool(state["exact"].all()):
            return Int4Linear.from_state(state, linear.bias)
    return Int8Linear.from_linear(linear)


def layer_from_state(state: dict[str, torch.Tensor], bias: torch.Tensor | None) -> PackedLinear:
    """The layer that :meth:`PackedLinear.state` saved (its class is told by its tensors)."""
    if "qweight" in state:
        return Int8Linear.from_state(state, bias)
    return Int4Linear.from_state(state, bias)


def model_weight_bytes(model: nn.Module) -> int:
    """Weight bytes one decode step reads: packed layers' own bytes, dense linear layers' parameters, plus
    one embedding row (an embedding lookup reads only the rows it needs)."""
    total = 0
    for _, module in model.named_modules():
        if isinstance(module, PackedLinear):
            total += module.weight_bytes
        elif isinstance(module, nn.Linear):
            total += module.weight.numel() * module.weight.element_size()
        elif isinstance(module, nn.Embedding):
            total += module.weight.shape[1] * module.weight.element_size()
    return total


__all__ = [
    "INT4_GROUP",
    "KERNEL_DTYPE",
    "PACKED_MAX_ROWS",
    "Int4Linear",
    "Int8Linear",
    "grid_quantize",
    "int4_kernel_available",
    "native_bfloat16",
    "prefill_dtype",
    "PackedLinear",
    "layer_from_state",
    "linear_layers",
    "model_weight_bytes",
    "packed_layers",
    "quantize_linear",
    "replace_module",
]
