"""Where the answer is in an answer's text: the span after the last "the answer is" (DRAGIN App. B's answer
sentence). :attr:`ActiveRAGResult.short_answer <active_rag.types.ActiveRAGResult.short_answer>`, the answer check
(:mod:`active_rag.answer.check`) and the answer options read it; a plain-text module below all three."""

from __future__ import annotations

import re

from .answer_end import answer_body_end, keeps_period

__all__ = ["ANSWER_IS_RE", "answer_span"]

#: "the answer is" as words (also "the final answer is"); the answer is what follows the last one.
ANSWER_IS_RE = re.compile(r"\bthe\s+(?:final\s+)?answer\s+is\b", re.IGNORECASE)
_LEADING_SPACE = " \t:\n"
_LEADING = " \t:\n\"'“‘"
_TRAILING = " \t\n\"'”’"


def answer_span(text: str) -> tuple[int, int] | None:
    """Character span ``[start, end)`` of the answer in ``text``: after the last "the answer is", to the end of
    its line or sentence, without a leading ":" or quotes and a trailing full stop; ``None`` without an answer.

    The sentence ends by the rule of :mod:`active_rag.answer_end`, so the answer keeps its initials, decimals,
    versions, abbreviations, ellipses and quoted titles ("J. Nick Koston", "3.10", "v2.1", "U.S.", "Apple Inc.",
    "Mr. Smith Goes to Washington"); a final "." is dropped only when it is a full stop ("Koston." but not
    "U.S.")."""
    matches = list(ANSWER_IS_RE.finditer(text))
    if not matches:
        return None
    start = matches[-1].end()
    while start < len(text) and text[start] in _LEADING_SPACE:
        start += 1
    end = text.find("\n", start)
    end = len(text) if end < 0 else end
    end = answer_body_end(text, start, end, final=True) or end  # from its opening quote: a quote is one piece
    while start < end and text[start] in _LEADING:
        start += 1
    while end > start:
        if text[end - 1] in _TRAILING:
            end -= 1
        elif text[end - 1] == "." and not keeps_period(text[start:end]):
            end -= 1
        else:
            break
    return (start, end) if end > start else None
