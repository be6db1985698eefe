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
  new rounding and the others in 8 (5 bits for a 5-bit grid where active-rag's kernel decodes:
  :class:`~active_rag.models.int5_linear.Int5Linear`; which class a layer gets is
  :func:`active_rag.models.weights.quantize_linear`).

Which path runs depends on the shape. A forward of at most :data:`PACKED_MAX_ROWS` rows (every decode step,
batched or not, and the output head, which prefill computes for one position) runs the packed kernel. A longer
one (a prompt's prefill: compute-bound, where the kernels are far slower than a dense matrix product) runs a
dense product in :func:`prefill_dtype`: bfloat16 where the CPU multiplies it natively (AMX, AVX512-BF16: four
to five times float32's speed), float32 elsewhere. int8 multiplies its integers (exact in either dtype) and
scales the product's columns; int4 dequantises into a per-thread scratch buffer. Both paths read the input
rounded to bfloat16 and round the output to bfloat16, as the kernels do.

The decode kernel is active-rag's own (:mod:`active_rag.kernels`: int8 dot products of the weights with the
activations quantised to int8 in groups of 32, AVX512-VNNI, AVX-VNNI or AVX2) wherever its library is built, and
torch's elsewhere. A layer chooses when it is built (:attr:`PackedLinear.uses_kernel`). The saved tensors are the
kernel's layout (:mod:`active_rag.kernels.layout`, the same on every CPU), so a load with the kernel copies nothing
but the file; torch's layouts (the int4 one depends on the CPU's instruction set) are built from them at load where
torch's kernels decode. Saving and loading them is in :mod:`active_rag.models.weights`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from .. import kernels
from .prefill_path import kernel_prefill

PACKED_MAX_ROWS = 64
"""Forwards with at most this many rows use the packed kernel; longer ones run a dense product (prefill)."""

INT4_GROUP = 32
"""Inputs per int4 quantisation group (GGUF's Q4 blocks have 32 too)."""

KERNEL_DTYPE = torch.bfloat16
"""Activation dtype of the packed kernels: the one they vectorise on the CPU."""

_SCRATCH: dict[torch.dtype, torch.Tensor] = {}
_SCRATCH_LOCK = threading.Lock()
"""Held by a dense forward while it fills the process's scratch buffer and multiplies by it."""

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
    """Whether int4 layers can run: active-rag's kernel is built, or this torch has the CPU int4 kernels (torch 2.6
    and later; 2.4 and 2.5 have only the CUDA ones)."""
    aten = torch.ops.aten
    return kernels.available() or (hasattr(aten, "_convert_weight_to_int4pack_for_cpu") and hasattr(aten, "_weight_int4pack_mm_for_cpu"))


