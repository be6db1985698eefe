"""active-rag's own CPU decode kernels: int4/int5/int8 weights times int8-quantised activations.

A decode step reads every weight once, so its speed is the speed at which weights stream through the cores. torch's
weight-only kernels convert each weight to float first (the int4 one is bound by unpacking nibbles, about 12 GB/s on
2 threads). The kernels here (``csrc/decode_kernel.cpp``) quantise each row of activations to int8 once per call, in
groups of 32 inputs, and multiply integers four bytes at a time: ``vpdpbusd`` with AVX512-VNNI or AVX-VNNI,
``vpmaddubsw`` + ``vpmaddwd`` with AVX2 alone, a scalar reference elsewhere. Every path gives bit-identical outputs;
they differ from a float product by the activations' int8 rounding (at most half a step of ``max|x| / 127`` per
input within each group of 32). :func:`int8_linear` and :func:`int4_linear` are a packed layer's whole decode
forward in one op (its input and output rounded to bfloat16 and its bias added, as the layer's torch ops did).

The library is compiled ahead of time (``make setup`` runs :mod:`active_rag.kernels.build`); a process only loads a
finished build. Where there is none (no compiler, another torch, a non-x86 machine, no AVX2), or when
``ACTIVE_RAG_DECODE_KERNEL=torch``, :func:`available` is false and the packed layers decode with torch's kernels, as
before, after one log line: a warning on an x86-64 CPU with AVX2 (a missing build there costs 2-3x a token: a build
gone stale by a source edit or a new torch is not found), a debug line elsewhere. A process that loads the library
with OpenMP's default wait policy (torch imported before active_rag) on more than one thread gets a warning: OpenMP's
workers then spin on the kernels' cores (:func:`active_rag.omp_wait.spinning_warning`). The weights' layout is
:mod:`active_rag.kernels.layout`.

The same library holds a decode step's small ops (``csrc/attention.cpp``, ``norm.cpp``, ``rope.cpp``, ``summary.cpp``:
``torch.ops.active_rag.decode_attention``, ``add_rms_norm``, ``rope_heads``, ``greedy_summary``), which the engine uses
where :func:`available` is true (:mod:`active_rag.decoding.one_token_attention`, :mod:`~active_rag.decoding.step_norms`,
:mod:`~active_rag.decoding.lean_step`, :mod:`~active_rag.decoding.step_summary`).
"""

from __future__ import annotations

import logging
import os
import platform
import threading
from typing import Any

import torch

from ..errors import InvalidOptionError
from .layout import (GROUP, TILE, pack_int4, pack_int4k, pack_int5, pack_int6k, pack_int8, padded_inputs, tiles_count,
                     unpack_int4, unpack_int4k, unpack_int5, unpack_int6k, unpack_int8)

logger = logging.getLogger(__name__)

DECODE_KERNEL_VARIABLE = "ACTIVE_RAG_DECODE_KERNEL"
"""Environment variable: ``torch`` (or ``off``) makes layers built afterwards decode with torch's kernels."""

ISA_VARIABLE = "ACTIVE_RAG_KERNEL_ISA"
"""Environment variable forcing the instruction set of the kernels: one of :data:`ISAS`; packed layers read it
when they are built (:attr:`active_rag.models.quantized.PackedLinear.isa`), the functions here at each call."""

ISAS = {"scalar": 1, "avx2": 2, "avx-vnni": 3, "avx512-vnni": 4}
"""The instruction-set paths of the library, by name, with the codes its ops take (0: the best this CPU has)."""

_NAMES = {code: name for name, code in ISAS.items()}
_LOCK = threading.Lock()
_STATE: dict[str, object] = {}


