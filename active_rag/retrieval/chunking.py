"""Split documents into passages for retrieval: paragraph- and sentence-aware chunks of a bounded size, with overlap.

A retriever ranks passages, and the prompt holds ``top_k`` of them: a 40-section handbook indexed as one passage is
either the whole handbook in the prompt or nothing. :func:`chunk_text` cuts a document into chunks of at most
``chunk_tokens`` tokens:

- it breaks between paragraphs (blank lines) where it can: a paragraph that does not fit in what is left of a
  chunk that is already half full starts the next chunk (a Markdown heading goes with the paragraph after it);
- otherwise it breaks between sentences (NLTK punkt, a line break ends a sentence too, so headings and list items
  are sentences of their own), and a sentence longer than a chunk between words;
- consecutive chunks share up to ``overlap`` tokens: the whole sentences that end the previous chunk, so that a
  chunk does not start without the sentence before it (a sentence longer than ``overlap`` is not repeated);
- a chunk is a slice of the document: its line breaks and spacing stay as they were.

Tokens are counted by :func:`count_tokens` (words and punctuation marks, close to a sub-word tokenizer's count of
English prose) unless ``counter=`` gives another one, e.g. ``lambda text: len(tokenizer.encode(text))``.

:func:`chunk_passages` does this for whole-document :class:`~active_rag.types.Passage` objects: a document that fits
in one chunk keeps its id and title; the chunks of a longer one get the id ``"<id>#<k>"`` and the title
``"<title> (<k>/<n>)"`` (``k`` from 1), and ``metadata`` records ``source`` (the document's id), ``chunk`` and
``chunks``. :meth:`BM25Index.from_directory <active_rag.retrieval.bm25.BM25Index.from_directory>` and the CLI's
``--corpus FOLDER`` / ``active-rag index FOLDER`` (``--chunk-tokens``, ``--chunk-overlap``) use it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..errors import InvalidOptionError
from ..types import Passage
from ..validation import check_int

__all__ = [
    "DEFAULT_CHUNK_OVERLAP",
    "DEFAULT_CHUNK_TOKENS",
    "check_chunking",
    "chunk_passages",
    "chunk_text",
    "count_tokens",
]

#: Tokens per chunk by default: about DPR's 100-word Wikipedia passages, which the papers retrieve.
DEFAULT_CHUNK_TOKENS = 128
#: Tokens two consecutive chunks share by default (whole sentences): about one sentence.
DEFAULT_CHUNK_OVERLAP = 32

_TOKEN = re.compile(r"\w+|[^\w\s]")
_PARAGRAPH = re.compile(r"\S(?:.*?\S)?(?=[ \t\r]*\n[ \t\r]*\n|\s*\Z)", re.DOTALL)
_WORD = re.compile(r"\S+")


def count_tokens(text: str) -> int:
    """The default token count: words and punctuation marks (``"Hamlet, Prince"`` is 3 tokens)."""
    return len(_TOKEN.findall(text))


@dataclass(frozen=True)
class _Unit:
    """A piece of the document that is never cut: a sentence, or part of a sentence longer than a chunk."""

    start: int
    end: int
    tokens: int
    paragraph: int


def check_chunking(chunk_tokens: int, overlap: int, *, names: tuple[str, str] = ("chunk_tokens", "overlap")) -> None:
    """:class:`~active_rag.errors.InvalidOptionError` unless ``chunk_tokens >= 0`` (0: no chunking) and
    ``0 <= overlap < chunk_tokens``; ``names``: the options as the caller spells them (``--chunk-tokens``)."""
    size, shared = names
    check_int(size, chunk_tokens, minimum=0, hint="It is the longest passage in tokens, e.g. 128; 0 keeps each file whole")
    check_int(shared, overlap, minimum=0, hint="It is the tokens two consecutive chunks share, e.g. 32")
    if chunk_tokens and overlap >= chunk_tokens:
        raise InvalidOptionError(
            f"{shared} must be smaller than {size}, got {overlap} and {chunk_tokens}: pass e.g. {size} 128 and "
            f"{shared} 32.")


def _sentences(text: str, start: int, end: int) -> list[tuple[int, int]]:
    from ..text import sentence_spans

    return [(start + a, start + b) for a, b in sentence_spans(text[start:end])]


def _units(text: str, chunk_tokens: int, count: Callable[[str], int]) -> list[_Unit]:
    """The sentences of ``text`` (whole paragraphs where they fit in a chunk), and the word runs of a sentence
    longer than a chunk, in order."""
    units: list[_Unit] = []
    number = 0
    for match in _PARAGRAPH.finditer(text):
        spans = [(match.start(), match.end())]
        if count(match.group()) > chunk_tokens:
            spans = _sentences(text, match.start(), match.end()) or spans
        for start, end in spans:
            tokens = count(text[start:end])
            if tokens <= chunk_tokens:
                units.append(_Unit(start, end, tokens, number))
                continue
            words = [(w.start(), w.end()) for w in _WORD.finditer(text, start, end)]
            first = 0
            for k in range(1, len(words) + 1):  # the longest run of words from `first` that fits
                if k == len(words) or count(text[words[first][0]:words[k][1]]) > chunk_tokens:
                    piece = text[words[first][0]:words[k - 1][1]]
                    units.append(_Unit(words[first][0], words[k - 1][1], count(piece), number))
                    first = k
        if not all(line.lstrip().startswith("#") for line in match.group().splitlines() if line.strip()):
            number += 1  # a Markdown heading belongs to the paragraph after it
    return units


def chunk_text(
    text: str,
    *,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    overlap: int = DEFAULT_CHUNK_OVERLAP,
    counter: Callable[[str], int] | None = None,
) -> list[str]:
    """``text`` cut into chunks of at most ``chunk_tokens`` tokens (see the module docs), in order; ``[]`` for a
    blank text, the whole text stripped when ``chunk_tokens`` is 0. A single word longer than a chunk stays whole.

    >>> chunk_text("One two three. Four five six.\\n\\nSeven eight.", chunk_tokens=8, overlap=0)
    ['One two three. Four five six.', 'Seven eight.']
    """
    check_chunking(chunk_tokens, overlap)
    if not text.strip():
        return []
    if chunk_tokens == 0:
        return [text.strip()]
    units = _units(text, chunk_tokens, counter or count_tokens)
    paragraph_tokens: dict[int, int] = {}
    for unit in units:
        paragraph_tokens[unit.paragraph] = paragraph_tokens.get(unit.paragraph, 0) + unit.tokens
    chunks: list[list[_Unit]] = []
    current: list[_Unit] = []
    size = 0
    for unit in units:
        # a paragraph that does not fit in what is left of a half-full chunk starts the next one
        paragraph_break = (bool(current) and unit.paragraph != current[-1].paragraph
                           and size + paragraph_tokens[unit.paragraph] > chunk_tokens and 2 * size >= chunk_tokens)
        if current and (size + unit.tokens > chunk_tokens or paragraph_break):
            chunks.append(current)
            carried: list[_Unit] = []  # the overlap: the last whole sentences of the chunk just closed
            for previous in reversed(current[1:]):
                shared = sum(u.tokens for u in carried) + previous.tokens
                if shared > overlap or shared + unit.tokens > chunk_tokens:
                    break
                carried.insert(0, previous)
            current, size = carried, sum(u.tokens for u in carried)
        current.append(unit)
        size += unit.tokens
    if current:
        chunks.append(current)
    return [text[c[0].start:c[-1].end] for c in chunks]


def chunk_passages(
    passages: Iterable[Passage],
    *,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    overlap: int = DEFAULT_CHUNK_OVERLAP,
    counter: Callable[[str], int] | None = None,
) -> list[Passage]:
    """Whole-document passages cut by :func:`chunk_text`: a document that fits in one chunk stays as it is; the
    chunks of a longer one are ``Passage(id="<id>#<k>", title="<title> (<k>/<n>)")`` with the document's metadata
    and ``source``, ``chunk`` (from 1) and ``chunks`` added. ``chunk_tokens=0`` returns the passages unchanged."""
    check_chunking(chunk_tokens, overlap)
    out: list[Passage] = []
    for p in passages:
        pieces = chunk_text(p.text, chunk_tokens=chunk_tokens, overlap=overlap, counter=counter)
        if len(pieces) <= 1:
            out.append(p)
            continue
        n = len(pieces)
        for k, piece in enumerate(pieces, 1):
            title = f"{p.title} ({k}/{n})" if p.title else f"({k}/{n})"
            out.append(Passage(id=f"{p.id}#{k}", title=title, text=piece,
                               metadata={**p.metadata, "source": p.id, "chunk": k, "chunks": n}))
    return out
