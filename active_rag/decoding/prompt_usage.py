"""How many prompt tokens the sessions opened in a block read from the prefix cache and how many they computed."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["PromptUsage", "count_prompt_tokens", "current_usage"]


@dataclass
class PromptUsage:
    """Prompt tokens of the sessions opened while counting (see :func:`count_prompt_tokens`): ``cached``
    came from the prefix cache, ``prefilled`` were computed."""

    cached: int = 0
    prefilled: int = 0
    sessions: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"cached": self.cached, "prefilled": self.prefilled, "sessions": self.sessions}


_USAGE: contextvars.ContextVar[PromptUsage | None] = contextvars.ContextVar("active_rag_usage", default=None)


@contextlib.contextmanager
def count_prompt_tokens(usage: PromptUsage) -> Iterator[PromptUsage]:
    """Add the prompt tokens of every session opened in this block (this thread/task) to ``usage``."""
    token = _USAGE.set(usage)
    try:
        yield usage
    finally:
        _USAGE.reset(token)


def current_usage() -> PromptUsage | None:
    """The :class:`PromptUsage` this thread/task counts into, if any."""
    return _USAGE.get()
