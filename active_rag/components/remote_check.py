"""Whether a method's components can run on an OpenAI-compatible server (:class:`~active_rag.remote.lm.RemoteLM`):
a server gives token probabilities, never attention, so RIND and the attention queries need a local model."""

from __future__ import annotations

from typing import Any

from ..errors import NeedsLocalModelError
from ..remote.lm import ATTENTION_REFUSAL
from .queries import make_query
from .triggers import make_trigger

__all__ = ["check_remote_method"]


def check_remote_method(trigger: Any, query: Any, method: str | None = None) -> None:
    """Raise :class:`~active_rag.errors.NeedsLocalModelError` (one line) when the trigger or query formulator reads
    attention: what an endpoint cannot give. ``trigger`` / ``query``: names or instances."""
    t = make_trigger(trigger) if isinstance(trigger, str) else trigger
    q = make_query(query) if isinstance(query, str) else query
    if getattr(t, "needs_attention", False) or getattr(q, "needs_attention", False):
        what = f"Method {method!r}" if method else f"Trigger {t.name!r} with query {q.name!r}"
        raise NeedsLocalModelError(what + ": " + ATTENTION_REFUSAL[0].lower() + ATTENTION_REFUSAL[1:])
