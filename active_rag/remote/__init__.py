"""A model behind an OpenAI-compatible endpoint: :class:`~active_rag.remote.lm.RemoteLM` (:mod:`active_rag.remote.lm`),
its HTTP client (:mod:`~active_rag.remote.http`), the parsing of its answers (:mod:`~active_rag.remote.parse`),
its token pieces (:mod:`~active_rag.remote.vocab`) and the framework clients it accepts
(:mod:`~active_rag.remote.clients`).

``from active_rag.remote import RemoteLM`` keeps working: the names of :mod:`active_rag.remote.lm` are imported
from here lazily, so importing the HTTP client alone does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    'ATTENTION_REFUSAL': 'lm',
    'RemoteLM': 'lm',
    'RemoteSession': 'lm',
    'check_remote_method': 'lm',
    'load_tokenizer': 'lm',
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


if TYPE_CHECKING:  # pragma: no cover
    from .lm import ATTENTION_REFUSAL, RemoteLM, RemoteSession, check_remote_method, load_tokenizer
