"""Text helpers: NLTK punkt sentence splitting (FLARE, App. A), spaCy stop words (DRAGIN Eq. 4), and the
grouping of sub-word tokens into words."""

from __future__ import annotations

import functools
import importlib.util
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

_SENTENCE_END = re.compile(r"[.!?\n]")

#: Verbs that open a yes/no question ("Is ...", "Did ...", "Was A or B born first?").
AUXILIARIES = frozenset("is are was were do does did can could has have had will would should".split())
#: Words that open a question asking for something ("Who ...", "Which ...", "How ...").
WH_WORDS = frozenset("who whom whose what which when where why how".split())


@functools.lru_cache(maxsize=1)
def _punkt() -> Any:
    """English punkt from NLTK's data path, else the copy llama-index-core ships, else untrained punkt."""
    import nltk
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    try:
        return nltk.tokenize.PunktTokenizer("english")
    except LookupError:
        pass
    spec = importlib.util.find_spec("llama_index.core")
    if spec is not None and spec.submodule_search_locations:
        cache = Path(next(iter(spec.submodule_search_locations))) / "_static" / "nltk_cache"
        if (cache / "tokenizers" / "punkt_tab").exists():
            if str(cache) not in nltk.data.path:
                nltk.data.path.append(str(cache))
            try:
                return nltk.tokenize.PunktTokenizer("english")
            except LookupError:
                pass
    warnings.warn(
        "NLTK's English punkt model was not found (nltk.download('punkt_tab') or install llama-index-core); "
        "falling back to untrained punkt sentence splitting.",
        stacklevel=2,
    )
    return PunktSentenceTokenizer()


def split_sentences(text: str) -> list[str]:
    """Split into sentences with punkt; line breaks also end a sentence."""
    out: list[str] = []
    for line in text.split("\n"):
        if line.strip():
            out.extend(s for s in _punkt().tokenize(line) if s.strip())
    return out


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` character spans of the sentences of ``text`` (punkt; a line break ends a sentence)."""
    out: list[tuple[int, int]] = []
    offset = 0
    for line in text.split("\n"):
        if line.strip():
            out.extend((offset + a, offset + b) for a, b in _punkt().span_tokenize(line))
        offset += len(line) + 1
    return out


def first_sentence_end(text: str) -> int | None:
    """Character offset just after the first sentence of ``text`` when a second one has begun, else ``None``.

    A sentence counts as complete only once something follows it, so a look-ahead can stop as soon as
    its first sentence is known (FLARE generates 64 tokens and keeps the first sentence, App. A)."""
    if not _SENTENCE_END.search(text):
        return None
    newline = text.find("\n", len(text) - len(text.lstrip()))
    head = text if newline < 0 else text[:newline]
    if head.strip():
        spans = list(_punkt().span_tokenize(head))
        # a list marker such as "1." is not a sentence of its own: extend to the first span with a letter
        k = 0
        while k < len(spans) and not any(c.isalpha() for c in head[: spans[k][1]]):
            k += 1
        if k + 1 < len(spans):
            return spans[k][1]
    if newline >= 0 and text[:newline].strip() and text[newline:].strip():
        return newline
    return None


@functools.lru_cache(maxsize=1)
def stop_words() -> frozenset[str]:
    """spaCy's English stop words (no spaCy model needed), lower-cased."""
    from spacy.lang.en.stop_words import STOP_WORDS

    return frozenset(w.lower() for w in STOP_WORDS)


def is_content_word(word: str) -> bool:
    """DRAGIN's ``s_i`` (Eq. 4): 0 for stop words; punctuation-only pieces carry no content either."""
    bare = word.strip().lower().strip("\"`.,;:!?()[]{}")  # keeps apostrophes: "'s" is a spaCy stop word
    w = bare.strip("'")
    return bool(w) and any(c.isalnum() for c in w) and w not in stop_words() and bare not in stop_words() and not w.startswith("<|")


def word_groups(pieces: Sequence[str]) -> list[list[int]]:
    """Group token indices into words: a piece that starts with whitespace or punctuation starts a word.

    An empty piece (the leading bytes of a character split over byte-level tokens, whose text goes to
    the token that completes the character) belongs to the word of the next non-empty piece."""
    groups: list[list[int]] = []
    pending: list[int] = []  # empty pieces waiting for the piece that completes their character
    previous = ""  # the last non-empty piece
    for i, piece in enumerate(pieces):
        if not piece:
            pending.append(i)
            continue
        starts_word = not groups or piece[0].isspace() or not piece[0].isalnum() or not previous[-1].isalnum()
        if starts_word:
            groups.append([*pending, i])
        else:
            groups[-1].extend([*pending, i])
        pending = []
        previous = piece
    if pending:
        if groups:
            groups[-1].extend(pending)
        else:
            groups.append(pending)
    return groups


def word_of(pieces: Sequence[str], group: Sequence[int]) -> str:
    return "".join(pieces[i] for i in group).strip()


# -- tokens (anything with a .text, e.g. TokenStep) -----------------------------------------------------


def tokens_within(steps: Sequence[Any], chars: int) -> int:
    """How many leading tokens of ``steps`` end within their first ``chars`` characters."""
    keep, total = 0, 0
    while keep < len(steps) and total + len(steps[keep].text) <= chars:
        total += len(steps[keep].text)
        keep += 1
    return keep


def word_start(steps: Sequence[Any], index: int) -> int:
    """Index of the first token of the word that holds ``steps[index]`` (truncation never cuts a word)."""
    if not steps:
        return 0
    index = min(max(index, 0), len(steps) - 1)
    for group in word_groups([s.text for s in steps]):
        if index in group:
            return group[0]
    return index
