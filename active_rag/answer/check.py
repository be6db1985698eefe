"""Check the finished answer, and look again with more passages when the model is unsure of it (beyond the papers).

FLARE (Jiang et al. 2023, §3.2, Eq. 3) retrieves when any token of the look-ahead sentence has probability below
theta. :class:`AnswerCheck` applies the same test where it matters most, to the *answer span* of the finished
answer (the words after "So the answer is", as DRAGIN App. B reads them): when a token of the answer has
probability below ``theta``, it retrieves the question's next-ranked passages (those the prompt does not yet
hold; with the ``accumulate`` policy the prompt keeps the first ones too), writes the answer again from its first
word, and keeps **whichever of the two answers the model is surer of** (:func:`answer_confidence`: by default
the lowest probability of the answer span's tokens under the prompt that wrote it, FLARE's own measure; or their
mean log-probability).

Why, from the rows (docs/context.md): on HotpotQA 150 retrieving three passages and retrieving six give different
answers to 82 of 150 questions; either one is better on 37 of them, and picking the better answer per question
would score F1 39.9 against 30.8 and 31.6 (2WikiMultihopQA: 22.7 against 16.9 and 17.0). More passages bring the
missing hop on some questions and distract the reader on others; the answer's own probability says which.

The second prompt holds the first prompt's passages first (``accumulate``), so its prefill starts from the
prefix cache: the look costs one more answer, only when the check fires.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..answer_span import answer_span
from ..errors import InvalidOptionError
from .normalize import normalize_answer
from ..types import Passage, TokenStep

__all__ = ["GROUNDED_RULES", "PASSAGE_RULES", "SELECT_RULES", "AnswerCheck", "AnswerConfidence", "answer_confidence",
           "answer_span", "echoes_question", "grounded_in", "make_answer_check", "passages_text", "unsupported_change"]


#: how the answer check picks between the draft and the second answer (:meth:`AnswerCheck.keep_second`)
SELECT_RULES = ("grounded", "grounded-second", "mean", "min", "new-evidence", "second")
#: the rules that first keep the answer its own passages contain when only one of the two does
GROUNDED_RULES = ("grounded", "grounded-second")
#: the rules that read the passages' text (:meth:`AnswerCheck.keep_second`'s ``passages`` and ``added``)
PASSAGE_RULES = (*GROUNDED_RULES, "new-evidence")
#: what the second look retrieves with: the question (its next-ranked passages), or the question and the draft
LOOK_QUERIES = ("question", "draft", "linked", "choose")


@dataclass
class AnswerConfidence:
    """How sure the model was of an answer: over the answer span's tokens, the mean log-probability and the lowest
    probability (with its token). ``tokens == 0``: no answer span (confidence ``-inf``)."""

    answer: str
    mean_logprob: float
    min_prob: float
    token: str | None
    tokens: int

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if math.isinf(self.mean_logprob):
            out["mean_logprob"] = None
        return out


def answer_confidence(steps: Sequence[TokenStep]) -> AnswerConfidence:
    """The model's confidence in the answer the tokens ``steps`` spell: every token that overlaps the answer span
    (:func:`answer_span`) counts, with the log-probability it was generated with (forced words count 0)."""
    text = "".join(s.text for s in steps)
    span = answer_span(text)
    if span is None:
        return AnswerConfidence(answer="", mean_logprob=-math.inf, min_prob=0.0, token=None, tokens=0)
    start, end = span
    picked: list[TokenStep] = []
    offset = 0
    for step in steps:
        token_end = offset + len(step.text)
        if token_end > start and offset < end and step.text.strip():
            picked.append(step)
        offset = token_end
    if not picked:
        return AnswerConfidence(answer=text[start:end], mean_logprob=-math.inf, min_prob=0.0, token=None, tokens=0)
    lowest = min(picked, key=lambda s: s.logprob)
    return AnswerConfidence(
        answer=text[start:end],
        mean_logprob=sum(s.logprob for s in picked) / len(picked),
        min_prob=math.exp(lowest.logprob),
        token=lowest.text,
        tokens=len(picked),
    )


def echoes_question(answer: str, question: str) -> bool:
    """Whether ``answer`` only repeats words of ``question``: its SQuAD-normalised text (:func:`normalize_answer`)
    is not empty and occurs in the normalised question as whole words."""
    words = normalize_answer(answer)
    return bool(words) and f" {words} " in f" {normalize_answer(question)} "


def passages_text(passages: Iterable[Passage]) -> str:
    """The titles and texts of ``passages``, in order: what :func:`grounded_in` searches."""
    return "\n".join(f"{p.title}\n{p.text}" for p in passages)


def grounded_in(answer: str, passages: str) -> bool | None:
    """Whether ``answer`` occurs in ``passages`` (the text of the passages its prompt held), both SQuAD-normalised
    (:func:`normalize_answer`), as whole words; ``None`` for "yes", "no" and an empty answer, which no passage
    spells out. A span the prompt does not contain was not read there: the 0.5B reader's wrong answers are often
    such ("4 February 1959" from an exemplar, a director for a film)."""
    words = normalize_answer(answer)
    if words in ("", "yes", "no"):
        return None
    return f" {words} " in f" {normalize_answer(passages)} "


def unsupported_change(draft: str, second: str, read: str, added: str) -> bool:
    """Whether the second answer changes the draft without evidence from the look: the draft is found in the
    passages it was written from (``read``, :func:`grounded_in`), and the second answer, another one, is found there
    too and in none of the passages the look added (``added``). The reader then changed its mind on evidence it had
    already read, distracted by the added passages, and the draft stands (``select="new-evidence"``). A "yes" or
    "no", which no passage spells out, is never such a change.

    Why, from the ``look-again-choose`` rows written with ``select="second"`` (qwen2.5-coder-1.5b, ten slices): of the
    50 second answers this test rejects, the draft is the better one for 27 and the worse for 7, and no slice's F1
    falls (docs/context.md, "Keep the draft when the look brought nothing new")."""
    if normalize_answer(draft) == normalize_answer(second):
        return False
    return bool(grounded_in(draft, read)) and bool(grounded_in(second, read)) and grounded_in(second, added) is False


@dataclass
class AnswerCheck:
    """Check the finished answer and look again when unsure (see the module docstring).

    Args:
        theta: look again when any answer token has probability below ``theta`` (FLARE's test, Eq. 3, on the
            answer span); ``1.0`` looks again after every answer. No answer span counts as unsure.
        select: which answer to keep after a look: the one the model is surer of, by ``"min"`` (the higher lowest
            token probability of the span; FLARE's own measure; the default, chosen on the first 32 HotpotQA dev
            questions, where it beat ``"mean"`` at every theta) or ``"mean"`` (the higher mean log-probability over
            the span), the draft on a tie; or ``"second"`` (always the new one, as ``reanswer`` does); or
            ``"new-evidence"``: the second one unless the look brought no evidence for the change
            (:func:`unsupported_change`: the draft and the second answer are both found in the draft's passages,
            and the second in none of the passages the look added), when the draft stands.
            ``"grounded"`` first keeps the answer its own prompt's passages contain when only one of the two does
            (:func:`grounded_in`), else the surer one by ``"min"``; ``"grounded-second"`` likewise, else the second
            answer, whose prompt holds every passage the draft's held and the look's. Why, from the
            ``look-again-linked`` rows: where both answers are found in their passages and score differently, the
            surer one is the better one at chance (17 of 32 on HotpotQA 150 with the 1.5B model, 5 of 12 on the
            first 50 2WikiMultihopQA questions), and the second is the better one in 19 of 32 and 9 of 12
            (docs/context.md#keep-the-second-answer).
        avoid_echo: before the confidence rule, when exactly one of the two answers only repeats words of the
            question (:func:`echoes_question`: "Annie Morton" to "Who directed the film that starred Annie
            Morton?"), keep the other. A 0.5B reader often answers with the first hop's entity, which the question
            names. Off by default: found on the HotpotQA rows (+1.4 F1 there), it lost on the first 31
            2WikiMultihopQA questions (-3.3), whose choice questions ("Which film ..., A or B?") are answered by
            one of the question's own names (docs/context.md#look-again).
        query: what the second look retrieves with: ``"question"`` (the question's next-ranked passages, the
            default) or ``"draft"`` (the question followed by the draft answer's text, its reasoning and answer: the
            bridge entity the draft names finds the next hop, as FLARE retrieves with the generated sentence, §3.1)
            or ``"linked"`` (the own articles of the names the draft's passages mention and the question does not,
            then the question's next passages: :func:`active_rag.answer.links.linked_articles`) or ``"choose"``
            (what the question's form chooses, :func:`active_rag.answer.read_choice.choose_reading`: a comparison
            of named things reads their own articles, any other question the links; the ``look-again-choose``
            preset). Each way the retrieval asks for passages the prompt does not hold.
    """

    theta: float = 1.0
    select: str = "min"
    avoid_echo: bool = False
    query: str = "question"
    ground_draft: bool = False
    """A draft stands only when its answer is found in its own passages (:func:`grounded_in`): one that is not is
    unsure whatever its probability (a "yes" or "no", which no passage spells out, is judged by ``theta``). The 1.5B
    reader is sure of the answers it makes up: on HotpotQA dev a quarter of its drafts from three passages are not
    found in them (docs/context.md, "Read nothing more when the draft is sure")."""
    held_comparison_stands: bool = False
    """With ``query="choose"``: an unsure draft of a comparison (:func:`~active_rag.answer.read_choice.choose_reading`)
    whose named things' own articles its passages already hold stands, for the look would read only the question's
    next passages (:func:`~active_rag.answer.links.question_articles` finds none). Estimated from the rows, not yet
    in a preset (docs/context.md, "Read nothing more when the draft is sure")."""
    name: str = "answer-check"

    def __post_init__(self) -> None:
        if not 0.0 <= self.theta <= 1.0:
            raise InvalidOptionError(f"answer check theta must be a probability in [0, 1], got {self.theta!r}.")
        if self.select not in SELECT_RULES:
            raise InvalidOptionError(
                f"Unknown answer selection {self.select!r}: use one of {', '.join(SELECT_RULES)}."
            )
        if self.query not in LOOK_QUERIES:
            raise InvalidOptionError(
                f"Unknown answer check query {self.query!r}: use one of {', '.join(LOOK_QUERIES)}."
            )
        if self.held_comparison_stands and self.query != "choose":
            raise InvalidOptionError("held_comparison_stands reads the per-question choice of the look: use it with "
                                     "query='choose'.")

    @property
    def grounds(self) -> bool:
        """Whether the selection rule first keeps the answer found in its passages (:data:`GROUNDED_RULES`)."""
        return self.select in GROUNDED_RULES

    @property
    def reads_passages(self) -> bool:
        """Whether the selection rule reads the passages' text (:data:`PASSAGE_RULES`)."""
        return self.select in PASSAGE_RULES

    def unsure(self, confidence: AnswerConfidence, passages: str | None = None) -> bool:
        """Whether to look again: no answer span, or an answer token with probability below ``theta``, or (with
        ``ground_draft``) an answer not found in ``passages``, the text of the draft's passages. With a grounded
        rule (:data:`GROUNDED_RULES`), a "yes" or "no" draft stands: no passage can confirm it, and the model's
        confidence does not choose between yes and no (StrategyQA 229: keeping the surer one scored 52.4 against the
        draft's 54.6)."""
        if self.grounds and confidence.tokens > 0 and grounded_in(confidence.answer, "") is None:
            return False
        if confidence.tokens == 0:
            return True
        if self.ground_draft and passages is not None and grounded_in(confidence.answer, passages) is False:
            return True
        return confidence.min_prob < self.theta

    def keep_second(self, draft: AnswerConfidence, second: AnswerConfidence, question: str = "",
                    passages: tuple[str, str] | None = None, added: str | None = None) -> bool:
        """Whether the second answer replaces the draft (``question``: for ``avoid_echo``; ``passages``: the text
        of the draft's and of the second answer's prompt passages, for the rules that read them; ``added``: the text
        of the passages the look added, for ``"new-evidence"``; without them that rule keeps the second answer)."""
        if self.select == "second":
            return True
        if self.select == "new-evidence":  # "second", except where the look brought nothing for the change
            return passages is None or added is None or not unsupported_change(draft.answer, second.answer,
                                                                               passages[0], added)
        if self.grounds and passages is not None:
            found = grounded_in(draft.answer, passages[0]), grounded_in(second.answer, passages[1])
            if bool(found[0]) != bool(found[1]) and None not in found:
                return bool(found[1])
        if self.avoid_echo and question:
            echo = echoes_question(draft.answer, question), echoes_question(second.answer, question)
            if echo[0] != echo[1]:
                return echo[0]
        if self.select == "grounded-second":
            return second.tokens > 0 or draft.tokens == 0
        if self.select in ("min", "grounded"):
            return (second.tokens > 0, second.min_prob) > (draft.tokens > 0, draft.min_prob)
        return second.mean_logprob > draft.mean_logprob

    def look_query(self, question: str, draft: str) -> str:
        """The second look's query (``query``): the question, or the question and the ``draft`` answer's text
        (``"linked"`` and ``"choose"`` ask with names the engine reads off the passages: this gives the question)."""
        return f"{question} {draft.strip()}".strip() if self.query == "draft" else question

    def describe(self) -> dict[str, Any]:
        # avoid_echo and query only when not the defaults: rows written before the options existed keep their key
        return {"name": self.name, "theta": self.theta, "select": self.select,
                **({"avoid_echo": True} if self.avoid_echo else {}),
                **({"query": self.query} if self.query != "question" else {}),
                **({"ground_draft": True} if self.ground_draft else {}),
                **({"held_comparison_stands": True} if self.held_comparison_stands else {})}


def make_answer_check(spec: AnswerCheck | bool | float | None) -> AnswerCheck | None:
    """``None``/``False``: no check; ``True``: the defaults; a float: that ``theta``; an :class:`AnswerCheck` as is."""
    if spec is None or spec is False:
        return None
    if spec is True:
        return AnswerCheck()
    if isinstance(spec, AnswerCheck):
        return spec
    if isinstance(spec, (int, float)):
        return AnswerCheck(theta=float(spec))
    raise InvalidOptionError(f"answer_check must be an AnswerCheck, a theta in [0, 1], True or None; got {spec!r}.")
