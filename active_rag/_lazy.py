"""Lazy exports for a package's ``__init__`` (PEP 562): its public names are imported from their modules on first
use, so that importing the package (or a light module of it) does not import torch."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of ``package`` whose public names ``exports`` maps to the
    module (relative to the package) that defines each: ``__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)``.
    A name is imported once, then held in the package's namespace."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{module}", package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exports})

    return __getattr__, __dir__
