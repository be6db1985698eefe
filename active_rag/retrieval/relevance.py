"""How much a passage bears on a question, by the words they share (beyond the papers).

Linked retrieval (:mod:`active_rag.answer.links`) follows the names the read passages mention to their own
passages. Most names a passage mentions are not the bridge a question needs: "Los Angeles", "World War II", the
"Golden Globe Award" a film won. Their articles share few of the question's words, while the bridge's article
shares the relation the question asks about ("government position", "died", "Requires-Python"). :class:`Relevance`
scores a passage by the inverse document frequencies (as BM25's, Robertson & Zaragoza 2009, eq. 3.3) of the
question's stemmed content words it holds, so that every retriever, a vector store's included, is measured with the
same rule; the weights come from the passages the corpus's name index was built from.

``follow_links(..., min_share=s)`` reads a linked passage only when it scores at least ``s`` times the lowest score
among the passages the question retrieved itself. Measured without the model (BM25 top 3, then 3 more passages;
``python research/linked_recall.py --min-share S``), at ``s = 0.2``: linked passages without gold a
question fall from 1.54 to 0.90 on HotpotQA dev over the 20,218-passage union (all gold held: 78.7% either way) and
from 0.91 to 0.51 on its pool; but on 2WikiMultihopQA, whose bridge articles ("the director of film X") share few
of the question's rarest words, every gold passage is held for 74.0% of questions instead of 80.0% (union) and 83.3%
(pool). The noise halves only where the bridges are lost with it, so :data:`MIN_SHARE` is 0: no linked passage is
dropped by default, and the rule is there to measure and to choose per corpus.
"""

from __future__ import annotations

import functools
import math
import re
import threading
import weakref
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from ..text import stop_words
from ..types import Passage

__all__ = ["MIN_SHARE", "Relevance", "relevance_of"]

#: A linked passage is read when it scores at least this share of the question's own lowest-scoring passage (0: all).
MIN_SHARE = 0.0

_WORD = re.compile(r"[^\W_]+")


@functools.lru_cache(maxsize=1)
def _stemmer() -> Any:
    try:
        import Stemmer  # PyStemmer, a core dependency (bm25s' stemmer)
    except ImportError:  # pragma: no cover - installed with the package
        return None
    return Stemmer.Stemmer("english")


@functools.lru_cache(maxsize=1 << 16)
def _stem(word: str) -> str:
    stemmer = _stemmer()
    return stemmer.stemWord(word) if stemmer is not None else word


def terms(text: str) -> set[str]:
    """The stemmed, lower-cased content words of ``text`` (stop words left out)."""
    stop = stop_words()
    return {_stem(w) for w in _WORD.findall(text.lower()) if w not in stop}


def _passage_terms(passage: Passage) -> set[str]:
    return terms(f"{passage.title} {passage.text}" if passage.title else passage.text)


class Relevance:
    """Scores passages for a question by the corpus weights of the words they share (see the module's docstring)."""

    def __init__(self, passages: Iterable[Passage]) -> None:
        df: Counter[str] = Counter()
        n = 0
        for p in passages:
            df.update(_passage_terms(p))
            n += 1
        self.n = n
        self.weights = {w: math.log(1.0 + (n - d + 0.5) / (d + 0.5)) for w, d in df.items()}
        self._unseen = math.log(1.0 + (n + 0.5) / 0.5) if n else 1.0

    def score(self, question: str | set[str], passage: Passage) -> float:
        """The summed weights of the question's terms that ``passage`` holds (a term the corpus lacks weighs most)."""
        asked = terms(question) if isinstance(question, str) else question
        return sum(self.weights.get(w, self._unseen) for w in asked & _passage_terms(passage))

    def bears_on(self, question: str, passage: Passage, read: Sequence[Passage], share: float = MIN_SHARE) -> bool:
        """Whether ``passage`` scores at least ``share`` of the lowest score among ``read``, the passages the question
        retrieved itself (always, when there are none)."""
        if not read:
            return True
        asked = terms(question)
        floor = min(self.score(asked, p) for p in read)
        return self.score(asked, passage) >= share * floor


_built: weakref.WeakKeyDictionary[Any, Relevance] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def relevance_of(name_index: Any) -> Relevance:
    """The :class:`Relevance` of the passages a name index was built from, built once per index."""
    with _lock:
        found = _built.get(name_index)
    if found is None:
        found = Relevance(name_index.passages)
        with _lock:
            _built.setdefault(name_index, found)
    return found
