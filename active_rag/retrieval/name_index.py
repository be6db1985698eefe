"""Which passages are about which name: the index that linked retrieval (:mod:`active_rag.answer.links`) reads instead of
asking the retriever once per name.

A passage is about its title ("Glow (film)" is about Glow) and about the names its text opens with
(:func:`text_subjects`): a Markdown heading on its first line ("# Orion"); the words before the first sentence's
first parenthesis, verb, colon or comma, as an encyclopedia's first sentence names its subject ("Shirley Temple
Black (April 23, 1928 – ...) was ...", "Kiss and Tell is a 1945 film", "Meet Corliss Archer, a program ...");
the capitalised phrase that opens the sentence, or its main clause after a short introduction, without a word
that is only there because it opens the sentence ("Despite the program's long run, ..." opens with no name; "In the
United Kingdom, the Accession Council is ..." is about the Accession Council, not the United Kingdom); and
who it is "also known as". A title that is a file name (``products.md``, ``doc-7.txt``) is not a name: such
passages are found by their text, and the file name's stem ("products") is a name of the last resort. Chunks of
one source (``metadata["source"]``, ``"file_path"``, ``"path"``, ...: :data:`SOURCE_KEYS`) share what their
source's first chunk is about, so a name reaches every chunk of its document.

Names match as :func:`name_key` writes them (lower case, no accents, no parenthesis, no leading "The"). A name of
three words or more also matches without one of them ("Shirley Temple" finds "Shirley Temple Black", "Miguel
Morayta Martinez" finds "Miguel Morayta"), with one word other ("Roger O. Egeberg" and "Roger Olaf Egeberg"), by
its first and last word and with a middle name as its initial ("Henry J. Kaiser"); a one-word name only matches
itself ("American" never finds "American Scary"). :meth:`NameIndex.articles` returns the passages of a name's
best match only: a title before a text's subject, an exact name before a near one, a file name's stem last.

Building is one pass over the passages' openings (no model, no retriever): 2 to 4 s of one CPU core for 20,000
passages. :class:`~active_rag.retrieval.bm25.BM25Index` builds one on first use and saves it with the index; the
LangChain and LlamaIndex adapters build one from the documents their retriever holds; any other retriever gets
one from :func:`attach_name_index`. Without one, linked retrieval asks the retriever once per name.
"""

from __future__ import annotations

import functools
import html
import re
import threading
import unicodedata
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..entities import capitalised_phrases
from ..text import stop_words
from ..types import Passage

__all__ = [
    "NAME_INDEX_VERSION",
    "NameIndex",
    "SOURCE_KEYS",
    "SENTENCE_OPENERS",
    "attach_name_index",
    "file_base",
    "file_stem",
    "is_file_name",
    "name_index_for",
    "name_index_of",
    "name_key",
    "opens_sentence",
    "source_of",
    "text_subjects",
]

#: Bumped whenever the rules change, so that an index saved by an older version is rebuilt, not read.
NAME_INDEX_VERSION = 3

#: Metadata keys that name the document a chunk was cut from (LangChain loaders, LlamaIndex readers, our own
#: chunking and folder reader), first match wins.
SOURCE_KEYS = ("source", "file_path", "path", "file_name", "ref_doc_id", "doc_id", "document_id", "parent_id")

#: Words that open an introductory clause before a sentence's subject: the prepositions and connectives among
#: :data:`SENTENCE_OPENERS`, not its pronouns or adverbs ("I Love NY, ...", "Overall, ...").
_INTRO_WORDS = frozenset("""
    in on at by for from with to of into onto over under upon after before during since until till through
    throughout between among amid against without within about around near across along beyond beside besides
    despite unlike like according following regarding concerning although though while whereas when where if
    unless because as
""".split())

