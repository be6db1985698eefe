"""Stop sequences for streamed generation: cut the output before the first stop string, and never release
text that may turn out to be the start of one.

Used by the framework LLM wrappers (``llamaindex_active_rag.ActiveHFLLM``; ``ChatActiveHF`` has the same
contract): a stop sequence may span several tokens, so a streamed piece of text that could begin a stop
sequence is held back until the next token shows whether it does.
"""

from __future__ import annotations

from collections.abc import Sequence

from .types import TokenStep

__all__ = ["StopFilter"]


class StopFilter:
    """Feed tokens with :meth:`push`; it returns the ``(text, step)`` pieces safe to release.

    A piece's text is the token's text, cut short for the token that contains the start of a stop
    sequence (which ends the output: :attr:`stopped` becomes ``True``). :meth:`flush` releases what is
    held back once generation ended without a stop sequence. ``text`` is everything generated so far.
    """

    def __init__(self, stops: Sequence[str] | None) -> None:
        self.stops = [s for s in (stops or ()) if s]
        self.text = ""
        self.pending: list[tuple[TokenStep, int, int]] = []  # (step, start, end) not yet released
        self.stopped = False

    def push(self, step: TokenStep) -> list[tuple[str, TokenStep]]:
        start = len(self.text)
        self.text += step.text
        self.pending.append((step, start, len(self.text)))
        if not self.stops:
            return self._release(len(self.text))
        hits = [i for i in (self.text.find(s, max(0, start - len(s))) for s in self.stops) if i >= 0]
        if hits:
            self.stopped = True
            return self._release(min(hits), partial=True)
        hold = 0
        for s in self.stops:
            for n in range(min(len(s) - 1, len(self.text)), hold, -1):
                if self.text.endswith(s[:n]):
                    hold = n
                    break
        return self._release(len(self.text) - hold)

    def flush(self) -> list[tuple[str, TokenStep]]:
        """Release everything held back (generation ended without a stop sequence)."""
        return self._release(len(self.text))

    def _release(self, limit: int, partial: bool = False) -> list[tuple[str, TokenStep]]:
        out: list[tuple[str, TokenStep]] = []
        keep: list[tuple[TokenStep, int, int]] = []
        for step, start, end in self.pending:
            if end <= limit:
                out.append((self.text[start:end], step))
            elif partial and start < limit:
                out.append((self.text[start:limit], step))
            elif not partial:
                keep.append((step, start, end))
        self.pending = keep
        return out