def _aligned(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` as a contiguous tensor that starts on a 64-byte boundary: tensors read from a safetensors file may
    start anywhere in it, and torch's int8 kernel faults on a misaligned weight matrix (seen with AVX-512 from 4 rows
    on). A tensor that is aligned already is kept (no second copy of a layer's weights at load)."""
    if tensor.is_contiguous() and tensor.data_ptr() % 64 == 0:
        return tensor
    return tensor.clone(memory_format=torch.contiguous_format)


def _shape(out_features: int, in_features: int) -> torch.Tensor:
    return torch.tensor([out_features, in_features], dtype=torch.int64)


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
    """The process's buffer per dtype, reused by every dequantised prefill (the caller holds
    :data:`_SCRATCH_LOCK` until its product is done): a fresh allocation of a layer's size (55 MB for the 1.5B
    model's MLP) would page-fault on first touch at every call, which cost int8 prefill about a quarter of its
    time. One buffer for the process, not one a thread: an ``eval`` at batch 8 prefills from eight threads (the
    model lock lets one prefill at a time), which held eight of them."""
    buffer = _SCRATCH.get(dtype)
    if buffer is None or buffer.numel() < numel:
        with torch.inference_mode(False):  # a normal tensor: writable in and out of inference mode
            buffer = torch.empty(numel, dtype=dtype, device="cpu")  # packed weights are CPU-only
        _SCRATCH[dtype] = buffer
    return buffer[:numel]


class PackedLinear(nn.Module):
    """Base of the weight-only layers: shape handling, bias and the packed/dense dispatch.

    A forward of at most :attr:`packed_max_rows` rows (every decode step, batched or not, and the output head,
    which prefill computes for one position) runs the packed kernel on bfloat16 inputs. A longer one (a prompt's
    prefill, compute-bound) runs the packed kernel too where active-rag's kernel decodes and the CPU has no AMX
    (:func:`~active_rag.models.prefill_path.kernel_prefill`); otherwise it dequantises the layer into a scratch
    buffer and runs a dense matrix product in :func:`prefill_dtype`: bfloat16 where the CPU has native bfloat16
    (AMX, AVX512-BF16), float32 elsewhere. Both paths read the input rounded to bfloat16 and round the output to
    bfloat16, as the kernel does.
    """

    kind = "packed"
    packed_max_rows: int | None = PACKED_MAX_ROWS
    """Forwards with more rows dequantise for a dense matmul; ``None``: always the packed kernel."""
    uses_kernel = False
    """Whether this layer decodes with active-rag's kernel (:mod:`active_rag.kernels`), else torch's: chosen when
    it is built, from :func:`active_rag.kernels.available`."""
    isa: str | None = None
    """The kernel's instruction-set path (:func:`active_rag.kernels.default_isa`), chosen when the layer is built
    as :attr:`uses_kernel` is: a decode step reads no environment variable."""

    def __init__(self, in_features: int, out_features: int, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), requires_grad=False)
        self._calls = [0, 0]  # packed, dense: a list, so that counting a call is not an nn.Module attribute write

    @property
    def packed_calls(self) -> int:
        """Forwards that ran the packed decode kernel."""
        return self._calls[0]

    @property
    def dense_calls(self) -> int:
        """Forwards that dequantised for a dense matrix product (a prefill)."""
        return self._calls[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        rows = x.reshape(-1, self.in_features)
        limit = self.packed_max_rows
        if rows.shape[0] == 0:
            out = rows.new_zeros((0, self.out_features), dtype=KERNEL_DTYPE)
        elif limit is None or rows.shape[0] <= limit or (self.uses_kernel and kernel_prefill()):
            self._calls[0] += 1
            if self.uses_kernel and x.dtype == torch.float32:  # the rounding and the bias in the kernel's own op
                return self._linear(rows).reshape(*shape[:-1], self.out_features)
            # the kernels read their input as a dense row-major matrix: a strided view (a transposed attention
            # output) must be copied first, and .to() keeps a view's strides
            out = self._kernel(rows.to(KERNEL_DTYPE).contiguous())
        else:
            self._calls[1] += 1
            dtype = prefill_dtype()
            rows = rows.to(KERNEL_DTYPE).to(dtype)
            with _SCRATCH_LOCK:  # the weight lives in the process's scratch buffer until the product is done
                out = self._dense(rows, dtype)
        out = out.to(KERNEL_DTYPE).to(x.dtype)  # the kernel's output rounding, on both paths
        if self.bias is not None:
            out = out + self.bias.to(x.dtype)
        return out.reshape(*shape[:-1], self.out_features)

    def _kernel(self, rows: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    _scales_buffer = "scales"
    """The buffer holding the scales the kernel's op reads (:meth:`decode_function`)."""

    def decode_function(self) -> Callable[[torch.Tensor], torch.Tensor]:
        """:meth:`forward` for a decode step, to call directly (:mod:`active_rag.decoding.lean_step`): where forward
        would run active-rag's fused op (float32 input of at most :attr:`packed_max_rows` rows) that op with the
        layer's tensors, read from its own tables at each call, so a module attribute lookup, two frames and the
        checks of the other paths are not paid per projection; any other input goes through :meth:`forward`. The
        same values and call counts as :meth:`forward`."""
        if not self.uses_kernel:
            return self.forward
        op, code = kernels.linear_op(self.kind, self.isa)
        buffers, parameters, calls = self._buffers, self._parameters, self._calls
        in_features, out_features, scales = self.in_features, self.out_features, self._scales_buffer
        forward = self.forward

        def decode(x: torch.Tensor) -> torch.Tensor:
            limit = self.packed_max_rows
            rows = x.numel() // in_features
            if x.dtype != torch.float32 or rows == 0 or (limit is not None and rows > limit):
                return forward(x)
            calls[0] += 1
            out = op(x.reshape(rows, in_features), buffers["tiles"], buffers[scales], out_features,
                     parameters.get("bias"), code)
            return out.view(*x.shape[:-1], out_features)

        return decode


    def _linear(self, rows: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        """The whole decode forward of float32 ``rows`` in active-rag's kernel: the input and output rounding and
        the bias of :meth:`forward`'s other path, in one op (:func:`active_rag.kernels.int8_linear`)."""
        raise NotImplementedError

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:  # pragma: no cover - abstract
        """The ``[out, in]`` weight the quantised values stand for."""
        raise NotImplementedError

    def _dense(self, rows: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """The dense product of ``rows`` (already in ``dtype``) with the layer's weight."""
        return F.linear(rows, self._dense_weight(dtype))

    def _dense_weight(self, dtype: torch.dtype) -> torch.Tensor:
        """The weight in ``dtype`` for a dense prefill (valid while the caller holds :data:`_SCRATCH_LOCK`)."""
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
    """``y = x W^T + b`` with ``W`` stored as int8 per output channel (scale = absmax / 127).

    Built from the integers (``qweight`` int8 ``[out, in]``) or from the kernel's layout (``tiles``, with
    ``in_features``); either way it keeps one copy: the layout of the kernel that decodes it.
    """

    kind = "int8"

    def __init__(self, qweight: torch.Tensor | None, scales: torch.Tensor, bias: torch.Tensor | None = None, *,
                 tiles: torch.Tensor | None = None, in_features: int | None = None) -> None:
        out_features = scales.numel()
        if qweight is not None:
            in_features = qweight.shape[1]
        if in_features is None or (qweight is None and tiles is None):
            raise ValueError("Int8Linear needs qweight, or tiles and in_features")
        super().__init__(in_features, out_features, bias)
        self.uses_kernel = kernels.available()
        self.isa = kernels.default_isa() if self.uses_kernel else None
        scales = scales.to(KERNEL_DTYPE)  # what the kernels multiply by (float32 values of bfloat16 in ours)
        if self.uses_kernel:
            self.register_buffer("tiles", _aligned(tiles) if tiles is not None else kernels.pack_int8(qweight))
            self.register_buffer("scales", scales.float().contiguous())
        else:
            q = qweight if qweight is not None else kernels.unpack_int8(tiles, out_features, in_features)
            self.register_buffer("qweight", _aligned(q.to(torch.int8)))
            self.register_buffer("scales", scales.contiguous())

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
        """From :meth:`quantize`'s integers or :meth:`state`'s layout."""
        if "qweight" in state:
            return cls(state["qweight"], state["scales"], bias)
        return cls(None, state["scales"], bias, tiles=state["tiles8"], in_features=int(state["shape"][1]))

    def _kernel(self, rows: torch.Tensor) -> torch.Tensor:
        if self.uses_kernel:
            return kernels.int8_gemm(rows, self.tiles, self.scales, self.out_features, self.isa)
        return torch.ops.aten._weight_int8pack_mm(rows, self.qweight, self.scales)

    def _linear(self, rows: torch.Tensor) -> torch.Tensor:
        return kernels.int8_linear(rows, self.tiles, self.scales, self.out_features, self.bias, self.isa)

    def integers(self) -> torch.Tensor:
        """The int8 ``[out, in]`` weight before scaling."""
        if self.uses_kernel:
            return kernels.unpack_int8(self.tiles, self.out_features, self.in_features)
        return self.qweight

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return self.integers().to(dtype) * self.scales.to(dtype)[:, None]

    def _dense(self, rows: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        # x W^T = (x Q^T) * s per output channel: the integers are exact in bfloat16 as in float32, so the product
        # runs on them (one conversion pass, no weight rounding) and the scales multiply the [rows, out] result
        return F.linear(rows, self._dense_weight(dtype)).float().mul_(self.scales.float())

    def _dense_weight(self, dtype: torch.dtype) -> torch.Tensor:
        """The integers as ``dtype`` (exact), in the process's scratch buffer."""
        buffer = _scratch(self.out_features * self.in_features, dtype).view(self.out_features, self.in_features)
        if self.uses_kernel:
            return kernels.int8_unpack(self.tiles, buffer)
        return buffer.copy_(self.qweight)

    def state(self) -> dict[str, torch.Tensor]:
        tiles = self.tiles if self.uses_kernel else kernels.pack_int8(self.qweight)
        return {"tiles8": tiles, "scales": self.scales.float(), "shape": _shape(self.out_features, self.in_features)}

    @property
    def weight_bytes(self) -> int:
        if self.uses_kernel:
            return self.tiles.numel() + 4 * self.scales.numel()
        return self.qweight.numel() + 2 * self.scales.numel()


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
    ``w = (q - 8) * step + zero`` per group (:func:`grid_quantize`: a layer read from a 4-bit GGUF tensor keeps its
    grid; ``zero = low + 8 * step`` and the step rounded to bfloat16, torch's int4 convention). Needs
    ``in_features`` divisible by the group size.

    Built from the codes (``codes``, ``low``, ``step`` of :func:`grid_quantize`) or from the kernel's layout
    (``tiles``, ``scales``, ``shape``: :meth:`state`). With active-rag's kernel the layer keeps that layout alone (half
    a byte a weight); with torch's it keeps torch's packed layout, the codes for the dense prefill and the constants.
    """

    kind = "int4"
    _scales_buffer = "tile_scales"

    def __init__(self, codes: torch.Tensor | None = None, low: torch.Tensor | None = None, step: torch.Tensor | None = None,
                 bias: torch.Tensor | None = None, group_size: int = INT4_GROUP, *, tiles: torch.Tensor | None = None,
                 scales: torch.Tensor | None = None, shape: tuple[int, int] | None = None) -> None:
        if codes is not None:
            shape = (codes.shape[0], codes.shape[1])
        if shape is None or (codes is None and (tiles is None or scales is None)) or (codes is not None and (low is None or step is None)):
            raise ValueError("Int4Linear needs codes, low and step, or tiles, scales and shape")
        out_features, in_features = shape
        super().__init__(in_features, out_features, bias)
        self.group_size = group_size
        self.uses_kernel = kernels.available() and group_size == kernels.GROUP
        self.isa = kernels.default_isa() if self.uses_kernel else None
        zero = None
        if codes is not None:
            assert low is not None and step is not None
            step = step.float()  # in the kernel's dtype already (grid_quantize)
            zero = _rounded(low.float() + 8.0 * step)
        if self.uses_kernel:
            if codes is not None:
                tiles, scales = kernels.pack_int4(codes, step, zero)
            self.register_buffer("tiles", _aligned(tiles))
            self.register_buffer("tile_scales", _aligned(scales))
            return
        if codes is None:
            codes, step, zero = kernels.unpack_int4(tiles, scales, out_features)
        assert step is not None and zero is not None
        # torch's layout, built for this CPU, with its [in / group, out, 2] scales_and_zeros; the codes and constants
        # for the dense prefill's dequantisation in one pass, w = q * step + offset
        self.register_buffer("codes", codes.to(torch.uint8).clone(memory_format=torch.contiguous_format))
        self.register_buffer("step", step.contiguous())
        self.register_buffer("packed", torch.ops.aten._convert_weight_to_int4pack_for_cpu(self.codes.to(torch.int32), 1))
        self.register_buffer("scales_and_zeros", torch.stack([step.t(), zero.t()], dim=-1).to(KERNEL_DTYPE).contiguous())
        self.register_buffer("dense_offset", (zero - 8.0 * step).contiguous())

    @staticmethod
    def supports(linear: nn.Linear, group_size: int = INT4_GROUP) -> bool:
        # torch's kernel packs 16 rows; ours would take any, but a cached layer must not depend on which is built
        return linear.in_features % group_size == 0 and linear.out_features % 16 == 0

    @staticmethod
    def quantize(weight: torch.Tensor, group_size: int = INT4_GROUP) -> dict[str, torch.Tensor]:
        return grid_quantize(weight, 4, group_size)

    @classmethod
    def from_linear(cls, linear: nn.Linear, group_size: int = INT4_GROUP) -> Int4Linear:
        return cls.from_state(cls.quantize(linear.weight, group_size), linear.bias, group_size)

    @classmethod
    def from_state(cls, state: dict[str, torch.Tensor], bias: torch.Tensor | None = None, group_size: int = INT4_GROUP) -> Int4Linear:
        """From :func:`grid_quantize`'s codes or :meth:`state`'s layout."""
        if "codes" in state:
            return cls(state["codes"], state["low"], state["step"], bias, group_size)
        out_features, in_features = (int(v) for v in state["shape"])
        return cls(bias=bias, group_size=group_size, tiles=state["tiles4"], scales=state["scales4"], shape=(out_features, in_features))

    def _kernel(self, rows: torch.Tensor) -> torch.Tensor:
        if self.uses_kernel:
            return kernels.int4_gemm(rows, self.tiles, self.tile_scales, self.out_features, self.isa)
        return torch.ops.aten._weight_int4pack_mm_for_cpu(rows, self.packed, self.group_size, self.scales_and_zeros)

    def _linear(self, rows: torch.Tensor) -> torch.Tensor:
        return kernels.int4_linear(rows, self.tiles, self.tile_scales, self.out_features, self.bias, self.isa)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The weight the kernel multiplies by, with its rounded constants."""
        if self.uses_kernel:
            return kernels.int4_dequant(self.tiles, self.tile_scales, torch.empty(self.out_features, self.in_features)).to(dtype)
        q = self.codes.float().reshape(self.out_features, -1, self.group_size)
        return (q * self.step[..., None] + self.dense_offset[..., None]).reshape(self.out_features, self.in_features).to(dtype)

    def _dense_weight(self, dtype: torch.dtype) -> torch.Tensor:
        numel = self.out_features * self.in_features
        if self.uses_kernel:  # one pass, straight into the dtype
            return kernels.int4_dequant(self.tiles, self.tile_scales, _scratch(numel, dtype).view(self.out_features, self.in_features))
        weight = _scratch(numel, torch.float32).view(self.out_features, -1, self.group_size)
        weight.copy_(self.codes.view(weight.shape))  # uint8 -> float32, exact
        weight.mul_(self.step[..., None]).add_(self.dense_offset[..., None])
        weight = weight.view(self.out_features, self.in_features)
        if dtype == torch.float32:
            return weight
        return _scratch(numel, dtype).view(self.out_features, self.in_features).copy_(weight)

    def state(self) -> dict[str, torch.Tensor]:
        if self.uses_kernel:
            tiles, scales = self.tiles, self.tile_scales
        else:
            tiles, scales = kernels.pack_int4(self.codes, self.step, self.scales_and_zeros[..., 1].t().float())
        return {"tiles4": tiles, "scales4": scales, "shape": _shape(self.out_features, self.in_features)}

    @property
    def weight_bytes(self) -> int:
        if self.uses_kernel:
            return self.tiles.numel() + 2 * self.tile_scales.numel()
        return self.packed.numel() * self.packed.element_size() + 2 * self.scales_and_zeros.numel()


def decode_kernel(model: nn.Module) -> str:
    """Which kernel decodes ``model``'s packed layers: ``active-rag <instruction set>``, ``torch`` (with why, when
    active-rag's is not in use), ``mixed``, or ``none`` (no packed layer)."""
    modes = {layer.uses_kernel for _, layer in packed_layers(model)}
    if not modes:
        return "none"
    if len(modes) > 1:
        return "mixed"
    if modes == {True}:
        return f"active-rag {kernels.default_isa()}"
    why = kernels.describe()
    return why if why.startswith("torch") else "torch"


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
    "decode_kernel",
    "grid_quantize",
    "int4_kernel_available",
    "native_bfloat16",
    "prefill_dtype",
    "PackedLinear",
    "linear_layers",
    "model_weight_bytes",
    "packed_layers",
    "replace_module",
]
