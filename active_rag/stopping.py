"""When generation stops: the stop rules every method uses, and the stop sequences of the framework wrappers.

Stop rules, plain text functions of the output so far (:class:`~active_rag.engine.loop.ActiveRAG` applies them):

- :func:`has_completed_answer` (:data:`COMPLETED_ANSWER_RE`): the answer sentence is finished ("So the answer
  is X." followed by a new sentence or a line break, the DRAGIN exemplars' format), so generation may stop; it
  waits one token past a final "." ("3." may become "3.10"), and :func:`completed_answer_end` says where the
  answer ended, so that the caller cuts that token off again.
  DRAGIN's released code stops as soon as "the answer is" appears (``AttnWeightRAG.inference``).
- :func:`repeated_sentence_start`: a sentence repeats an earlier one. Small models loop ("The father of Kasper
  Schmeichel is Peter Schmeichel." four times until the token cap); the papers' models rarely do.
- :func:`last_complete_sentence_end`: where to cut an unfinished sentence before the answer phrase is forced.
- :func:`may_repeat_start`: where the text a streamed answer may send ends, before a sentence that the
  repetition guard may still cut (:class:`~active_rag.answer_stream.AnswerStream`).

Stop sequences: :class:`StopFilter` cuts streamed output before the first stop string and never releases text
that may turn out to be the start of one. Used by the framework LLM wrappers
(``llamaindex_active_rag.ActiveHFLLM``; ``ChatActiveHF`` has the same contract).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .answer_end import COMPLETED_ANSWER_PATTERN, completed_answer_end
from .text import sentence_spans
from .types import TokenStep

__all__ = [
    "COMPLETED_ANSWER_RE",
    "StopFilter",
    "completed_answer_end",
    "has_completed_answer",
    "last_complete_sentence_end",
    "may_repeat_start",
    "repeated_sentence_start",
]

# ------------------------------------------------------------------------------------------- stop rules

#: A completed answer sentence: the answer phrase ("the answer is", also "the final answer is", any case), the
#: answer, then its end (:mod:`active_rag.answer_end`): a line break, or a sentence-end mark followed by spaces and
#: the start of a new sentence. A "." after an initial ("J."), an abbreviation ("U.S.", "Inc.", "Mr."), inside a
#: decimal or version ("3.10", "v2.1"), an ellipsis or an open quote does not end it, and a mark at the very end of
#: the text waits for the next token. The match ends just after the end mark, or after the line break.
COMPLETED_ANSWER_RE = COMPLETED_ANSWER_PATTERN

_SENTENCE_END = re.compile(r"[.!?][\"')\]]*$")


def has_completed_answer(text: str) -> bool:
    """True when ``text`` holds a finished answer sentence (see :data:`COMPLETED_ANSWER_RE`), so generation may stop.

    Check only the generated text, not a prompt whose exemplars contain answer sentences. The text after the end
    mark decides: "So the answer is Python 3." is not finished (the next token may be "10"), "... 3.10. It" and
    "... 3.10.\n" are; the caller cuts the extra token off again (:func:`completed_answer_end` says where). An
    answer made of a single capital letter ("So the answer is B.") counts as finished only at a newline, because
    "B." could be an initial; end-of-text without a period does not count either (the answer may still be growing).
    """
    return COMPLETED_ANSWER_RE.search(text) is not None


def _norm(sentence: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", sentence.lower()).split())


def repeated_sentence_start(text: str) -> int | None:
    """Character offset of the first complete sentence of ``text`` that repeats an earlier one (same words,
    ignoring case and punctuation), or ``None``. Only sentences followed by more text or ending in ``.!?``
    count, so a sentence still being written is never judged."""
    seen: set[str] = set()
    spans = sentence_spans(text)
    for n, (start, end) in enumerate(spans):
        sentence = text[start:end]
        complete = n + 1 < len(spans) or _SENTENCE_END.search(sentence.rstrip()) is not None
        key = _norm(sentence)
        if not key or not complete:
            continue
        if key in seen:
            return start
        seen.add(key)
    return None


def may_repeat_start(text: str) -> int | None:
    """Character offset of the first sentence of ``text`` that repeats an earlier one or, unfinished, may still
    repeat one (its words so far begin an earlier complete sentence), or ``None``: text before it is safe from
    the repetition guard's cut (:func:`repeated_sentence_start` judges the finished output)."""
    seen: list[str] = []
    spans = sentence_spans(text)
    for n, (start, end) in enumerate(spans):
        sentence = text[start:end]
        complete = n + 1 < len(spans) or _SENTENCE_END.search(sentence.rstrip()) is not None
        key = _norm(sentence)
        if complete:
            if key and key in seen:
                return start
            if key:
                seen.append(key)
        elif any(earlier.startswith(key) for earlier in seen):
            return start
    return None


def last_complete_sentence_end(text: str) -> int:
    """Character offset just after the last sentence of ``text`` that ends with ``.!?`` (or a line break);
    0 when no sentence is complete. Used to force "So the answer is" after a complete sentence only."""
    end = 0
    for start, stop in sentence_spans(text):
        if _SENTENCE_END.search(text[start:stop].rstrip()):
            end = stop
    if "\n" in text:
        end = max(end, text.rstrip("\n").rfind("\n") + 1 if text.rstrip("\n").rfind("\n") >= 0 else 0)
    return end


# --------------------------------------------------------------------------------------- stop sequences


class StopFilter:
    """Feed tokens with :meth:`push`; it returns the ``(text, step)`` pieces safe to release.

    A stop sequence may span several tokens, so a streamed piece of text that could begin a stop sequence is
    held back until the next token shows whether it does. A piece's text is the token's text, cut short for
    the token that contains the start of a stop sequence (which ends the output: :attr:`stopped` becomes
    ``True``). :meth:`flush` releases what is held back once generation ended without a stop sequence.
    ``text`` is everything generated so far.
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
