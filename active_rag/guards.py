"""Generation guards every method can use: stop when a sentence repeats an earlier one, stop once the answer
sentence is complete, and cut an unfinished sentence before the answer phrase is forced.

Small models loop ("The father of Kasper Schmeichel is Peter Schmeichel." four times until the token cap)
and run past their answer; the papers' models rarely do, and DRAGIN's released code stops as soon as "the
answer is" appears (``AttnWeightRAG.inference``). These are plain text functions of the output so far.
"""

from __future__ import annotations

import re

from .text import sentence_spans

__all__ = ["answer_complete", "last_complete_sentence_end", "repeated_sentence_start"]

_SENTENCE_END = re.compile(r"[.!?][\"')\]]*$")


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


def answer_complete(text: str) -> bool:
    """True once ``text`` holds a finished answer sentence ("So the answer is X." followed by a sentence end or
    a line break), the DRAGIN exemplars' format; see :func:`active_rag.evaluation.answers.has_completed_answer`."""
    from .evaluation.answers import has_completed_answer

    return has_completed_answer(text)


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
