"""Settle a comparison of dates with the dates the reader wrote (beyond the papers).

A choice question that compares two things in time ("Which film came out first, A or B?", "Who was born later,
A or B?", "Which film has the director who died earlier, A or B?") is half reading and half arithmetic. The 1.5B
reader does the reading and fails the arithmetic: "Brudebuketten was released in 1953, while Clownery was released
in 1989. Thus, Brudebuketten was released more recently." Holding both articles does not help it (on the
2WikiMultihopQA comparisons whose prompt held every gold paragraph it picks the wrong side more often than not).

:func:`settle_dates` does the arithmetic on the reader's own words, with no model call: it reads the question's
direction (earlier or later) and the event it dates (birth, death, or any), finds in the reasoning the first such
date written after each option (or after a name the reasoning gave that option: "Remember The Day was directed
by Henry King. Henry King died on June 29, 1982."), and answers with the earlier or later option. When a date is
missing, when the dates tie, or when the question is not a comparison of dates, it settles nothing and the
reader's answer stands. The reader still chooses the dates: a wrong date read is a wrong answer, as before.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar

from .options import question_options
from ..answer_span import answer_span

__all__ = ["DateComparison", "comparison_direction", "dates_by_option", "describe_comparison", "settle_dates",
           "values_by_option"]

Direction = Literal["earlier", "later"]
Event = Literal["born", "died", "any", "version"]
Key = TypeVar("Key")

_EARLIER = ("earlier", "earliest", "first", "older", "oldest", "sooner", "before")
_LATER = ("later", "latest", "more recently", "most recently", "more recent", "most recent", "younger", "youngest",
          "newer", "newest", "last", "after")
_BORN = ("born", "older", "oldest", "younger", "youngest", "birth")
_DIED = ("died", "die", "death", "dead")
#: words of the event a date belongs to, looked for just before the date in the reasoning
_EVENT_WORDS: dict[str, tuple[str, ...]] = {"born": ("born", "birth"), "died": ("died", "death", "passed away")}
_MONTHS = {m: i + 1 for i, m in enumerate(
    "january february march april may june july august september october november december".split())}
_MONTH = r"(?:January|February|March|April|May|June|July|August|September|October|November|December)"
#: "June 29, 1982", "29 June 1982", "June 1982", "1982": a year 1000-2099, or of three digits after a month
#: ("12 December 870"); not followed by "BC"
_DATE = re.compile(
    rf"(?:(?P<d1>\d{{1,2}})\s+(?P<m1>{_MONTH})\s+|(?P<m2>{_MONTH})\s+(?:(?P<d2>\d{{1,2}}),?\s+)?)?"
    r"(?P<y>(?<![\d.,])\d{3,4})(?![\d]|\s*(?:BC|B\.C\.|BCE))", re.IGNORECASE)
#: a sentence ends at ".", "!" or "?" before a capital, but not after an initial ("P. J. O'Rourke")
_SENTENCE_END = re.compile(r"(?<=[.!?])(?<!\b[A-Z]\.)\s+(?=[A-Z])")
_NAME = re.compile(r"[A-Z][\w'’.-]*(?:\s+(?:(?:of|the|de|la|le|von|van|der|du|da|di|y)\s+)*[A-Z][\w'’.-]*)*")
_NOT_NAMES = frozenset("the thus so since therefore hence however while and but it he she they this that his her "
                       "their its both".split())


@dataclass(frozen=True)
class DateComparison:
    """What :func:`settle_dates` read: the question's ``direction`` and ``event``, the date found for each option
    (``(year, month, day)``, 0 where the reasoning gives none), and the option it settles on (``None``: none).
    :func:`~active_rag.answer.versions.settle_versions` writes the same record with ``event`` ``"version"``
    and each option's version as its numbers (``(3, 10)`` for "3.10")."""

    direction: Direction
    event: Event
    options: tuple[str, str]
    dates: tuple[tuple[int, ...] | None, tuple[int, ...] | None]
    answer: str | None
    read_from: tuple[str | None, str | None] | None = None
    """Where each option's value was read, when not all from the reasoning: ``"reasoning"``, the id of the option's
    own passage (:func:`~active_rag.answer.versions.versions_in_passages`), or ``None`` (not found)."""

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.read_from is None:
            del out["read_from"]
        return out


