"""A model behind an OpenAI-compatible endpoint: :class:`~active_rag.remote.lm.RemoteLM` (:mod:`active_rag.remote.lm`),
its HTTP client (:mod:`~active_rag.remote.http`), the parsing of its answers (:mod:`~active_rag.remote.parse`),
its token pieces (:mod:`~active_rag.remote.vocab`) and the framework clients it accepts
(:mod:`~active_rag.remote.clients`).

``from active_rag.remote import RemoteLM``: the model and its session, imported from :mod:`active_rag.remote.lm`
lazily, so importing the HTTP client alone does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    'RemoteLM': 'lm',
    'RemoteSession': 'lm',
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


if TYPE_CHECKING:  # pragma: no cover
    from .lm import RemoteLM, RemoteSession
