"""Optional dependencies: a clear, typed error naming the extra to install when one is missing."""

from __future__ import annotations

import importlib.util

from .errors import ActiveRAGError

__all__ = ["MissingDependencyError", "require", "require_matplotlib"]


class MissingDependencyError(ActiveRAGError, ImportError):
    """An optional dependency is not installed; the message names the extra (or package) that provides it."""


def require(module: str, *, extra: str, purpose: str) -> None:
    """Raise :class:`MissingDependencyError` unless ``module`` can be imported."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise MissingDependencyError(
            f"{purpose} needs {module}, which is not installed: pip install 'active-rag[{extra}]' (or pip install {module})."
        )


def require_matplotlib(purpose: str = "Plotting") -> None:
    """Plots (``active_rag.viz``, the evaluation's PNG plots) need the ``plot`` extra (matplotlib)."""
    require("matplotlib", extra="plot", purpose=purpose)