def _register_fake() -> None:
    """Shapes for tracing (``torch.compile``, meta tensors): the ops' outputs without running them."""

    def product(x: torch.Tensor, tiles: torch.Tensor, scales: torch.Tensor, n: int, isa: int = 0) -> torch.Tensor:
        return x.new_empty((x.shape[0], n), dtype=torch.float32)

    def layer(x: torch.Tensor, tiles: torch.Tensor, scales: torch.Tensor, n: int, bias: torch.Tensor | None,
              isa: int = 0) -> torch.Tensor:
        return x.new_empty((x.shape[0], n), dtype=torch.float32)

    for kind in ("int4", "int5", "int6", "int8"):
        torch.library.register_fake(f"active_rag::{kind}_gemm")(product)
        torch.library.register_fake(f"active_rag::{kind}_linear")(layer)


def _torch_asked() -> bool:
    """Whether :data:`DECODE_KERNEL_VARIABLE` asks for torch's kernels."""
    return os.environ.get(DECODE_KERNEL_VARIABLE, "").strip().lower() in ("torch", "off", "0", "false", "no")


def _build_expected() -> bool:
    """Whether a missing build costs speed here, so that loading says so as a warning: an x86-64 CPU with at least
    AVX2 (where ``make setup`` builds the library), and :data:`DECODE_KERNEL_VARIABLE` not asking for torch's kernels."""
    if _torch_asked():
        return False
    return platform.machine().lower() in ("x86_64", "amd64") and torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")


def loaded() -> bool:
    """Whether the compiled library is loaded in this process (loading it on the first call)."""
    if "loaded" in _STATE:
        return bool(_STATE["loaded"])
    with _LOCK:
        if "loaded" not in _STATE:
            reason = ""
            try:
                from .build import find_library

                path = find_library()
                if path is None:
                    reason = "is not built: run python -m active_rag.kernels.build"
                else:
                    torch.ops.load_library(str(path))
                    _register_fake()
            except Exception as error:  # a damaged build, an ABI mismatch: torch's kernels decode
                reason = f"cannot be loaded ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})"
            if reason:
                level = logging.WARNING if _build_expected() else logging.DEBUG
                logger.log(level, "The active-rag decode kernel %s; torch's kernels decode%s.", reason,
                           " (2-3x slower a token on x86 CPUs)" if level == logging.WARNING else "")
            else:
                from ..omp_wait import spinning_warning

                spinning = spinning_warning(torch.get_num_threads())
                if spinning:
                    logger.warning("%s.", spinning)
            _STATE["reason"] = reason
            _STATE["loaded"] = not reason
    return bool(_STATE["loaded"])


def supported_isas() -> list[str]:
    """The instruction-set paths this CPU runs (empty when the library is not loaded)."""
    if not loaded():
        return []
    return [name for name, code in ISAS.items() if bool(torch.ops.active_rag.isa_supported(code))]


def default_isa() -> str:
    """The path the layers use: :data:`ISA_VARIABLE` when set, else the best this CPU has, capped at AVX2's class
    when torch itself is held below AVX-512 (``ATEN_CPU_CAPABILITY=avx2``, the project's way to act as an AVX2 CPU)."""
    forced = os.environ.get(ISA_VARIABLE, "").strip().lower()
    if forced:
        if forced not in ISAS:
            raise InvalidOptionError(f"{ISA_VARIABLE} must be one of {', '.join(ISAS)}, got {forced!r}")
        return forced
    if "isa" not in _STATE:
        if not loaded():
            return "scalar"
        capability = torch.backends.cpu.get_cpu_capability()
        ceiling = ISAS["avx512-vnni"] if capability == "AVX512" else ISAS["avx-vnni"] if capability == "AVX2" else ISAS["scalar"]
        best = next(c for c in range(ceiling, 0, -1) if bool(torch.ops.active_rag.isa_supported(c)))
        _STATE["isa"] = _NAMES[best]
    return str(_STATE["isa"])


def available() -> bool:
    """Whether packed layers built now decode with these kernels: the library is loaded, the CPU has at least AVX2
    (the scalar path is a reference, slower than torch's kernels) and :data:`DECODE_KERNEL_VARIABLE` does not ask
    for torch's kernels."""
    if _torch_asked():
        return False
    return loaded() and (os.environ.get(ISA_VARIABLE) is not None or default_isa() != "scalar")


