"""A model behind an OpenAI-compatible endpoint: :class:`~active_rag.remote.lm.RemoteLM` (:mod:`active_rag.remote.lm`),
its HTTP client (:mod:`~active_rag.remote.http`), the parsing of its answers (:mod:`~active_rag.remote.parse`),
its token pieces (:mod:`~active_rag.remote.vocab`) and the framework clients it accepts
(:mod:`~active_rag.remote.clients`).

``from active_rag.remote import RemoteLM`` keeps working: the names of :mod:`active_rag.remote.lm` are imported
from here lazily, so importing the HTTP client alone does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    'ATTENTION_REFUSAL': 'lm',
    'RemoteLM': 'lm',
    'RemoteSession': 'lm',
    'check_remote_method': 'lm',
    'load_tokenizer': 'lm',
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
    from .lm import ATTENTION_REFUSAL, RemoteLM, RemoteSession, check_remote_method, load_tokenizer