#: Words capitalised only because they open a sentence: the first word of a phrase that opens a sentence is
#: dropped when it is one of these ("Despite Smith's ..." names Smith), and a phrase of one word also when it is a
#: stop word or a word the corpus writes in lower case (:func:`opens_sentence`). Adjectives and numbers are not
#: here: "New York", "First Lady" and "One Direction" open sentences as names.
SENTENCE_OPENERS = _INTRO_WORDS | frozenset("""
    but and or nor so yet however moreover furthermore additionally also overall meanwhile
    nevertheless nonetheless consequently accordingly therefore hence thus instead otherwise similarly likewise
    indeed still then there here now today currently initially subsequently eventually finally originally
    previously formerly recently notably specifically especially particularly importantly interestingly
    unfortunately fortunately alternatively ultimately generally typically usually often sometimes together
    later afterwards soon once it he she they we i you this that these those his her their its our my your what
    which who whose whom why how born located known based
""".split())


#: Document file suffixes: a title ending in one is a file name, not a name.
_FILE_SUFFIXES = frozenset("""
    txt md markdown rst pdf html htm xhtml doc docx odt rtf csv tsv json jsonl xml yaml yml tex org adoc ipynb
    pptx ppt xlsx xls epub eml msg log
""".split())
_FILE_SUFFIX = re.compile(r"\.([A-Za-z0-9]{1,8})$")
_PARENTHESIS = re.compile(r"\s*[(\[][^)\]]*[)\]]")
_POSSESSIVE = re.compile(r"['’]s\b")
_HEADING = re.compile(r"^\s{0,3}(#{1,6}\s+|=+\s*|\*\*)(?P<text>.+?)\s*(\*\*|=+|#+)?\s*:?\s*$")
_LEADING = frozenset({"the", "a", "an"})
_CONNECTORS = frozenset({"of", "de", "von", "the", "and", "&", "for", "in", "on", "to", "la", "le", "du", "van", "der"})
_QUOTES = re.compile(r"[\"“”]")
_LEAD_VERB = re.compile(r"\s*\(|\s*;|\s+(?:is|was|are|were|has|had|refers|may refer|became|remains)\s")
_LEAD_MARK = re.compile(r":\s|\s[–—-]\s")
_KNOWN_AS = re.compile(r"(?:also|better|commonly|popularly|simply) (?:known|referred to) as "
                       r"[\"“]?((?:[A-Z][\w.'’-]*)"
                       r"(?: (?:[A-Z][\w.'’-]*|of|de|the))*(?<!of)(?<!de)(?<!the))")
_POST_NOMINAL = re.compile(r"[A-Z]{2,4}|Jr\.?|Sr\.?|Bt|M\.D\.|S\.A\.|Inc\.?|Ltd\.?|plc|,")
_LOWER_WORD = re.compile(r"(?<![\w'’-])[a-z][a-z'’-]+")
_UPPER_WORD = re.compile(r"(?<![\w'’-])[A-Z][a-z'’-]+")
#: The words before a first sentence's verb or parenthesis name its subject only when they are this few.
_SUBJECT_WORDS = 8
#: A name whose best match is a text's subject shared by more distinct sources than this is too common to follow.
_MAX_SOURCES = 4

# how a passage matches a name, best first: its title, its text's subject, either with a word less or more, with
# one word other, its file name's stem
_TITLE, _SUBJECT, _TITLE_NEAR, _SUBJECT_NEAR, _OTHER_WORD, _STEM = 0, 1, 2, 3, 4, 5


@functools.lru_cache(maxsize=1 << 16)
def name_key(name: str) -> str:
    """The form names are matched in: lower-cased words without accents, a parenthesis ("Glow (film)"), a
    possessive or a leading article ("The Beatles" is "beatles"), joined by single spaces."""
    plain = _POSSESSIVE.sub("", _PARENTHESIS.sub("", _QUOTES.sub("", html.unescape(name))))
    plain = unicodedata.normalize("NFKD", plain).encode("ascii", "ignore").decode()
    words = [w.lower() for w in re.findall(r"[^\W_]+", plain)]
    while len(words) > 1 and words[0] in _LEADING:
        words = words[1:]
    return " ".join(words)


