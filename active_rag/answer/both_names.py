"""Ask a "both" question name by name (beyond the papers).

HotpotQA's comparison questions often ask whether two names share a property: "Are both Jim McBride and Neil Jordan
American?", "Are Ranger Rick and Tennis both sports magazines?". The gold answer is "no" for about half of them, and
the 1.5B reader answers "yes" to most (docs/context.md, "Where the misses are"), with the passages that say
otherwise in its prompt. :func:`both_question` reads such a question into one question a name ("Is Jim McBride
American?", "Is Neil Jordan American?"). With ``AnswerStage(each_name=True)`` the engine asks the reader each of
them, with the passages its answer was written from, when it answered "yes"; :func:`settle_both` then keeps the
"yes" only when each name's answer is "yes", answers "no" when one of them is "no", and otherwise lets the reader's
answer stand. A "no" is not asked again: the bias is toward "yes".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from active_rag.answer.options import _is_name as _opens_with_name
from active_rag.answer.options import _is_name_word, _name_run
from active_rag.answer_span import answer_span

__all__ = ["BothQuestion", "both_question", "settle_both", "yes_or_no"]

#: The question's verb and the verb of a question about one of its names.
_ONE = {"are": "is", "were": "was", "do": "does", "have": "has", "is": "is", "was": "was", "did": "did",
        "can": "can", "could": "could", "does": "does", "has": "has", "will": "will", "would": "would"}
#: A name's last word that is its property when nothing follows it ("... and Neil Jordan American?").
_DEMONYM_ENDINGS = ("an", "ian", "ese", "ish", "ic", "i")
_BOTH_FIRST = re.compile(r"^(\w+)\s+both\s+(.+?),?\s+and\s+(.+)$", re.IGNORECASE)
_BOTH_AFTER = re.compile(r"^(\w+)\s+(.+?),?\s+and\s+(.+?)\s+both\s+(.+)$", re.IGNORECASE)


@dataclass(frozen=True)
class BothQuestion:
    """A question whether two names both have a property: the names, the property, and one question a name."""

    names: tuple[str, str]
    predicate: str
    questions: tuple[str, str]


def _is_name(text: str) -> bool:
    """A capitalised name after an optional article, whose last word is a name word too."""
    return _opens_with_name(text) and _is_name_word(text.split()[-1])


def _split_name(rest: str) -> tuple[str, str]:
    """The name that opens ``rest`` and what follows it: the run of name words (joiners inside), without a last word
    that reads as a demonym when the run is three words or more or nothing would follow."""
    words = rest.split()
    name = _name_run(words, backwards=False)
    tail = words[len(name):]
    if len(name) >= 2 and name[-1].lower().endswith(_DEMONYM_ENDINGS) and (len(name) >= 3 or not tail):
        tail = [name.pop(), *tail]
    if not tail and len(name) >= 2:
        tail = [name.pop()]
    return " ".join(name), " ".join(tail)


def both_question(question: str) -> BothQuestion | None:
    """The question read name by name, or ``None`` when it does not ask whether two names both have a property.

    >>> both_question("Are both Jim McBride and Neil Jordan American?").questions
    ('Is Jim McBride American?', 'Is Neil Jordan American?')
    >>> both_question("Are Ranger Rick and Tennis both sports magazines?").questions
    ('Is Ranger Rick sports magazines?', 'Is Tennis sports magazines?')
    >>> both_question("Are Laleli Mosque and Esma Sultan Mansion in the same neighborhood?") is None
    True
    """
    text = " ".join(question.split()).rstrip("?!. ")
    after = _BOTH_AFTER.match(text)
    if after:
        verb, first, second, predicate = after.groups()
    else:
        first_match = _BOTH_FIRST.match(text)
        if not first_match:
            return None
        verb, first, rest = first_match.groups()
        second, predicate = _split_name(rest)
    one = _ONE.get(verb.lower())
    words = predicate.split()
    if words and words[0].lower() in _ONE:  # "Are both A and B are involved in ..."
        words = words[1:]
    predicate = " ".join(words)
    first, second = first.strip(" ,"), second.strip(" ,")
    if one is None or not predicate or not _is_name(first) or not _is_name(second) or " same " in f" {predicate} ":
        return None
    one = one.capitalize()
    return BothQuestion((first, second), predicate, (f"{one} {first} {predicate}?", f"{one} {second} {predicate}?"))


def yes_or_no(answer: str) -> str | None:
    """``"yes"`` or ``"no"`` when the answer span (what follows "So the answer is", else the whole answer) opens
    with it, else ``None``.

    >>> yes_or_no("Neil Jordan is an Irish film director. So the answer is no.")
    'no'
    >>> yes_or_no("Yes, both are orchids.")
    'yes'
    """
    span = answer_span(answer)
    text = answer if span is None else answer[span[0]:span[1]]
    words = re.findall(r"[a-z]+", text.lower())
    return words[0] if words and words[0] in ("yes", "no") else None


def settle_both(verdicts: list[str | None]) -> str | None:
    """The question's answer from each name's: ``"no"`` when one is "no", ``"yes"`` when all are "yes", else
    ``None`` (an answer that is neither: the reader's answer stands)."""
    if "no" in verdicts:
        return "no"
    if verdicts and all(v == "yes" for v in verdicts):
        return "yes"
    return None
