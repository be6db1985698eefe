"""Weight-only int8 and int4 linear layers for decoding on the CPU (issue 24).

Decoding one token on a CPU is memory-bound: every linear layer reads all its weights once per forward
pass, whatever the batch. Storing weights in 8 or 4 bits reads 4 or 8 times fewer bytes than float32.
torch ships packed weight-only kernels for this, vectorised for AVX2 and AVX-512 when the activations are
bfloat16 (:func:`torch.ops.aten._weight_int8pack_mm`, :func:`torch.ops.aten._weight_int4pack_mm_for_cpu`);
with float32 activations they fall back to a scalar loop, so the layers here round their input to
bfloat16 for the kernel and return the model's dtype.

- :class:`Int8Linear`: per-output-channel symmetric int8 (``w ~ q * s``, ``q`` in [-127, 127]).
- :class:`Int4Linear`: per-group asymmetric int4 (groups of :data:`INT4_GROUP` inputs,
  ``w ~ (q - 8) * s + z``, ``q`` in [0, 15]), torch's ``scales_and_zeros`` convention.

Which kernel runs depends on the shape: an int8 forward of at most :attr:`Int8Linear.packed_max_rows` rows
(every decode step, batched or not, and the output head, which prefill computes for one position) runs the
packed kernel; a longer int8 prefill, which is compute-bound and where that kernel is slower than float32's
matmul, dequantises the layer's weights for that call and runs float32's dense matmul on the same inputs
(rounded to bfloat16, as the kernel sees them) and rounds the output to bfloat16 as the kernel does. Both
paths therefore compute the same numbers up to float32 summation order, so how a prompt is split into
forwards (a prefix-cache hit, a batch) changes its tokens no more than it does with float32 weights. The
int4 kernel keeps float32's prefill speed at every length (``active-rag bench --suite weights``), and
unpacking int4 for a dense matmul costs more than it saves, so int4 always runs its kernel.

The quantised tensors are plain integers and scales, independent of the CPU; the int4 kernel's packed
layout depends on the CPU's instruction set, so it is built at load from the stored nibbles
(:meth:`Int4Linear.from_state`). Saving and loading them is in :mod:`active_rag.weights`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

PACKED_MAX_ROWS = 64
"""int8 forwards with at most this many rows use the packed kernel; longer ones dequantise for a dense matmul."""

INT4_GROUP = 32
"""Inputs per int4 quantisation group (GGUF's Q4 blocks have 32 too)."""

KERNEL_DTYPE = torch.bfloat16
"""Activation dtype of the packed kernels: the one they vectorise on the CPU."""

_SCRATCH = threading.local()


def _scratch(numel: int) -> torch.Tensor:
    """A float32 buffer of this thread, reused by every dequantised prefill: a fresh allocation of a layer's
    size (55 MB for the 1.5B model's MLP) would page-fault on first touch at every call, which cost int8 prefill
    about a quarter of its time."""
    buffer = getattr(_SCRATCH, "buffer", None)
    if buffer is None or buffer.numel() < numel:
        with torch.inference_mode(False):  # a normal tensor: writable in and out of inference mode
            buffer = torch.empty(numel, dtype=torch.float32, device="cpu")  # packed weights are CPU-only
        _SCRATCH.buffer = buffer
    return buffer[:numel]


class PackedLinear(nn.Module):
    """Base of the weight-only layers: shape handling, bias and the packed/dense dispatch."""

    kind = "packed"
    packed_max_rows: int | None = PACKED_MAX_ROWS
    """Forwards with more rows dequantise for float32's dense matmul; ``None``: always the packed kernel."""

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
            out = self._packed(rows.to(KERNEL_DTYPE).contiguous())
        else:
            self.dense_calls += 1
            dense = F.linear(rows.to(KERNEL_DTYPE).float(), self._dense_weight())
            out = dense.to(KERNEL_DTYPE)  # the kernel's output dtype: the same rounding on both paths
        out = out.to(x.dtype)
        if self.bias is not None:
            out = out + self.bias.to(x.dtype)
        return out.reshape(*shape[:-1], self.out_features)

    def _packed(self, rows: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:  # pragma: no cover - abstract
        """The ``[out, in]`` weight the quantised values stand for."""
        raise NotImplementedError

    def _dense_weight(self) -> torch.Tensor:
        """The float32 weight for a dense prefill (valid until this thread's next one)."""
        return self.dequantize(torch.float32)

    def state(self) -> dict[str, torch.Tensor]:  # pragma: no cover - abstract
        """The CPU-independent tensors that rebuild this layer (saved by :mod:`active_rag.weights`)."""
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

    def _packed(self, rows: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int8pack_mm(rows, self.qweight, self.scales)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return self.qweight.to(dtype) * self.scales.to(dtype)[:, None]

    def _dense_weight(self) -> torch.Tensor:
        weight = _scratch(self.qweight.numel()).view(self.out_features, self.in_features)
        weight.copy_(self.qweight)  # int8 -> float32, exact
        return weight.mul_(self.scales.float()[:, None])

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


class Int4Linear(PackedLinear):
    """``y = x W^T + b`` with ``W`` stored as int4 in groups of :data:`INT4_GROUP` inputs, each group with a
    scale and a zero point (``w ~ (q - 8) * s + z``). Needs ``in_features`` divisible by the group size."""

    kind = "int4"
    packed_max_rows = None

    def __init__(self, nibbles: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, bias: torch.Tensor | None = None,
                 group_size: int = INT4_GROUP) -> None:
        out_features, half = nibbles.shape
        super().__init__(2 * half, out_features, bias)
        self.group_size = group_size
        # the stored values (CPU-independent, for the dense path and for saving) ...
        self.register_buffer("nibbles", nibbles.to(torch.uint8).clone(memory_format=torch.contiguous_format))
        # ... and the kernel's layout, built for this CPU
        q = _unpack_nibbles(self.nibbles).to(torch.int32)
        self.register_buffer("packed", torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1))
        # [in / group, out, 2]: the kernel's scales_and_zeros
        self.register_buffer("scales_and_zeros", torch.stack([scales.t(), zeros.t()], dim=-1).to(KERNEL_DTYPE).contiguous())

    @staticmethod
    def supports(linear: nn.Linear, group_size: int = INT4_GROUP) -> bool:
        return linear.in_features % group_size == 0 and linear.in_features % 2 == 0

    @staticmethod
    def quantize(weight: torch.Tensor, group_size: int = INT4_GROUP) -> dict[str, torch.Tensor]:
        """``{"nibbles": uint8 [out, in / 2], "scales": float32 [out, groups], "zeros": float32 [out, groups]}``,
        min/max affine per group; scales and zeros are rounded to the kernel's dtype before the integers
        are chosen."""
        w = weight.detach().float()
        out_features, in_features = w.shape
        groups = w.reshape(out_features, in_features // group_size, group_size)
        low = groups.amin(dim=-1)
        high = groups.amax(dim=-1)
        scales = ((high - low) / 15.0).clamp(min=1e-8).to(KERNEL_DTYPE).float()
        zeros = (low + 8.0 * scales).to(KERNEL_DTYPE).float()
        q = torch.round((groups - zeros[..., None]) / scales[..., None] + 8.0).clamp_(0, 15)
        return {"nibbles": _pack_nibbles(q.reshape(out_features, in_features)), "scales": scales, "zeros": zeros}

    @classmethod
    def from_linear(cls, linear: nn.Linear, group_size: int = INT4_GROUP) -> Int4Linear:
        return cls.from_state(cls.quantize(linear.weight, group_size), linear.bias, group_size)

    @classmethod
    def from_state(cls, state: dict[str, torch.Tensor], bias: torch.Tensor | None = None, group_size: int = INT4_GROUP) -> Int4Linear:
        return cls(state["nibbles"], state["scales"], state["zeros"], bias, group_size)

    def _packed(self, rows: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int4pack_mm_for_cpu(rows, self.packed, self.group_size, self.scales_and_zeros)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        q = _unpack_nibbles(self.nibbles).to(dtype).reshape(self.out_features, -1, self.group_size)
        scales = self.scales_and_zeros[..., 0].t().to(dtype)[..., None]
        zeros = self.scales_and_zeros[..., 1].t().to(dtype)[..., None]
        return ((q - 8) * scales + zeros).reshape(self.out_features, self.in_features)

    def state(self) -> dict[str, torch.Tensor]:
        return {
            "nibbles": self.nibbles,
            "scales": self.scales_and_zeros[..., 0].t().float().contiguous(),
            "zeros": self.scales_and_zeros[..., 1].t().float().contiguous(),
        }

    @property
    def weight_bytes(self) -> int:
        return self.packed.numel() + 2 * self.scales_and_zeros.numel()


LAYERS: dict[str, type[PackedLinear]] = {"int8": Int8Linear, "int4": Int4Linear}


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
    (it then stays dense)."""
    if kind == "int4":
        return Int4Linear.from_linear(linear) if Int4Linear.supports(linear) else None
    return Int8Linear.from_linear(linear)


def layer_from_state(kind: str, state: dict[str, torch.Tensor], bias: torch.Tensor | None) -> PackedLinear:
    return LAYERS[kind].from_state(state, bias)


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
    "PackedLinear",
    "layer_from_state",
    "linear_layers",
    "model_weight_bytes",
    "packed_layers",
    "quantize_linear",
    "replace_module",
]