def _near_keys(key: str, min_words: int) -> list[str]:
    """``key`` without one of its words, each with at least ``min_words`` words left."""
    words = key.split()
    if len(words) - 1 < min_words:
        return []
    out: list[str] = []
    for i in range(len(words)):
        near = " ".join(words[:i] + words[i + 1:])
        if near not in out:
            out.append(near)
    return out


def _short_keys(key: str) -> list[str]:
    """Shorter forms of a full name of three words or more: its first and last word ("Charles Eugene Jules
    Nungesser" is "Charles Nungesser") and each middle word as its initial ("Henry John Kaiser" is "Henry J.
    Kaiser")."""
    words = key.split()
    if len(words) < 3:
        return []
    out = [f"{words[0]} {words[-1]}"]
    for i in range(1, len(words) - 1):
        if len(words[i]) > 1:
            out.append(" ".join(words[:i] + [words[i][0]] + words[i + 1:]))
    return out


def is_file_name(title: str) -> bool:
    """A title that names a file (``products.md``, ``docs/teams.txt``, a chunk's ``teams.md (2/5)``), not what the
    passage is about: it ends with a document's suffix."""
    found = _FILE_SUFFIX.search(_PARENTHESIS.sub("", title).strip())
    return bool(found) and found.group(1).lower() in _FILE_SUFFIXES


def source_of(passage: Passage) -> str | None:
    """The document ``passage`` was cut from, by the first of :data:`SOURCE_KEYS` its metadata holds."""
    for key in SOURCE_KEYS:
        value = passage.metadata.get(key)
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
            return f"{key}={value}"
    return None


def file_base(title: str) -> str:
    """``docs/orion_api.md (2/5)`` -> ``orion_api``: the file's name without its folder, extension and the chunk
    suffix " (2/5)" that :mod:`active_rag.retrieval.chunking` adds."""
    return _FILE_SUFFIX.sub("", re.split(r"[/\\]", _PARENTHESIS.sub("", title).strip())[-1])


def file_stem(title: str) -> str:
    """``docs/orion.md`` -> ``orion``, with ``_`` and ``-`` read as spaces (:func:`file_base`)."""
    return file_base(title).replace("_", " ").replace("-", " ")


def opens_sentence(word: str, alone: bool, common: frozenset[str] | set[str] = frozenset()) -> bool:
    """Whether ``word``, the first word of a phrase that opens a sentence, is there only because it opens the
    sentence: one of :data:`SENTENCE_OPENERS`, or, ``alone`` in its phrase, a stop word ("However") or one of
    ``common``, the words a corpus writes in lower case ("Sales")."""
    key = name_key(word)
    return not key or key in SENTENCE_OPENERS or (alone and (key in stop_words() or key in common))


def _only_numbers(key: str) -> bool:
    """A key of numbers and month names only ("6 may 1859"): a date, not a name."""
    return _NUMBERS.fullmatch(key) is not None


_MONTH = "january|february|march|april|may|june|july|august|september|october|november|december"
_NUMBERS = re.compile(rf"(?:\d+|{_MONTH})(?: (?:\d+|{_MONTH}))*")


