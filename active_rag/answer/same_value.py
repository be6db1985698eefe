"""Ask a "same" question name by name (beyond the papers).

"Do parso and jedi have the same author?", "Were Halldór Laxness and Timothy Leary from the same country?": the
reader must find one value for each name and compare them, and the small readers answer such a question near
chance. On pydocs' same-author questions (dev, 32, half "yes") the 1.5B reader answered 16 right and said "no" to 11
of the 17 whose answer is "yes", with both packages' headers in its prompt, while it names a package's author right
in nine questions of ten. :func:`same_question` reads such a question into one question a name ("Who is the author
of parso?", "Who is the author of jedi?"); with ``AnswerStage(same=True)`` the engine asks the reader each of them,
with the passages its answer was written from, and :func:`settle_same` compares the two values without the model,
as the date rule compares the dates the reader wrote (:mod:`active_rag.answer.dates`): "yes" when one value's
words are among the other's ("Microsoft" and "Microsoft Corporation"), "no" when they differ, and the reader's own
answer stands when a value is missing ("unknown", nothing after the answer phrase).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from active_rag.answer.normalize import normalize_answer
from active_rag.answer_span import answer_span

__all__ = ["SameQuestion", "same_question", "same_value", "settle_same", "value_of"]

#: The question's verb and the verb of a question about one of its names.
_ONE = {"are": "is", "were": "was", "is": "is", "was": "was", "do": "does", "does": "does", "did": "did"}
#: What a value is of a person: asked with "Who is ...?".
_PERSONS = frozenset("author authors maintainer maintainers creator creators founder founders director directors "
                     "developer developers composer composers producer producers writer writers designer designers "
                     "owner owners father mother parent parents publisher publishers".split())
_QUESTION = re.compile(r"^(are|were|is|was|do|does|did)\s+(?:both\s+)?(.+?)\s+(?:both\s+)?"
                       r"(have|has|had|share|shared|of|from|in|located in|published in|based in|born in|founded in)"
                       r"\s+(?:both\s+)?the\s+same\s+([\w\s-]+)$", re.IGNORECASE)
_HAVE = ("have", "has", "had", "share", "shared")
#: Words no name holds: a clause ("... have the directors that share the same ...") is not one value a name.
_CLAUSE = re.compile(r"\b(?:have|has|had|share|shares|shared|that|who|which|whose)\b", re.IGNORECASE)
#: Answers that name no value.
_NO_VALUE = re.compile(r"^(?:unknown|none|n/?a|not (?:mentioned|specified|stated|given|available|known|found|provided)"
                       r"|(?:it is |it's )?not clear|no information|(?:i )?(?:do not|don't) know|cannot be determined|yes|no)\b",
                       re.IGNORECASE)
_ADDRESS = re.compile(r"<[^>]*>|\S+@\S+|https?://\S+")
#: One country, written the ways a reader writes it.
_SAME_COUNTRY = {
    "united states": ("american", "us", "usa", "u s", "u s a", "united states of america", "america", "americans"),
    "united kingdom": ("british", "uk", "u k", "great britain", "britain"),
}
_ALIASES = {alias: name for name, aliases in _SAME_COUNTRY.items() for alias in aliases}
_JOINERS = frozenset({"and", "&", "of", "the", "a", "an", "by"})


@dataclass(frozen=True)
class SameQuestion:
    """A question whether two names share a value: the names, what the value is, and one question a name."""

    names: tuple[str, str]
    attribute: str
    questions: tuple[str, str]


def _one_question(verb: str, relation: str, attribute: str, name: str) -> str:
    """The question of one name: "Who is the author of A?", "Which country was A from?", "In which country is A
    published?", "What is the nationality of A?"."""
    relation = relation.lower()
    if relation in _HAVE or relation == "of":
        return f"{'Who' if attribute.split()[-1].lower() in _PERSONS else 'What'} is the {attribute} of {name}?"
    be = "was" if verb.lower() in ("were", "was", "did") else "is"
    if relation == "from":
        return f"Which {attribute} {be} {name} from?"
    if relation == "in":
        return f"In which {attribute} {be} {name}?"
    participle = relation.split()[0]  # "located in", "born in", ...
    return f"In which {attribute} {be} {name} {participle}?"


def same_question(question: str) -> SameQuestion | None:
    """The question read name by name, or ``None`` when it does not ask whether two names share a value.

    >>> same_question("Do parso and jedi have the same author?").questions
    ('Who is the author of parso?', 'Who is the author of jedi?')
    >>> same_question("Were Halldór Laxness and Timothy Leary from the same country?").questions
    ('Which country was Halldór Laxness from?', 'Which country was Timothy Leary from?')
    >>> same_question("Are Mauritz Stiller and Johannes Grenzfurthner both of the same nationality?").questions
    ('What is the nationality of Mauritz Stiller?', 'What is the nationality of Johannes Grenzfurthner?')
    >>> same_question("Are Parents and Madame Figaro published in the same country?").questions[1]
    'In which country is Madame Figaro published?'
    >>> same_question("Are both Jim McBride and Neil Jordan American?") is None
    True
    """
    text = " ".join(question.split()).rstrip("?!. ")
    match = _QUESTION.match(text)
    if not match:
        return None
    verb, names, relation, attribute = match.groups()
    first, sep, second = names.partition(" and ")
    first, second, attribute = first.strip(" ,:"), second.strip(" ,:"), attribute.strip()
    if not sep or not first or not second or not attribute or len(attribute.split()) > 3 \
            or _CLAUSE.search(first) or _CLAUSE.search(second):
        return None
    if first.lower().startswith("both "):
        first = first[5:]
    return SameQuestion((first, second), attribute,
                        (_one_question(verb, relation, attribute, first), _one_question(verb, relation, attribute, second)))


def value_of(answer: str) -> str:
    """The value an answer names: the span after "the answer is" (else the whole answer), without e-mail addresses
    and links; empty when it names none ("unknown", "not mentioned")."""
    span = answer_span(answer)
    text = (answer if span is None else answer[span[0]:span[1]]).strip()
    text = _ADDRESS.sub(" ", text).strip(" ,;.")
    return "" if not text or _NO_VALUE.match(text) else text


def _words(value: str) -> frozenset[str]:
    norm = normalize_answer(value)
    norm = _ALIASES.get(norm, norm)
    return frozenset(w for w in norm.split() if w not in _JOINERS)


def same_value(first: str, second: str) -> bool | None:
    """Whether two values are the same: one's words among the other's (after :func:`normalize_answer`, the ways of
    writing the United States and the United Kingdom made one); ``None`` when either is empty.

    >>> same_value("Microsoft Corporation", "Microsoft")
    True
    >>> same_value("American", "United States")
    True
    >>> same_value("Andrew Svetlov", "Andrew Godwin")
    False
    """
    a, b = _words(first), _words(second)
    if not a or not b:
        return None
    return a <= b or b <= a


def settle_same(values: list[str]) -> str | None:
    """The question's answer from each name's value: ``"yes"`` when they are the same, ``"no"`` when they differ,
    else ``None`` (a value missing: the reader's answer stands)."""
    if len(values) != 2:
        return None
    same = same_value(values[0], values[1])
    return None if same is None else ("yes" if same else "no")
