"""The ``active-rag`` command line (:mod:`active_rag.cli.commands`): ``active_rag.cli:main`` is its entry point,
``python -m active_rag.cli`` runs it. The ``calibrate`` command (:mod:`~active_rag.cli.calibrate`), the tables of
``methods`` and the progress line (:mod:`~active_rag.cli.output`), ``doctor`` (:mod:`~active_rag.cli.doctor`) and
the default model of ``ask`` (:mod:`~active_rag.cli.ask_defaults`) are modules of their own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    'main': 'commands',
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


if TYPE_CHECKING:  # pragma: no cover
    from .commands import main
