"""Settle a comparison of versions with the versions the reader wrote (beyond the papers).

A user's documentation asks "Which requires a newer minimum Python version, typer or Pygments?" as often as
Wikipedia asks which film came out first. The reader (qwen2.5-coder-1.5b on pydocs) reads both versions and then
picks the wrong side: "rpds-py requires a newer minimum Python version, which is Python 3.11. py-cpuinfo2
requires Python 3.9. So the answer is py-cpuinfo2." As with dates (:mod:`active_rag.answer.dates`), the
reading is the model's and the arithmetic need not be.

:func:`settle_versions` reads a choice question (:func:`~active_rag.answer.options.question_options`) that
asks about a version and which is newer or older (:func:`~active_rag.answer.dates.comparison_direction`:
"newer", "later", "more recent", "higher"; "older", "earlier", "lower"), finds the first version written after each
option in the reasoning (``3.10``, ``>=3.9``, ``v2.1.0``; by the rule of
:func:`~active_rag.answer.dates.dates_by_option`), and answers with the option whose version is the higher
or the lower, compared as numbers (3.10 is newer than 3.9). A tie settles nothing and the reader's answer stands.

Where the reasoning gives an option no version (qwen2.5-coder-0.5b writes one for 3 of 30 such questions on pydocs
and then answers with the first option it names), :func:`versions_in_passages` reads it from the option's own
passage in the prompt (the passage titled with the option, as a folder's file stem titles its chunks): the first
version whose label, the words just before it (:func:`labelled_versions`), shares the most of what the question
asks ("Requires-Python: >=3.9" for "requires a newer minimum Python version", not "Version: 2.31.0"). The record says where each version came from (``read_from``).
A version neither gives settles nothing. ``ActiveRAG(answer=AnswerStage(versions=True))``; ``versions="reasoning"``
reads the reasoning only (the rule before passages were read). On with ``dates`` in the ``sr-rag-choose`` and
``look-again-choose`` presets.

A question that asks for a version ("What is the minimum Python version that package requires?") gets the version
as its short answer (:func:`asked_version`): the reader writes "Python version 3.10 or higher", "Python 3.9+" or
"3.10" for the same reading, and only the last is the answer a user (or an F1 against "3.10") reads as such. The
version is kept as written ("3.10.0" stays "3.10.0"); an answer with no version, or with two different ones, stands.
The record is a :class:`VersionAnswer` (``event`` ``"version-asked"``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..entities import content_words
from ..retrieval.name_index import file_stem
from ..types import Passage
from .options import question_options
from ..answer_span import answer_span
from ..text import WH_WORDS
from .dates import DateComparison, comparison_direction, values_by_option

__all__ = ["LABEL_WORDS", "VersionAnswer", "asked_version", "asks_for_version", "asks_versions", "labelled_versions",
           "settle_versions", "versions_by_option", "versions_in_passages"]

_VERSION_WORDS = re.compile(r"\bversions?\b", re.IGNORECASE)
#: "3.10", ">=3.9", "v2.1.0", "3.9+": two or three dotted numbers, not part of a longer number or a date ("12.5.2020")
_VERSION = re.compile(r"(?<![\w.])v?(\d{1,3})\.(\d{1,3})(?:\.(\d{1,4}))?(?![\w]|\.\d)")
#: a version right after these bounds it from above or excludes it: not a minimum, not the version
_BOUND_BEFORE = re.compile(r"(?:<=?|!=)\s*[\"']?\s*$")
_HIGHER = ("higher", "highest", "greater", "larger")
_LOWER = ("lower", "lowest", "smaller")
_WORDS = re.compile(r"[a-z]+")
#: the words of a version question that say which way it compares, not what it reads
_COMPARING = frozenset(("which", "newer", "newest", "older", "oldest", "later", "earlier", "recent") + _HIGHER + _LOWER)
#: how many words before a version say what it is the version of ("Requires-Python: >=3.10")
LABEL_WORDS = 3


def _title_key(text: str) -> str:
    """A title or option as a file stem compares (:func:`~active_rag.retrieval.name_index.file_stem`: a chunk's
    "(2/5)" and a file's suffix go): lower-case, with ``-``, ``_``, ``.`` and spaces alike."""
    return re.sub(r"[-_.\s]+", "-", file_stem(text).strip().lower())


def labelled_versions(line: str) -> list[tuple[set[str], tuple[int, ...]]]:
    """Each version of ``line`` (not an upper bound or an exclusion) with its label: the last
    :data:`LABEL_WORDS` words before it, after the version before it (``"Requires-Python: <4.0,>=3.10"``: 3.10,
    labelled "requires python").

    >>> [(sorted(label), version) for label, version in labelled_versions('Requires-Dist: zipp>=3.1.0; python_version < "3.10"')]
    [(['dist', 'requires', 'zipp'], (3, 1, 0))]
    """
    low, out, after = line.lower(), [], 0
    for m in _VERSION.finditer(low):
        if not _BOUND_BEFORE.search(low, 0, m.start()):
            label = set(_WORDS.findall(low[after:m.start()])[-LABEL_WORDS:])
            out.append((label, tuple(int(g) for g in m.groups() if g is not None)))
            after = m.end()
    return out


def versions_in_passages(question: str, options: tuple[str, str], passages: Sequence[Passage]
                         ) -> tuple[tuple[tuple[int, ...] | None, str | None], tuple[tuple[int, ...] | None, str | None]]:
    """Each option's version as its own passage in ``passages`` (titled with the option, as a folder's file stem
    titles its chunks) states it, with that passage's id: of the versions of its lines
    (:func:`labelled_versions`), the first whose label shares the most words with what ``question`` asks (its
    content words, without the options' and the comparison's), and at least half of them; ``(None, None)`` when no
    version's label does.

    >>> header = Passage(id="typer.md#1", title="typer (1/24)", text="Version: 0.12.3\\nRequires-Python: >=3.7")
    >>> versions_in_passages("Which requires a newer minimum Python version, typer or Pygments?",
    ...                      ("typer", "Pygments"), [header])
    (((3, 7), 'typer.md#1'), (None, None))
    """
    def words(text: str) -> set[str]:
        return {w for word in content_words(text) for w in _WORDS.findall(word)}

    asked = words(question) - _COMPARING - words(options[0]) - words(options[1])
    least = max(1, (len(asked) + 1) // 2)

    def version_of(option: str) -> tuple[tuple[int, ...] | None, str | None]:
        key = _title_key(option)
        best: tuple[int, tuple[int, ...], str] | None = None
        for passage in passages:
            if _title_key(passage.title or "") != key:
                continue
            for line in passage.text.splitlines():
                for label, version in labelled_versions(line):
                    shared = len(asked & label)
                    if shared >= least and (best is None or shared > best[0]):
                        best = (shared, version, passage.id)
        return (best[1], best[2]) if best is not None else (None, None)

    return version_of(options[0]), version_of(options[1])


def asks_versions(question: str) -> str | None:
    """``"later"`` (the higher version wins) or ``"earlier"`` when ``question`` is a choice question about versions
    that asks which is newer or older; else ``None``.

    >>> asks_versions("Which requires a newer minimum Python version, typer or Pygments?")
    'later'
    >>> asks_versions("Which was released first, Brudebuketten or Clownery?") is None
    True
    """
    options = question_options(question)
    if not options or not _VERSION_WORDS.search(question):
        return None
    asked = question
    for option in options:
        asked = asked.replace(option, " ")
    low = asked.lower()
    higher = any(re.search(rf"\b{w}\b", low) for w in _HIGHER)
    lower = any(re.search(rf"\b{w}\b", low) for w in _LOWER)
    if higher != lower:
        return "later" if higher else "earlier"
    direction = comparison_direction(question)
    return direction[0] if direction is not None else None


def _versions_in(low: str) -> list[tuple[int, tuple[int, ...]]]:
    """The versions in ``low`` with their positions; not an upper bound or an exclusion ("<4.0", "!=3.9.0")."""
    return [(m.start(), tuple(int(g) for g in m.groups() if g is not None)) for m in _VERSION.finditer(low)
            if not _BOUND_BEFORE.search(low, 0, m.start())]


def versions_by_option(reasoning: str, options: tuple[str, str]) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    """The first version ``reasoning`` gives each option, as numbers (``(3, 10)``)."""
    return values_by_option(reasoning, options, _versions_in)


def _padded(version: tuple[int, ...]) -> tuple[int, ...]:
    return version + (0,) * (3 - len(version))


@dataclass(frozen=True)
class VersionAnswer:
    """What :func:`asked_version` read: the version the answer names (its numbers), as written (``answer``, the
    short answer), and the span it was read from (``written``)."""

    version: tuple[int, ...]
    answer: str
    written: str
    event: str = "version-asked"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def asks_for_version(question: str) -> bool:
    """Whether ``question`` asks for a version: not a choice between options, it says "version", and it opens with a
    question word ("What is the minimum Python version that typer requires?"; not "Which requires a newer minimum
    Python version, A or B?", nor "Does typer support Python version 3.8?").

    >>> asks_for_version("What is the minimum Python version that package requires?")
    True
    >>> asks_for_version("Which requires a newer minimum Python version, typer or Pygments?")
    False
    """
    if question_options(question) or not _VERSION_WORDS.search(question):
        return False
    asking = re.split(r"(?<=[.!?])\s+", question.strip())[-1]
    first = _WORDS.findall(asking.lower())[:1]
    return bool(first) and first[0] in WH_WORDS and _VERSION_WORDS.search(asking) is not None


def asked_version(question: str, text: str) -> VersionAnswer | None:
    """The version the answer span of ``text`` names, when ``question`` asks for one (:func:`asks_for_version`) and
    the span names exactly one (an upper bound or an exclusion, "<4.0", does not count); else ``None``.

    >>> asked_version("What is the minimum Python version that package requires?",
    ...               "It requires Python 3.10. So the answer is Python version 3.10 or higher.").answer
    '3.10'
    >>> asked_version("What is the minimum Python version that package requires?",
    ...               "So the answer is 3.9 or 3.10.") is None
    True
    """
    if not asks_for_version(question):
        return None
    span = answer_span(text)
    written = (text if span is None else text[span[0]:span[1]]).strip()
    low = written.lower()
    found = [m for m in _VERSION.finditer(low) if not _BOUND_BEFORE.search(low, 0, m.start())]
    numbers = {tuple(int(g) for g in m.groups() if g is not None) for m in found}
    if len(numbers) != 1:
        return None
    first = found[0]
    return VersionAnswer(version=next(iter(numbers)), answer=written[first.start():first.end()].lstrip("vV"),
                         written=written)


def settle_versions(question: str, text: str, passages: Sequence[Passage] | None = None
                    ) -> DateComparison | VersionAnswer | None:
    """Settle a comparison of versions (see the module docstring) from ``text``, the reader's answer: its reasoning
    is what precedes the answer span; with ``passages`` (those of the answer's prompt), an option the reasoning
    gives no version gets its own passage's (:func:`versions_in_passages`). ``None`` when ``question`` is not such a
    comparison; else the record (``event`` ``"version"``), whose ``answer`` is the option the versions choose, or
    ``None`` when they choose none. A question that asks for a version gets :func:`asked_version`'s record instead.

    >>> settle_versions("Which requires a newer minimum Python version, rpds-py or py-cpuinfo2?",
    ...                 "rpds-py requires Python 3.11. py-cpuinfo2 requires Python 3.9. So the answer is py-cpuinfo2."
    ...                 ).answer
    'rpds-py'
    """
    direction = asks_versions(question)
    if direction is None:
        return asked_version(question, text)
    options = question_options(question)
    span = answer_span(text)
    reasoning = text if span is None else text[:span[0]]
    first, second = versions_by_option(reasoning, (options[0], options[1]))
    read_from = None
    if passages is not None and (first is None or second is None):
        (own_first, first_id), (own_second, second_id) = versions_in_passages(question, (options[0], options[1]),
                                                                              passages)
        read_from = ("reasoning" if first is not None else first_id, "reasoning" if second is not None else second_id)
        first = first if first is not None else own_first
        second = second if second is not None else own_second
    answer = None
    if first is not None and second is not None and _padded(first) != _padded(second):
        higher = options[0] if _padded(first) > _padded(second) else options[1]
        lower = options[1] if higher == options[0] else options[0]
        answer = higher if direction == "later" else lower
    return DateComparison(direction="later" if direction == "later" else "earlier", event="version",
                          options=(options[0], options[1]), dates=(first, second), answer=answer, read_from=read_from)