def _has(text: str, words: tuple[str, ...]) -> bool:
    return any(re.search(rf"\b{re.escape(w)}\b", text) for w in words)


def comparison_direction(question: str) -> tuple[Direction, Event] | None:
    """Whether ``question`` is a choice question (:func:`~active_rag.answer.options.question_options`) that
    asks which option is earlier or later, and what it dates: ``("earlier", "born")`` for "Who is older, A or B?",
    ``("later", "died")`` for "Which film has the director who died later, A or B?", ``("earlier", "any")`` for
    "Which was founded first, A or B?"; ``None`` for any other question, and for one that names both directions.

    >>> comparison_direction("Which film came out first, Thai Mozhi or How To Avoid Everything?")
    ('earlier', 'any')
    >>> comparison_direction("Who is younger, Bob Degen or Ashad Ali?")
    ('later', 'born')
    >>> comparison_direction("Who is taller, Bob Degen or Ashad Ali?") is None
    True
    """
    options = question_options(question)
    if not options:
        return None
    asked = " ".join(question.split())
    for option in options:  # "Which came first, The Last Emperor or Older Than America?": the options' own words
        asked = asked.replace(option, " ")
    asked = asked.lower()
    earlier, later = _has(asked, _EARLIER), _has(asked, _LATER)
    if earlier == later:
        return None
    event: Event = "born" if _has(asked, _BORN) else "died" if _has(asked, _DIED) else "any"
    return ("earlier" if earlier else "later"), event


def _date_key(match: re.Match[str]) -> tuple[int, int, int] | None:
    """``(year, month, day)`` (0: not given), or ``None`` for a number that is no year ("120 minutes")."""
    month = match.group("m1") or match.group("m2")
    day = match.group("d1") or match.group("d2")
    year = int(match.group("y"))
    if not (1000 <= year <= 2099 or month and year >= 100):
        return None
    return year, _MONTHS[month.lower()] if month else 0, int(day) if day else 0


def _fold(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("’", "'")).strip().lower()


def dates_by_option(reasoning: str, options: tuple[str, str], event: Event = "any"
                    ) -> tuple[tuple[int, int, int] | None, tuple[int, int, int] | None]:
    """The first date ``reasoning`` gives each option: a date belongs to the option, or to a name the reasoning gave
    it, mentioned last before it in its sentence (a sentence that names one option and other names makes them that
    option's: "The director of A is P."). With ``event`` ``"born"`` or ``"died"`` only a date whose clause says so
    counts ("born", "birth"; "died", "death", "passed away")."""

    def dates(low: str) -> list[tuple[int, tuple[int, int, int]]]:
        found = []
        for date in _DATE.finditer(low):
            key = _date_key(date)
            clause = low[max(0, date.start() - 40):date.start()]
            if key is not None and (event == "any" or _has(clause, _EVENT_WORDS[event])):
                found.append((date.start(), key))
        return found

    return values_by_option(reasoning, options, dates)


