"""Find tensors the packages make without naming their device.

A tensor made by ``torch.zeros(n)`` lands on the CPU whatever the model's device; when it meets a CUDA tensor
(a mask applied to the logits, a running maximum filled from attention rows) the run fails on a GPU, though it
passes every CPU test. :class:`DeviceAudit` is a ``TorchFunctionMode`` that records each tensor factory call
made directly from the source of ``active_rag``, ``langchain_active_rag`` or ``llamaindex_active_rag`` without
``device=``; :func:`audited` adds ``torch.Generator()`` calls without a device (a CPU generator cannot sample CUDA
probabilities). The test suite runs every preset, the chat model's sampling, structured output and the bench
under it; ``active-rag doctor`` runs the presets under it on the user's device.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = tuple(str(_ROOT / name) + "/" for name in ("active_rag", "langchain_active_rag", "llamaindex_active_rag"))
FACTORIES = frozenset({torch.zeros, torch.ones, torch.empty, torch.full, torch.arange, torch.tensor, torch.as_tensor,
                       torch.rand, torch.randn, torch.randint, torch.linspace, torch.eye})
_THIS = str(Path(__file__).resolve())


def package_caller(depth: int = 2) -> str | None:
    """``file:line`` of the innermost caller outside torch and this module, when it is the packages' source."""
    frame = sys._getframe(depth)
    while frame is not None and ("/torch/" in frame.f_code.co_filename or frame.f_code.co_filename == _THIS):
        frame = frame.f_back
    if frame is None or not frame.f_code.co_filename.startswith(PACKAGES):
        return None
    return f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno}"


class DeviceAudit(TorchFunctionMode):
    """Records (``unplaced``) every tensor factory call the packages make without ``device=``."""

    def __init__(self) -> None:
        super().__init__()
        self.unplaced: list[str] = []

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func in FACTORIES and "device" not in kwargs:
            where = package_caller()
            if where is not None:
                self.unplaced.append(f"{where} {func.__name__}")
        return func(*args, **kwargs)


@contextmanager
def audited() -> Iterator[DeviceAudit]:
    """The audit for the duration of a ``with`` block, ``torch.Generator`` calls without a device included
    (``torch.Generator`` is swapped for a recording function inside the block, and restored after)."""
    real = torch.Generator
    audit = DeviceAudit()

    def generator(*args: Any, **kwargs: Any) -> torch.Generator:
        if not args and "device" not in kwargs and (where := package_caller()) is not None:
            audit.unplaced.append(f"{where} Generator")
        return real(*args, **kwargs)

    torch.Generator = generator  # type: ignore[assignment,misc]
    try:
        with audit:
            yield audit
    finally:
        torch.Generator = real  # type: ignore[misc]


__all__ = ["FACTORIES", "PACKAGES", "DeviceAudit", "audited", "package_caller"]