def _lead_names(line: str) -> list[str]:
    """What a first line opens with when it reads like an encyclopedia's first sentence: the words before its
    first parenthesis or verb ("Kiss and Tell is a 1945 film", "Winner (Hangul: ...)", "Sleep, My Love is ..."),
    before its first colon or dash ("Orion: the ..."), and the capitalised words before its first comma ("Meet
    Corliss Archer, a program from ..."); without the post-nominal letters that end a person's name ("Peter
    Schmeichel MBE")."""
    lead = _QUOTES.sub("", line[:300]).lstrip(" *_'“‘")
    if not lead or not (lead[0].isupper() or lead[0].isdigit()) or _introduction(lead) is not None:
        return []  # "In the United Kingdom, the Accession Council is ...": not "United Kingdom"; see _first_phrase
    heads: list[str] = []
    for pattern in (_LEAD_VERB, _LEAD_MARK):
        cut = pattern.search(lead)
        if cut is not None:
            heads.append(lead[:cut.start()])
    comma = lead.split(",", 1)[0]
    words = comma.split()
    if comma != lead and all(w[0].isupper() or w[0].isdigit() or w in _CONNECTORS for w in words):
        while words and (_only_numbers(name_key(words[0])) or opens_sentence(words[0], len(words) == 1)):
            words = words[1:]  # "In 1990, ...": an introduction, not a name
        heads.append(" ".join(words))
    found: list[str] = []
    for head in heads:
        words = head.strip(" ,;'”’").split()
        while len(words) > 1 and _POST_NOMINAL.fullmatch(words[-1]):
            words = words[:-1]
        if len(words) == 1 and opens_sentence(words[0], True):  # "Overall, ...", "It was ..."
            continue
        if 0 < len(words) <= _SUBJECT_WORDS and " ".join(words) not in found:
            found.append(" ".join(words))
    return found


def _introduction(sentence: str) -> re.Match[str] | None:
    """The short introductory clause ``sentence`` opens with, up to its main clause's first capitalised word: a
    preposition or connective (:data:`_INTRO_WORDS`), at most five words more without a parenthesis or colon, a
    comma, then an article or a capitalised word ("In the United Kingdom, the Accession Council is ...", "In 1990,
    Acme Corp bought ..."); None when the sentence opens otherwise ("I Love NY, also known as ...")."""
    intro = _INTRO.match(sentence)
    return intro if intro is not None and intro.group(1).lower() in _INTRO_WORDS else None


_INTRO = re.compile(r"\s*([A-Z][a-z]*)\s+(?:[^\s(:]+\s+){0,4}?[^\s(:]*,\s+(?:\d{4},\s+)?"  # "On May 7, 2023, "
                    r"(?=(?:the|a|an)\s|[A-Z0-9])(?:(?:the|a|an)\s+)?")


def _first_phrase(sentence: str, common: frozenset[str] | set[str]) -> str | None:
    """The capitalised phrase ``sentence`` opens with, or that opens its main clause after a short introductory
    one ("In 1990, Acme Corp bought ..."), when it names something: without the sentence opener that leads it
    ("Despite Smith's ..." is Smith; a lone "Overall", "It" or, in ``common``, "Winner" is nothing), numbers or
    months."""
    head = sentence[:200]
    introduction = _introduction(head)
    if introduction is not None:  # "In the United Kingdom, the Accession Council ...": its main clause's subject
        starts = {introduction.end()}
    else:
        starts = {0}
        intro = re.match(r"\s*(?:\S+\s+){0,5}?\S*,\s+(?:the\s+)?", head)
        if intro is not None:
            starts.add(intro.end())
    for phrase, start in capitalised_phrases(head):
        if start > max(starts):
            return None
        if start not in starts:
            continue
        parts = phrase.split()
        if start == 0 and parts and opens_sentence(parts[0], len(parts) == 1, common):
            parts = parts[1:]
        while parts and _only_numbers(name_key(parts[0])):
            parts = parts[1:]
        name = " ".join(parts).strip(" .,;:'\"")
        key = name_key(name)
        if key and not _only_numbers(key) and max(map(len, key.split())) > 1 and key not in stop_words():
            return name
    return None