def describe() -> str:
    """One line for ``active-rag doctor``: which kernel decodes packed layers, and why."""
    if _torch_asked():
        return f"torch ({DECODE_KERNEL_VARIABLE}={os.environ[DECODE_KERNEL_VARIABLE]})"
    if not loaded():
        return f"torch (the active-rag kernel {_STATE.get('reason', '')})"
    if not available():
        return "torch (this CPU has no AVX2)"
    return f"active-rag {default_isa()}"


def _ops(isa: str | None) -> tuple[object, int]:
    """The library's op namespace (loading it) and the code of ``isa`` (None: :func:`default_isa`)."""
    if not loaded():
        raise RuntimeError(f"The active-rag decode kernel {_STATE.get('reason', '')}.")
    return torch.ops.active_rag, ISAS[isa if isa is not None else default_isa()]


def int4_gemm(x: torch.Tensor, tiles: torch.Tensor, scales: torch.Tensor, out_features: int, isa: str | None = None) -> torch.Tensor:
    """``x`` ``[rows, in]`` (float32 or bfloat16) times the int4 weight (:func:`~.layout.pack_int4`, or
    :func:`~.layout.pack_int4k` with uint8 ``scales``) -> float32 ``[rows, out_features]``."""
    ops, code = _ops(isa)
    return ops.int4_gemm(x, tiles, scales, out_features, code)  # type: ignore[attr-defined]


def int8_gemm(x: torch.Tensor, tiles: torch.Tensor, scales: torch.Tensor, out_features: int, isa: str | None = None) -> torch.Tensor:
    """``x`` ``[rows, in]`` times the int8 weight (:func:`~.layout.pack_int8`, float32 ``scales`` per output) ->
    float32 ``[rows, out_features]``."""
    ops, code = _ops(isa)
    return ops.int8_gemm(x, tiles, scales, out_features, code)  # type: ignore[attr-defined]


def int5_gemm(x: torch.Tensor, tiles: torch.Tensor, scales: torch.Tensor, out_features: int, isa: str | None = None) -> torch.Tensor:
    """:func:`int4_gemm` for a 5-bit weight (:func:`~.layout.pack_int5`, ``w = (q - 16) * step + zero``)."""
    ops, code = _ops(isa)
    return ops.int5_gemm(x, tiles, scales, out_features, code)  # type: ignore[attr-defined]


def int6_gemm(x: torch.Tensor, tiles: torch.Tensor, scales: torch.Tensor, out_features: int, isa: str | None = None) -> torch.Tensor:
    """:func:`int4_gemm` for a Q6_K weight (:func:`~.layout.pack_int6k`, ``w = step * (q - 32)``, a step per 16
    inputs)."""
    ops, code = _ops(isa)
    return ops.int6_gemm(x, tiles, scales, out_features, code)  # type: ignore[attr-defined]


def int4_linear(x: torch.Tensor, tiles: torch.Tensor, scales: torch.Tensor, out_features: int,
                bias: torch.Tensor | None = None, isa: str | None = None) -> torch.Tensor:
    """A packed int4 layer's decode forward in one op: float32 ``x`` ``[rows, in]`` rounded to bfloat16, times the
    weight, the output rounded to bfloat16 (float32 ``[rows, out_features]``) plus ``bias``; the same values as
    ``int4_gemm(x.to(torch.bfloat16), ...).to(torch.bfloat16).float() + bias``, without the small ops."""
    ops, code = _ops(isa)
    return ops.int4_linear(x, tiles, scales, out_features, bias, code)  # type: ignore[attr-defined]


