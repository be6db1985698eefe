"""Settle a comparison of versions with the versions the reader wrote (beyond the papers).

A user's documentation asks "Which requires a newer minimum Python version, typer or Pygments?" as often as
Wikipedia asks which film came out first. The reader (qwen2.5-coder-1.5b on pydocs) reads both versions and then
picks the wrong side: "rpds-py requires a newer minimum Python version, which is Python 3.11. py-cpuinfo2
requires Python 3.9. So the answer is py-cpuinfo2." As with dates (:mod:`active_rag.methods.date_compare`), the
reading is the model's and the arithmetic need not be.

:func:`settle_versions` reads a choice question (:func:`~active_rag.methods.answer_options.question_options`) that
asks about a version and which is newer or older (:func:`~active_rag.methods.date_compare.comparison_direction`:
"newer", "later", "more recent", "higher"; "older", "earlier", "lower"), finds the first version written after each
option in the reasoning (``3.10``, ``>=3.9``, ``v2.1.0``; by the rule of
:func:`~active_rag.methods.date_compare.dates_by_option`), and answers with the option whose version is the higher
or the lower, compared as numbers (3.10 is newer than 3.9). A missing version or a tie settles nothing and the
reader's answer stands. ``ActiveRAG(answer=AnswerStage(versions=True))``; on with ``dates`` in the ``sr-rag-choose``
and ``look-again-choose`` presets.
"""

from __future__ import annotations

import re

from .answer_options import question_options
from .answer_span import answer_span
from .date_compare import DateComparison, comparison_direction, values_by_option

__all__ = ["asks_versions", "settle_versions", "versions_by_option"]

_VERSION_WORDS = re.compile(r"\bversions?\b", re.IGNORECASE)
#: "3.10", ">=3.9", "v2.1.0", "3.9+": two or three dotted numbers, not part of a longer number or a date ("12.5.2020")
_VERSION = re.compile(r"(?<![\w.])v?(\d{1,3})\.(\d{1,3})(?:\.(\d{1,4}))?(?![\w]|\.\d)")
_HIGHER = ("higher", "highest", "greater", "larger")
_LOWER = ("lower", "lowest", "smaller")


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


def versions_by_option(reasoning: str, options: tuple[str, str]) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    """The first version ``reasoning`` gives each option, as numbers (``(3, 10)``)."""

    def versions(low: str) -> list[tuple[int, tuple[int, ...]]]:
        return [(m.start(), tuple(int(g) for g in m.groups() if g is not None)) for m in _VERSION.finditer(low)]

    return values_by_option(reasoning, options, versions)


def _padded(version: tuple[int, ...]) -> tuple[int, ...]:
    return version + (0,) * (3 - len(version))


def settle_versions(question: str, text: str) -> DateComparison | None:
    """Settle a comparison of versions (see the module docstring) from ``text``, the reader's answer: its reasoning
    is what precedes the answer span. ``None`` when ``question`` is not such a comparison; else the record
    (``event`` ``"version"``), whose ``answer`` is the option the versions choose, or ``None`` when they choose none.

    >>> settle_versions("Which requires a newer minimum Python version, rpds-py or py-cpuinfo2?",
    ...                 "rpds-py requires Python 3.11. py-cpuinfo2 requires Python 3.9. So the answer is py-cpuinfo2."
    ...                 ).answer
    'rpds-py'
    """
    direction = asks_versions(question)
    if direction is None:
        return None
    options = question_options(question)
    span = answer_span(text)
    reasoning = text if span is None else text[:span[0]]
    first, second = versions_by_option(reasoning, (options[0], options[1]))
    answer = None
    if first is not None and second is not None and _padded(first) != _padded(second):
        higher = options[0] if _padded(first) > _padded(second) else options[1]
        lower = options[1] if higher == options[0] else options[0]
        answer = higher if direction == "later" else lower
    return DateComparison(direction="later" if direction == "later" else "earlier", event="version",
                          options=(options[0], options[1]), dates=(first, second), answer=answer)
