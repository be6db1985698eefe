"""Where the answer is in an answer's text: the span after the last "the answer is" (DRAGIN App. B's answer
sentence). :attr:`ActiveRAGResult.short_answer <active_rag.types.ActiveRAGResult.short_answer>`, the answer check
(:mod:`active_rag.methods.answer_check`) and the answer options read it; a plain-text module below all three."""

from __future__ import annotations

import re

__all__ = ["ANSWER_IS_RE", "answer_span"]

#: "the answer is" as words (also "the final answer is"); the answer is what follows the last one.
ANSWER_IS_RE = re.compile(r"\bthe\s+(?:final\s+)?answer\s+is\b", re.IGNORECASE)
_LEADING = " \t:\n\"'“‘"
_TRAILING = " \t.\"'”’"

#: a sentence end, not after an initial ("So the answer is F. W. Murnau.")
_SENTENCE_END = re.compile(r"(?<!\b[A-Z])[.!?](?=\s|$)")


def answer_span(text: str) -> tuple[int, int] | None:
    """Character span ``[start, end)`` of the answer in ``text``: after the last "the answer is", to the end of
    its line or sentence, without a leading ":" or quotes and a trailing period; ``None`` without an answer."""
    matches = list(ANSWER_IS_RE.finditer(text))
    if not matches:
        return None
    start = matches[-1].end()
    while start < len(text) and text[start] in _LEADING:
        start += 1
    end = text.find("\n", start)
    end = len(text) if end < 0 else end
    sentence = _SENTENCE_END.search(text[start:end])
    if sentence is not None and sentence.start() > 0:
        end = start + sentence.start()
    while end > start and text[end - 1] in _TRAILING:
        end -= 1
    return (start, end) if end > start else None
