"""Plots of why and where an active RAG run retrieved (:mod:`active_rag.viz.plots`) and the token signal table
(:mod:`active_rag.viz.trace`), imported from here lazily: ``from active_rag import viz; viz.plot_token_signals(...)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    'SIGNALS': 'plots',
    'compare_methods': 'plots',
    'plot_qfs_attention': 'plots',
    'plot_retrieval_timeline': 'plots',
    'plot_token_signals': 'plots',
    'token_signal_table': 'trace',
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


if TYPE_CHECKING:  # pragma: no cover
    from .plots import SIGNALS, compare_methods, plot_qfs_attention, plot_retrieval_timeline, plot_token_signals
    from .trace import token_signal_table
