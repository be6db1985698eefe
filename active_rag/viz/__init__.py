"""Plots of why and where an active RAG run retrieved (:mod:`active_rag.viz.plots`) and the token signal table
(:mod:`active_rag.viz.trace`), imported from here lazily: ``from active_rag import viz; viz.plot_token_signals(...)``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    'SIGNALS': 'plots',
    'compare_methods': 'plots',
    'plot_qfs_attention': 'plots',
    'plot_retrieval_timeline': 'plots',
    'plot_token_signals': 'plots',
    'token_signal_table': 'trace',
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


if TYPE_CHECKING:  # pragma: no cover
    from .plots import SIGNALS, compare_methods, plot_qfs_attention, plot_retrieval_timeline, plot_token_signals
    from .trace import token_signal_table