def values_by_option(reasoning: str, options: tuple[str, str],
                     values: Callable[[str], list[tuple[int, Key]]]) -> tuple[Key | None, Key | None]:
    """The first value ``reasoning`` gives each option, by the rule of :func:`dates_by_option`; ``values`` finds
    them in a sentence (lower-cased, spaces folded): ``(position, value)`` pairs."""
    found: list[Key | None] = [None, None]
    folded = [_fold(o) for o in options]
    aliases: dict[str, int] = {}
    last: int | None = None  # the option mentioned last: a value before any mention in its sentence is its ("He")
    for sentence in _SENTENCE_END.split(reasoning):
        low = _fold(sentence)
        mentions: list[tuple[int, int]] = []  # (position, option index)
        for k, name in enumerate(folded):
            mentions += [(m.start(), k) for m in re.finditer(rf"(?<!\w){re.escape(name)}(?!\w)", low)]
        named = {k for _, k in mentions}
        names = [m for m in _NAME.finditer(sentence) if m.group().split()[0].lower() not in _NOT_NAMES
                 or len(m.group().split()) > 1]
        if len(named) == 1:
            owner = next(iter(named))
            for m in names:
                key = _fold(m.group().rstrip(".,;:'’"))
                if key and not any(key in f or f in key for f in folded):
                    aliases.setdefault(key, owner)
        for alias, owner in aliases.items():
            mentions += [(m.start(), owner) for m in re.finditer(rf"\b{re.escape(alias)}\b", low)]
        mentions.sort()
        for start, value in values(low):  # positions in the folded sentence, as the mentions'
            before = [k for pos, k in mentions if pos < start]
            owner = before[-1] if before else last
            if owner is not None and found[owner] is None:
                found[owner] = value
        if mentions:
            last = mentions[-1][1]
    return found[0], found[1]


def _earlier(a: tuple[int, int, int], b: tuple[int, int, int]) -> bool | None:
    """Whether ``a`` is before ``b`` (``None``: the dates do not say: the same year with a month or day missing)."""
    if a[0] != b[0]:
        return a[0] < b[0]
    if 0 in (a[1], b[1]) or a[1] == b[1] and 0 in (a[2], b[2]) or a == b:
        return None
    return a < b


def settle_dates(question: str, text: str) -> DateComparison | None:
    """Settle a comparison of dates (see the module docstring) from ``text``, the reader's answer: its reasoning is
    what precedes the answer span. ``None`` when ``question`` is not such a comparison; else the record, whose
    ``answer`` is the option the dates choose, or ``None`` when they choose none.

    >>> settle_dates("Which film was released more recently, Brudebuketten or Clownery?",
    ...              "Brudebuketten was released in 1953, while Clownery was released in 1989. Thus, Brudebuketten "
    ...              "was released more recently. So the answer is Brudebuketten.").answer
    'Clownery'
    """
    asked = comparison_direction(question)
    if asked is None:
        return None
    direction, event = asked
    options = question_options(question)
    span = answer_span(text)
    reasoning = text if span is None else text[:span[0]]
    first, second = dates_by_option(reasoning, (options[0], options[1]), event)
    answer = None
    if first is not None and second is not None:
        before = _earlier(first, second)
        if before is not None:
            answer = options[0] if before == (direction == "earlier") else options[1]
    return DateComparison(direction=direction, event=event, options=(options[0], options[1]),
                          dates=(first, second), answer=answer)


def _date_text(date: Any, event: str = "any") -> str:
    if event == "version":
        return ".".join(str(v) for v in date) if date else "no version"
    if not date:
        return "no date"
    year, month, day = date
    return "-".join([str(year)] + [f"{v:02d}" for v in (month, day) if v])


def describe_comparison(record: Mapping[str, Any]) -> str:
    """One line for a :class:`DateComparison` record (``to_dict()``), as ``active-rag ask`` prints it: "later by
    dates: 'Brudebuketten' 1953, 'Clownery' 1989 -> 'Clownery'"."""
    options, dates = record["options"], record["dates"]
    pairs = ", ".join(f"{o!r} {_date_text(d, record['event'])}" for o, d in zip(options, dates))
    verdict = f"-> {record['answer']!r}" if record.get("answer") else "-> nothing settled; the reader's answer stands"
    by = {"born": "dates of birth", "died": "dates of death", "version": "versions"}.get(record["event"], "dates")
    return f"{record['direction']} by {by}: {pairs} {verdict}"
