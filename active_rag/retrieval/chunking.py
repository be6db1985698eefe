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

A chunk cut from the middle of a document does not say which document it is: a ``License: MIT`` line in chunk 2 of
a package's page shares no word with "What license does tenacity use?" once the chunk leaves its title behind (a
LangChain ``Document`` or a vector store keeps the text only). With ``identity=`` (a function of the document, e.g.
:func:`identity_line`), every chunk after the first starts with a line naming its document (``tenacity.md — Name:
tenacity``): it is part of the passage's ``text``, so BM25, an embedding model and the model that reads the prompt
all see it, and the trace records it; ``metadata["prefix"]`` holds that line, so the part cut from the document is
``text[len(prefix) + 1:]``. The first chunk holds the document's opening, which names it already. The line names the
document and no more: a header's ``Summary`` on every chunk made BM25 rank a document's other chunks above the one
a question quoting that summary needs (``results/chunking/pydocs.md``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ..errors import InvalidOptionError
from ..types import Passage
from ..validation import check_int

__all__ = [
    "DEFAULT_CHUNK_OVERLAP",
    "DEFAULT_CHUNK_TOKENS",
    "IDENTITY_FIELDS",
    "check_chunking",
    "chunk_passages",
    "chunk_text",
    "count_tokens",
    "default_overlap",
    "document_header",
    "identity_line",
]

#: Tokens per chunk by default. On a folder of package pages (``results/chunking/pydocs.md``) BM25 finds the chunk
#: holding the answer in its first 3 for 86% of the questions at 256 tokens, 74% at 128 (DPR's 100-word passages)
#: and 85% at 384; 3 chunks of 256 tokens are about as long as 6 of 128, which find it for 82%.
DEFAULT_CHUNK_TOKENS = 256
#: Tokens two consecutive chunks share by default (whole sentences): a quarter of the chunk (:func:`default_overlap`),
#: a few sentences; the best of 0, 32 and 64 there.
DEFAULT_CHUNK_OVERLAP = 64


def default_overlap(chunk_tokens: int) -> int:
    """The overlap used when none is given: a quarter of ``chunk_tokens`` (64 of the default 256, 32 of 128)."""
    return chunk_tokens // 4 if isinstance(chunk_tokens, int) and not isinstance(chunk_tokens, bool) else 0

#: The header fields that name a document, in the order an identity line gives them (:func:`identity_line`).
IDENTITY_FIELDS = ("Title", "Name")
#: The most words of one header field an identity line repeats.
_IDENTITY_WORDS = 16

_TOKEN = re.compile(r"\w+|[^\w\s]")
_TITLE_LINE = re.compile(r"#{1,6}[ \t]+(?P<title>.*?)[ \t#]*")
_FIELD_LINE = re.compile(r"(?P<key>[A-Za-z][A-Za-z0-9_-]{0,40}):[ \t]+(?P<value>\S.*?)[ \t]*")
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
    overlap: int | None = None,
    counter: Callable[[str], int] | None = None,
) -> list[str]:
    """``text`` cut into chunks of at most ``chunk_tokens`` tokens (see the module docs), in order; ``[]`` for a
    blank text, the whole text stripped when ``chunk_tokens`` is 0. A single word longer than a chunk stays whole.
    ``overlap=None``: a quarter of ``chunk_tokens`` (:func:`default_overlap`).

    >>> chunk_text("One two three. Four five six.\\n\\nSeven eight.", chunk_tokens=8, overlap=0)
    ['One two three. Four five six.', 'Seven eight.']
    """
    overlap = default_overlap(chunk_tokens) if overlap is None else overlap
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


def document_header(text: str) -> tuple[str, dict[str, str]]:
    """The header a document opens with: its first line's Markdown title (``# tenacity 9.2.1``; ``""`` when it
    opens otherwise) and the ``Key: value`` field lines right after it (``Name: tenacity``), up to the first line
    that is not one (the first of a repeated key wins).

    >>> document_header("# tenacity 9.2.1\\n\\nName: tenacity\\nSummary: Retry code\\n\\nTenacity is ...")
    ('tenacity 9.2.1', {'Name': 'tenacity', 'Summary': 'Retry code'})
    """
    lines = text.strip().splitlines()
    title = ""
    i = 0
    if lines and (match := _TITLE_LINE.fullmatch(lines[0].strip())):
        title, i = match.group("title"), 1
        while i < len(lines) and not lines[i].strip():
            i += 1
    fields: dict[str, str] = {}
    for line in lines[i:]:
        match = _FIELD_LINE.fullmatch(line.strip())
        if match is None:
            break
        fields.setdefault(match.group("key"), match.group("value"))
    return title, fields


def identity_line(name: str, text: str, fields: Sequence[str] = IDENTITY_FIELDS) -> str:
    """A line that says which document ``text`` is: ``name`` (its file name), then the header ``fields`` it has
    (:func:`document_header`; :data:`IDENTITY_FIELDS` by default), or else its Markdown title, each cut to 16 words.

    >>> identity_line("tenacity.md", "# tenacity 9.2.1\\n\\nName: tenacity\\nSummary: Retry code until it succeeds")
    'tenacity.md — Name: tenacity'
    >>> identity_line("notes/setup.md", "# Setting up the build server\\n\\nFirst install ...")
    'notes/setup.md — Setting up the build server'
    """
    title, header = document_header(text)
    parts = [f"{key}: {_cut(header[key])}" for key in fields if key in header]
    if not parts and title:
        parts = [_cut(title)]
    return f"{name} — {'; '.join(parts)}" if parts else name


def _cut(value: str) -> str:
    words = value.split()
    return " ".join(words[:_IDENTITY_WORDS]) + (" …" if len(words) > _IDENTITY_WORDS else "")


def chunk_passages(
    passages: Iterable[Passage],
    *,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    overlap: int | None = None,
    counter: Callable[[str], int] | None = None,
    identity: Callable[[Passage], str] | None = None,
) -> list[Passage]:
    """Whole-document passages cut by :func:`chunk_text`: a document that fits in one chunk stays as it is; the
    chunks of a longer one are ``Passage(id="<id>#<k>", title="<title> (<k>/<n>)")`` with the document's metadata
    and ``source``, ``chunk`` (from 1) and ``chunks`` added. ``chunk_tokens=0`` returns the passages unchanged.

    ``identity``: a function giving the line that names a document (e.g. ``lambda p: identity_line(p.id,
    p.text)``); every chunk after the first then starts with that line and a line break (not counted in
    ``chunk_tokens``), and ``metadata["prefix"]`` holds it (see the module docs). ``overlap=None``: a quarter of
    ``chunk_tokens``."""
    overlap = default_overlap(chunk_tokens) if overlap is None else overlap
    check_chunking(chunk_tokens, overlap)
    out: list[Passage] = []
    for p in passages:
        pieces = chunk_text(p.text, chunk_tokens=chunk_tokens, overlap=overlap, counter=counter)
        if len(pieces) <= 1:
            out.append(p)
            continue
        n = len(pieces)
        prefix = " ".join(identity(p).split()) if identity is not None else ""
        for k, piece in enumerate(pieces, 1):
            title = f"{p.title} ({k}/{n})" if p.title else f"({k}/{n})"
            metadata = {**p.metadata, "source": p.id, "chunk": k, "chunks": n}
            if prefix and k > 1:
                piece = f"{prefix}\n{piece}"
                metadata["prefix"] = prefix
            out.append(Passage(id=f"{p.id}#{k}", title=title, text=piece, metadata=metadata))
    return out