def int8_linear(x: torch.Tensor, tiles: torch.Tensor, scales: torch.Tensor, out_features: int,
                bias: torch.Tensor | None = None, isa: str | None = None) -> torch.Tensor:
    """:func:`int4_linear` for an int8 weight (:func:`~.layout.pack_int8`)."""
    ops, code = _ops(isa)
    return ops.int8_linear(x, tiles, scales, out_features, bias, code)  # type: ignore[attr-defined]


def int5_linear(x: torch.Tensor, tiles: torch.Tensor, scales: torch.Tensor, out_features: int,
                bias: torch.Tensor | None = None, isa: str | None = None) -> torch.Tensor:
    """:func:`int4_linear` for a 5-bit weight (:func:`~.layout.pack_int5`)."""
    ops, code = _ops(isa)
    return ops.int5_linear(x, tiles, scales, out_features, bias, code)  # type: ignore[attr-defined]


def int6_linear(x: torch.Tensor, tiles: torch.Tensor, scales: torch.Tensor, out_features: int,
                bias: torch.Tensor | None = None, isa: str | None = None) -> torch.Tensor:
    """:func:`int4_linear` for a Q6_K weight (:func:`~.layout.pack_int6k`)."""
    ops, code = _ops(isa)
    return ops.int6_linear(x, tiles, scales, out_features, bias, code)  # type: ignore[attr-defined]


def linear_op(kind: str, isa: str | None = None) -> tuple[Any, int]:
    """The op of :func:`int4_linear` (``kind="int4"``), :func:`int5_linear` (``"int5"``) or :func:`int8_linear`
    (``"int8"``; ``"int4k"``: int4's; ``"int6k"``: :func:`int6_linear`) and the code of ``isa``,
    to call with the rest of their arguments bound: a decode step's projection without this module's Python."""
    ops, code = _ops(isa)
    op = {"int4k": "int4", "int6k": "int6"}.get(kind, kind)  # int4 with Q4_K's scales: the int4 op, by their dtype
    return getattr(ops, f"{op}_linear").default, code  # the overload itself: one Python frame less a call


def int4_dequant(tiles: torch.Tensor, scales: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Write the int4 weight (``(q - 8) * step + zero``) into ``out`` ``[out_features, in_features]`` (float32 or
    bfloat16, contiguous) and return it: the dense prefill's weight."""
    _ops("scalar")[0].int4_dequant(tiles, scales, out)  # type: ignore[attr-defined]
    return out


def int5_dequant(tiles: torch.Tensor, scales: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """:func:`int4_dequant` for a 5-bit weight (``(q - 16) * step + zero``)."""
    _ops("scalar")[0].int5_dequant(tiles, scales, out)  # type: ignore[attr-defined]
    return out


def int6_dequant(tiles: torch.Tensor, scales: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """:func:`int4_dequant` for a Q6_K weight (``(q - 32) * step``)."""
    _ops("scalar")[0].int6_dequant(tiles, scales, out)  # type: ignore[attr-defined]
    return out


def int8_unpack(tiles: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Write the int8 weight's integers (unscaled) into ``out`` ``[out_features, in_features]`` and return it."""
    _ops("scalar")[0].int8_unpack(tiles, out)  # type: ignore[attr-defined]
    return out


__all__ = [
    "DECODE_KERNEL_VARIABLE",
    "GROUP",
    "ISAS",
    "ISA_VARIABLE",
    "TILE",
    "available",
    "default_isa",
    "describe",
    "int4_dequant",
    "int4_gemm",
    "int4_linear",
    "int5_dequant",
    "int5_gemm",
    "int5_linear",
    "int6_dequant",
    "int6_gemm",
    "int6_linear",
    "int8_gemm",
    "int8_linear",
    "int8_unpack",
    "linear_op",
    "loaded",
    "pack_int4",
    "pack_int4k",
    "pack_int5",
    "pack_int6k",
    "pack_int8",
    "padded_inputs",
    "supported_isas",
    "tiles_count",
    "unpack_int4",
    "unpack_int4k",
    "unpack_int5",
    "unpack_int6k",
    "unpack_int8",
]