def text_subjects(text: str, common: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """The names ``text`` opens with: the Markdown heading of its first line ("# Orion", "**Orion**"), the words its
    first sentence opens with before a parenthesis, a verb or a comma (:func:`_lead_names`: "Kiss and Tell is
    a 1945 film"), the capitalised phrase that opens the sentence or its main clause (:func:`_first_phrase`),
    without a word there only because it opens the sentence (:func:`opens_sentence`; ``common``: the words the
    corpus writes in lower case), and the names it is "also known as"."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return []
    found: list[str] = []
    heading = _HEADING.match(lines[0])
    if heading is not None:
        found.append(heading.group("text").strip(" *#:"))
        lines = lines[1:]
    if lines:
        found.extend(_lead_names(lines[0]))
        phrase = _first_phrase(lines[0][:400], common)
        if phrase is not None:
            found.append(phrase)
        found.extend(m.group(1) for m in _KNOWN_AS.finditer(lines[0][:400]))
    out: list[str] = []
    for name in found:
        key = name_key(name)
        if key and not _only_numbers(key) and key not in {name_key(f) for f in out}:
            out.append(name)
    return out


def common_words(texts: Iterable[str]) -> frozenset[str]:
    """Words a corpus writes in lower case at least twice and at least as often as capitalised: capitalised, they
    open a sentence rather than name something ("Despite", "Overall")."""
    lower: Counter[str] = Counter()
    upper: Counter[str] = Counter()
    for text in texts:  # a passage's opening is enough to learn its language's common words
        lower.update(_LOWER_WORD.findall(text, 0, 600))
        upper.update(w.lower() for w in _UPPER_WORD.findall(text, 0, 600))
    return frozenset(w for w, n in lower.items() if n >= 2 and n >= upper[w])


def _keep_subject(subject: str, title: str) -> bool:
    """Whether a passage titled ``title`` (``""``: none, or a file name) is about the ``subject`` its text opens
    with: always without a title; with one, a subject of two words or more ("Shirley Temple Black" beside
    "Shirley Temple"), not a lone word, which is as often the first word of something else ("Australia's bid to
    host the 2022 World Cup" is titled "Australia 2022 FIFA World Cup bid")."""
    return not title or len(name_key(subject).split()) >= 2


class NameIndex:
    """Names to the passages about them (see the module's docstring). Build it with :meth:`from_passages`."""

    def __init__(self, passages: Sequence[Passage], entries: dict[str, list[tuple[int, int]]],
                 sources: Sequence[str | None] | None = None) -> None:
        self.passages: list[Passage] = list(passages)
        self._entries = entries  # key -> [(tier, passage position)], tier then corpus order
        self._sources = list(sources) if sources is not None else [source_of(p) for p in self.passages]
        self._identifiers: frozenset[str] | None = None
        self._chunked: frozenset[str] | None = None
        self._mentions: dict[str, int] = {}

    @classmethod
    def from_passages(cls, passages: Iterable[Passage]) -> NameIndex:
        """Index what each of ``passages`` is about: its title unless that is a file name, the names its text
        opens with (:func:`text_subjects`), what the first chunk of its source is about, its file name's stem."""
        items = list(passages)
        common = common_words(p.text for p in items)
        sources = [source_of(p) for p in items]
        first_of: dict[str, int] = {}
        own: list[list[tuple[int, str]]] = []
        for i, p in enumerate(items):
            names: list[tuple[int, str]] = []
            title = (p.title or "").strip()
            if title and not is_file_name(title):
                names.append((_TITLE, title))
            titled = bool(title) and not is_file_name(title)
            for subject in text_subjects(p.text, common):
                if _keep_subject(subject, title if titled else ""):
                    names.append((_SUBJECT, subject))
            if title and is_file_name(title):
                names.append((_STEM, file_stem(title)))
            own.append(names)
            if sources[i] is not None:
                first_of.setdefault(sources[i], i)  # type: ignore[arg-type]
        entries: dict[str, dict[int, int]] = {}

        def add(key: str, tier: int, i: int) -> None:
            if key and not _only_numbers(key):
                slot = entries.setdefault(key, {})
                slot[i] = min(tier, slot.get(i, tier))

        for i in range(len(items)):
            names = list(own[i])
            source = sources[i]
            if source is not None and first_of[source] != i:  # chunks of one source share what it is about
                names.extend(n for n in own[first_of[source]] if n not in names)
            for tier, name in names:
                key = name_key(name)
                add(key, tier, i)
                if tier in (_TITLE, _SUBJECT):
                    for near in _near_keys(key, 2) + _short_keys(key):
                        add(near, tier + 2, i)
        return cls(items, {k: sorted((t, i) for i, t in v.items()) for k, v in entries.items()}, sources)

    def __len__(self) -> int:
        return len(self._entries)

    def mentions(self, name: str) -> int:
        """How many of the index's passages mention ``name`` in their text (its words whole, as written): how much of a
        hub the name is ("Los Angeles", "World War II" against a film's director). Counted once per name."""
        if name not in self._mentions:
            pattern = re.compile(r"(?<!\w)" + re.escape(name) + r"(?!\w)")
            self._mentions[name] = sum(1 for p in self.passages if name in p.text and pattern.search(p.text))
        return self._mentions[name]

    def chunked_sources(self) -> frozenset[str]:
        """The documents cut into more than one of the index's passages (by :func:`source_of`), built once."""
        if self._chunked is None:
            seen: dict[str, int] = {}
            for source in self._sources:
                if source is not None:
                    seen[source] = seen.get(source, 0) + 1
            self._chunked = frozenset(s for s, n in seen.items() if n > 1)
        return self._chunked

    def names_document(self, name: str) -> bool:
        """Whether a passage of the corpus is titled ``name``, or a file is named so (its stem): ``tenacity``,
        ``jupyter-core``. A lowercase word is a name only when this says so (a word the text merely uses is not);
        a plain lowercase word ("older", "rich") only when the corpus writes that title as an identifier, in lower
        case or with inner capitals ("rich.md", "PyYAML"), not as a capitalised word ("Older", a Wikipedia title)."""
        key = name_key(name)
        if not any(t in (_TITLE, _STEM) for t, _ in self._entries.get(key, [])):
            return False
        plain = name.strip()
        if not plain.isalpha() or not plain.islower():
            return True
        return key in self._identifier_titles()

    def _identifier_titles(self) -> frozenset[str]:
        """The keys of the titles (or file stems) written as identifiers: lower case, or inner capitals."""
        if self._identifiers is None:
            found = set()
            for p in self.passages:
                title = file_stem(p.title) if p.title and is_file_name(p.title) else _PARENTHESIS.sub("", p.title or "").strip()
                if title and " " not in title and (title.islower() or any(c.isupper() for c in title[1:])):
                    found.add(name_key(title))
            self._identifiers = frozenset(found)
        return self._identifiers

    def stats(self) -> dict[str, int]:
        """How many names the index holds and where they come from: ``titles`` (passages' titles that are not file
        names), ``file_names`` (the stems of titles that are), ``text`` (the names texts open with), and
        ``passages``. A corpus whose ``names`` is 0 gives linked retrieval nothing to follow."""
        best: dict[str, int] = {}
        for key, hits in self._entries.items():
            best[key] = min(t for t, _ in hits)
        origin = {"titles": (_TITLE, _TITLE_NEAR), "text": (_SUBJECT, _SUBJECT_NEAR, _OTHER_WORD), "file_names": (_STEM,)}
        counts = {kind: sum(1 for t in best.values() if t in tiers) for kind, tiers in origin.items()}
        return {"names": len(best), **counts, "passages": len(self.passages)}

    def __repr__(self) -> str:
        return f"NameIndex({len(self._entries)} names, {len(self.passages)} passages)"

    def _matches(self, name: str) -> list[tuple[int, int]]:
        key = name_key(name)
        if not key:
            return []
        found = dict((i, t) for t, i in reversed(self._entries.get(key, [])))
        for near in _near_keys(key, 2):  # "Miguel Morayta Martinez" finds "Miguel Morayta"
            for t, i in self._entries.get(near, []):
                if t < _STEM:  # one word less, or one word other ("Roger O Egeberg" and "Roger Olaf Egeberg")
                    tier = t + 2 if t in (_TITLE, _SUBJECT) else _OTHER_WORD
                    found[i] = min(found.get(i, tier), tier)
        return sorted((t, i) for i, t in found.items())

    def articles(self, name: str) -> list[Passage]:
        """The passages about ``name``, those of its best match only (a title, a text's subject, a name that
        differs by one word, a file name's stem), in corpus order; none for a name no passage is about, or one
        whose best match is the subject of more than a few documents' texts (too common to be one thing's name)."""
        matches = self._matches(name)
        if not matches:
            return []
        best = matches[0][0]
        chosen = [i for t, i in matches if t == best]
        if best != _TITLE and len({self._sources[i] or i for i in chosen}) > _MAX_SOURCES:
            return []
        return [self.passages[i] for i in chosen]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready form for :meth:`from_json` (passages are referred to by position)."""
        return {"version": NAME_INDEX_VERSION, "num_passages": len(self.passages),
                "names": {k: [[t, i] for t, i in v] for k, v in self._entries.items()}}

    @classmethod
    def from_json(cls, data: Any, passages: Sequence[Passage]) -> NameIndex | None:
        """The index :meth:`to_json` wrote for ``passages``; ``None`` when it was written by other rules
        (:data:`NAME_INDEX_VERSION`) or for other passages: build it again then."""
        if not isinstance(data, dict) or data.get("version") != NAME_INDEX_VERSION:
            return None
        if data.get("num_passages") != len(passages) or not isinstance(data.get("names"), dict):
            return None
        try:
            entries = {str(k): [(int(t), int(i)) for t, i in v] for k, v in data["names"].items()}
        except (TypeError, ValueError):
            return None
        if any(not 0 <= i < len(passages) for v in entries.values() for _, i in v):
            return None
        return cls(passages, entries)


# ---------------------------------------------------------------------------------------------- finding one

_attached: dict[int, tuple[Callable[[], Any], NameIndex]] = {}
_lock = threading.Lock()


def attach_name_index(retriever: Any, passages: Iterable[Passage] | NameIndex) -> NameIndex:
    """Give ``retriever`` (any object with ``retrieve(query, k)``) the name index of the ``passages`` it searches,
    so that linked retrieval looks names up there instead of asking the retriever once per name. Returns it.
    Attach it again after adding passages to the retriever: the index holds those it was built from."""
    index = passages if isinstance(passages, NameIndex) else NameIndex.from_passages(passages)
    key = id(retriever)

    def forget(_: Any, key: int = key) -> None:
        with _lock:
            _attached.pop(key, None)

    try:
        ref: Callable[[], Any] = weakref.ref(retriever, forget)
    except TypeError:  # an object without weak references is kept, so that its id stays its own
        ref = lambda: retriever  # noqa: E731
    with _lock:
        _attached[key] = (ref, index)
    return index


def name_index_of(retriever: Any) -> NameIndex | None:
    """The name index of ``retriever``: one attached with :func:`attach_name_index`, else its ``name_index``
    attribute (:class:`~active_rag.retrieval.bm25.BM25Index`, the LangChain and LlamaIndex adapters), else that of
    the engine index it wraps (``retriever.index``); ``None`` when it has none."""
    with _lock:
        held = _attached.get(id(retriever))
    if held is not None and held[0]() is retriever:
        return held[1]
    for owner in (retriever, getattr(retriever, "index", None)):
        found = getattr(owner, "name_index", None) if owner is not None else None
        if isinstance(found, NameIndex):
            return found
    return None


def name_index_for(retriever: Any, held_passages: Callable[[], Iterable[Passage] | None]) -> NameIndex | None:
    """:func:`name_index_of` ``retriever``, else one built from the passages it holds (``held_passages()``, which a
    framework adapter lists from the retriever's documents) and attached to it, so it is built once; ``None`` when
    it lists none."""
    found = name_index_of(retriever)
    if found is not None:
        return found
    passages = list(held_passages() or [])
    return attach_name_index(retriever, passages) if passages else None
