"""Whether an answer is of the kind its question asks for: a year, a date, a number (beyond the papers).

A question that asks "in what year", "when" or "how many" is answered by a number or a date. A draft that names
something else ("born in what year?" answered "Yōzaburō Kanari") has not answered it, however sure the model was of
its tokens and whether or not its passages contain it: :class:`~active_rag.methods.answer_check.AnswerCheck`'s
``answer_kind`` then counts the draft as unsure and looks again. Why, from the rows (docs/context.md, "A draft that
does not answer what was asked"): with qwen2.5-coder-0.5b, 1 to 3 questions a slice on HotpotQA dev and on
2WikiMultihopQA kept such a draft (every one scored 0 F1), among the 27 questions of HotpotQA dev that ask for a
number or date; the 1.5B reader kept none.

The rule reads words, not a model: :func:`asked_kind` from the question's wording, :func:`answers_kind` from the
answer's (a digit, a month, a number word or a century).
"""

from __future__ import annotations

import re

__all__ = ["ANSWER_KINDS", "answers_kind", "asked_kind"]

#: the kinds of answer :func:`asked_kind` tells apart
ANSWER_KINDS = ("year", "date", "number")

_YEAR = re.compile(r"\b(?:what|which) (?:year|decade|century)\b", re.IGNORECASE)
# "When was/did ...?" at the question's start: "when" later in a sentence is a conjunction ("... when mixed with")
_DATE = re.compile(r"^\s*(?:when|on what (?:date|day)|what (?:date|day))\b|\b(?:on|at) what date\b", re.IGNORECASE)
_NUMBER = re.compile(r"\bhow (?:many|much|old|long|far|tall|high|large|big|deep|wide)\b|\bwhat (?:percentage|number)\b",
                     re.IGNORECASE)
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")
_NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                 "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
                 "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety", "hundred",
                 "thousand", "million", "billion", "dozen", "half", "once", "twice", "single", "double")
_DATE_WORDS = (*_MONTHS, "century", "centuries", "decade", "bc", "bce", "ad", "ce")
_WORD = re.compile(r"[a-z]+")


def asked_kind(question: str) -> str | None:
    """The kind of answer ``question`` asks for: ``"year"`` ("In what year ...?", "which decade"), ``"date"`` ("When
    did ...?", "On what date ...?"), ``"number"`` ("How many ...?", "How old ...?"), or ``None``."""
    if _YEAR.search(question):
        return "year"
    if _DATE.search(question):
        return "date"
    if _NUMBER.search(question):
        return "number"
    return None


def answers_kind(answer: str, kind: str | None) -> bool:
    """Whether ``answer`` can be an answer of ``kind`` (:func:`asked_kind`): any answer for ``None``; for a year or
    a date, a digit, a month, a number word or a century; for a number, a digit or a number word. An empty answer
    answers nothing."""
    if kind is None:
        return True
    if not answer.strip():
        return False
    if any(ch.isdigit() for ch in answer):
        return True
    words = set(_WORD.findall(answer.lower()))
    return bool(words & set(_NUMBER_WORDS)) or (kind != "number" and bool(words & set(_DATE_WORDS)))
