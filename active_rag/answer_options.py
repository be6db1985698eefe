"""Answer with one of the question's own options (issue 28, beyond the papers).

A choice question names its candidates: "Which film came out first, Thai Mozhi or How To Avoid Everything?",
"Who is older, Annie Morton or Terry Richardson?". A 0.5B reader with passages in its prompt often answers such a
question with a name from the passages instead, the director it read about rather than the film the question
offers ("Which film has the director who died later, The More The Merrier or Sleep, My Love?" gets "Miguel
Morayta"): 22 of SR-RAG's 64 answers to 2WikiMultihopQA's comparison questions are not among the options.

:func:`question_options` finds the options ("A or B", each a capitalised name), and :class:`OptionsConstraint` is
a logits processor (the interface of :meth:`DecodingSession.generate <active_rag.model.DecodingSession.generate>`):
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

__all__ = ["OptionsConstraint", "check_options_model", "question_options"]

#: Words that may sit inside a name without a capital ("Trader Tom of the China Seas", "Joe + Belle").
_JOINERS = frozenset(
    "of the a an and in on at to for from with de del la le les des du da di von van der den y el & + - – — : / 's".split()
)
#: Capitalised words that open a question rather than a name.
_QUESTION_WORDS = frozenset(
    "which who whom whose what when where why how was were is are did does do has have had can could will would "
    "in of for between".split()
)
_PHRASE_ENDINGS = ("answer is", "answer is:")


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


def question_options(question: str) -> tuple[str, ...]:
    """The two options a choice question offers ("..., A or B?"), or ``()`` when it offers none.

    Each side of the only " or " contributes the run of capitalised words next to it (joiners such as "of the"
    and commas inside: "Angélique, Marquise Des Anges"; a question's opening word is not part of it). Questions
    with no " or ", several, or a side that is not a name ("a genus or a species?") offer none.

    >>> question_options("Who is older, Annie Morton or Terry Richardson?")
    ('Annie Morton', 'Terry Richardson')
    >>> question_options("Was David Fennario or Peter Emanuel Falck born first?")
    ('David Fennario', 'Peter Emanuel Falck')
    >>> question_options("Where was the husband of Octavie Coudreau born?")
    ()
    """
    text = " ".join(question.split()).rstrip("?!. ")
    parts = re.split(r"\s+or\s+", text)
    if len(parts) != 2:
        return ()
    left_text, right_text = parts
    left_words = _name_run(left_text.split(), backwards=True)
    right_words = _name_run(right_text.split(), backwards=False)
    left = " ".join(left_words).strip(" ,;\"'")
    right = " ".join(right_words).strip(" ,;\"'")
    if not left or not right or left.lower() == right.lower():
        return ()
    return (left, right)


def check_options_model(model: Any) -> None:
    """Raise :class:`~active_rag.errors.NeedsLocalModelError` when ``model`` is an OpenAI-compatible endpoint: the
    constraint masks the logits of every step, and an endpoint takes only a fixed ``logit_bias``."""
    if getattr(model, "base_url", None) is not None and not hasattr(model, "model"):
        from .errors import NeedsLocalModelError

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
