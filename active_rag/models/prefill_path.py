"""Which path a packed layer's prefill takes: a dense product, or the packed kernel a decode step runs (beyond the
papers).

A prefill multiplies a prompt's hundreds of rows by each weight. Where the CPU has AMX, torch's bfloat16 product
(oneDNN's AMX kernels) beats active-rag's kernel, so the layer dequantises its weight and multiplies densely
(:meth:`~active_rag.models.quantized.PackedLinear.forward`). Elsewhere it does not: on the 1.5B model's MLP shapes
at 939 rows, measured on one 2-core Xeon (``results/bench/kernel-prefill/``), the packed kernel (activations
quantised to int8, integer dot products) ran at 280-507 GFLOP/s against 135-165 for oneDNN's bfloat16 product with
AMX turned off (AVX512-BF16), and at 154-212 against 118-157 for float32 with the CPU held to AVX2; with AMX the
dense product ran at 885-1,566. A 939-token prefill of the 1.5B model without AMX: 130-132 tokens a second against
46-52. So a prefill takes the kernel's path wherever AMX is not in use, as llama.cpp's prefill quantises its
activations too.

:data:`VARIABLE` chooses: ``kernel`` or ``dense`` (``auto``, the default: dense only with AMX). The kernel's path
rounds the prompt's activations to int8 in groups of 32, as every decode step does: its logits differ from the
dense product's within the decode kernel's bound, so evaluation rows written with it get keys of their own
(:func:`active_rag.evaluation.method_engines._engine_key`), and ``ACTIVE_RAG_PREFILL=dense`` resumes rows written
before.
"""

from __future__ import annotations

import os

import torch

from ..errors import InvalidOptionError

__all__ = ["VARIABLE", "amx_bfloat16", "kernel_prefill", "prefills_with_kernel"]

VARIABLE = "ACTIVE_RAG_PREFILL"
"""Environment variable: ``kernel`` (every prefill through the packed kernel), ``dense`` (dequantise and multiply),
or ``auto`` (the default: dense where torch's bfloat16 products run on AMX)."""

_ONEDNN_CAPS = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")


def amx_bfloat16() -> bool:
    """Whether torch's bfloat16 matrix products run on AMX here: the CPU has AMX tiles, torch runs its AVX-512 code,
    and oneDNN is not held below AMX (``ONEDNN_MAX_CPU_ISA``, the way to act as a CPU without it)."""
    if torch.backends.cpu.get_cpu_capability() != "AVX512":
        return False
    if not bool(getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)()):
        return False
    cap = next((os.environ[name] for name in _ONEDNN_CAPS if os.environ.get(name)), "").strip().upper()
    return cap in ("", "ALL", "DEFAULT") or "AMX" in cap


def kernel_prefill() -> bool:
    """Whether a packed layer that decodes with active-rag's kernel prefills with it too (:data:`VARIABLE`; the
    module docstring). :class:`~active_rag.errors.InvalidOptionError` (a ``ValueError``) naming the variable for a value
    it does not know."""
    choice = os.environ.get(VARIABLE, "").strip().lower()
    if choice in ("", "auto"):
        return not amx_bfloat16()
    if choice in ("kernel", "packed"):
        return True
    if choice == "dense":
        return False
    raise InvalidOptionError(f"{VARIABLE} must be kernel, dense or auto, got {choice!r}")


def prefills_with_kernel(model: torch.nn.Module) -> bool:
    """Whether ``model``'s prompts are prefilled through active-rag's kernel: :func:`kernel_prefill` holds and one
    of its packed layers (:class:`~active_rag.models.quantized.PackedLinear`, read by its ``uses_kernel``) decodes
    with that kernel (what ``doctor`` and ``bench --suite llamacpp`` report)."""
    return kernel_prefill() and any(getattr(m, "uses_kernel", False) for m in model.modules())
