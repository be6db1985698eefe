"""Answer normalisation: how two answers are compared as text (SQuAD v1.1's rule).

The evaluation scores answers with it (:mod:`active_rag.evaluation.metrics`), and the answer check reads whether an
answer is found in its passages with it (:mod:`active_rag.answer.check`).
"""

from __future__ import annotations

import re
import string

__all__ = ["normalize_answer"]

_PUNCTUATION = frozenset(string.punctuation)  # ASCII only, exactly as the SQuAD script
_ARTICLES_RE = re.compile(r"\b(a|an|the)\b")


def normalize_answer(s: str) -> str:
    """SQuAD v1.1 answer normalisation: lowercase, drop ASCII punctuation, articles and extra whitespace.

    Same steps in the same order as ``normalize_answer`` of the official SQuAD v1.1 script:
    ``white_space_fix(remove_articles(remove_punc(lower(s))))``. Punctuation is ``string.punctuation``
    (ASCII), so Unicode dashes and quotes such as "–" or "’" are kept; articles are removed only as whole
    words ("theatre" stays), and each removed article leaves a space that the whitespace step collapses.
    """
    text = s.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES_RE.sub(" ", text)
    return " ".join(text.split())
