"""Where a model runs: ``device="auto" | "cpu" | "cuda[:N]" | "mps"`` and its default dtype."""

from __future__ import annotations

from typing import Any

import torch

from ..errors import InvalidOptionError

DEVICES = ("auto", "cpu", "cuda", "mps")
DTYPES = ("auto", "float32", "bfloat16", "float16")


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """``"auto"`` picks a CUDA GPU when present, else Apple's ``mps``, else the CPU; an explicit device
    that is not available raises :class:`~active_rag.errors.InvalidOptionError` naming the fix."""
    if isinstance(device, torch.device):
        return device
    text = (device or "auto").strip().lower()
    if text == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        where = torch.device(text)
    except RuntimeError:
        raise InvalidOptionError(
            f"device must be one of {', '.join(DEVICES)} (or cuda:N), got {device!r}."
        ) from None
    if where.type == "cuda" and not torch.cuda.is_available():
        raise InvalidOptionError(f"device {device!r} was asked for, but torch sees no CUDA GPU here: use --device cpu or auto.")
    if where.type == "cuda" and where.index is not None and where.index >= torch.cuda.device_count():
        raise InvalidOptionError(f"device {device!r} does not exist: torch sees {torch.cuda.device_count()} GPU(s).")
    if where.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise InvalidOptionError(f"device {device!r} was asked for, but MPS is not available here: use --device cpu or auto.")
    if where.type not in ("cpu", "cuda", "mps"):
        raise InvalidOptionError(f"device must be one of {', '.join(DEVICES)} (or cuda:N), got {device!r}.")
    return where


def resolve_dtype(dtype: Any, device: torch.device) -> torch.dtype:
    """``None``/``"auto"``: bfloat16 on a CUDA GPU that supports it, float32 elsewhere; else the named floating
    dtype (``"bfloat16"``, ``"torch.float16"``) or the ``torch.dtype`` given. The one dtype check of active-rag:
    the CLI's ``--dtype``, :meth:`ActiveLM.load <active_rag.decoding.model.ActiveLM.load>` and
    :func:`~active_rag.models.loading.load_pretrained` (whose ``None`` means float32) all use it."""
    if dtype is None or (isinstance(dtype, str) and dtype.strip().lower() == "auto"):
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    value = getattr(torch, str(dtype).strip().removeprefix("torch."), None)
    if not isinstance(value, torch.dtype) or not value.is_floating_point:
        raise InvalidOptionError(f"Unknown dtype {dtype!r}: dtype must be one of {', '.join(DTYPES)} (or a floating torch.dtype).")
    return value


__all__ = ["DEVICES", "DTYPES", "resolve_device", "resolve_dtype"]
