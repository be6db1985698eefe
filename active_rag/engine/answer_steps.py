"""The answer stage as a list of steps: what happens to the answer once the trigger's generation is done.

Each step is called in order with the run and the call's parts (the engine, its generation helpers and its retrieval
steps), as ``transformers`` calls its logits processors: ``step(run, parts)`` yields the stream events it makes
(tokens written, a check's decision, a retrieval) and records what it found on the run. A user adds one without
touching the loop (``rag.answer_steps.append(MyStep())``); :class:`~active_rag.components.answer_stage.AnswerStage`
names the built-in ones a method uses (:func:`answer_steps_for`), in this order:

- :class:`ForceAnswer`: DRAGIN App. B, "So the answer is" when the model did not write it, and the model's answer
  after it;
- :class:`AnswerAgain` (``reanswer``, beyond the papers): once the answer's retrievals have chosen the evidence,
  write the answer again from its first word with every passage the prompt holds; the draft is kept in
  ``ActiveRAGResult.draft`` and the new answer's tokens stream again from position 0;
- :class:`LookAgain` (``check``, :mod:`active_rag.answer.check`): when the model is unsure of the finished
  answer, retrieve the question's next passages, answer again and keep the surer answer;
- :class:`SettleVersions` and :class:`SettleDates` (:mod:`active_rag.answer.versions`,
  :mod:`active_rag.answer.dates`): a comparison settled by the versions or dates the reader wrote;
- :class:`AskEachName` (:mod:`active_rag.answer.both_names`): a "yes" to "Are both A and B P?" stands only when
  the reader says "yes" to "Is A P?" and "Is B P?", asked with the passages its answer was written from;
- :class:`AskSame` (:mod:`active_rag.answer.same_value`): "Do A and B have the same X?" answered by comparing the X
  the reader names for A and for B, asked with the passages its answer was written from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from ..answer_end import answer_body_end
from ..stopping import last_complete_sentence_end
from ..answer.check import AnswerCheck, answer_confidence, grounded_in, passages_text
from ..components.answer_stage import ResolvedAnswerStage
from ..answer.both_names import both_question, settle_both, yes_or_no
from ..answer.dates import settle_dates
from ..answer.links import question_articles
from ..answer.read_choice import choose_reading
from ..answer.same_value import same_question, settle_same, value_of
from ..answer.versions import VersionAnswer, settle_versions
from ..types import Retrieval, StreamEvent, TokenEvent, TriggerDecision
from .generation import Generation, text_of
from .retrieving import Retrieving
from .run import EngineView, Run

__all__ = ["FORCED_ANSWER_TOKENS", "HELD_COMPARISON_STANDS", "YES_NO_STANDS", "AnswerAgain", "AnswerStep",
           "AskEachName", "AskSame", "EngineParts", "ForceAnswer", "LookAgain", "SettleDates", "SettleVersions",
           "answer_again", "answer_steps_for"]

#: The most tokens the model writes after a forced answer phrase (beyond ``max_new_tokens``, with the phrase).
FORCED_ANSWER_TOKENS = 32

YES_NO_STANDS = "a yes or no answer stands: no passage can confirm it"
HELD_COMPARISON_STANDS = ("a comparison whose named things' own articles its passages already hold stands: the look "
                          "would read only the question's next passages")


@dataclass(frozen=True)
class EngineParts:
    """What a step works with: the engine (its settings and components), and the call's generation helpers and
    retrieval steps."""

    engine: EngineView
    generation: Generation
    retrieving: Retrieving


class AnswerStep(Protocol):
    """One step of the answer stage (see the module docstring)."""

    name: str
    rewrites: bool
    """Whether it may write the answer again from its first word (a consumer then cannot treat tokens as final)."""

    def describe(self) -> dict[str, Any]:
        """Its entries in :meth:`ActiveRAG.describe <active_rag.engine.loop.ActiveRAG.describe>`."""
        ...

    def __call__(self, run: Run, parts: EngineParts) -> Iterator[StreamEvent]: ...


def _forced_end(text: str) -> int | None:
    """Where the answer written after a forced answer phrase ends in ``text`` (:mod:`active_rag.answer_end`), once
    the answer itself has begun: "So the answer is:\n\nX" does not stop at the first newline."""
    start = len(text) - len(text.lstrip(" :\n"))
    return answer_body_end(text, start)


@dataclass(frozen=True)
class ForceAnswer:
    """DRAGIN App. B: if the answer phrase is missing, append it and let the model finish the sentence.

    An unfinished last sentence (the model stopped, or the budget ran out, before its full stop) is kept and
    closed with a full stop before the phrase: nothing the model wrote is cut, so its tokens stream as they
    are written (:class:`~active_rag.answer_stream.AnswerStream`). The model's answer after the phrase runs to
    its full stop (:mod:`active_rag.answer_end`: "J. Nick Koston", "3.10" and "U.S." are not cut), at most
    ``ActiveRAG.forced_answer_tokens`` tokens."""

    phrase: str
    name: str = "answer-phrase"
    rewrites: bool = False

    def describe(self) -> dict[str, Any]:
        return {}  # the phrase is in the engine's key on its own (``answer_phrase``)

    def __call__(self, run: Run, parts: EngineParts) -> Iterator[StreamEvent]:
        if self.phrase.lower() in run.output_text.lower():
            return
        gen = parts.generation
        text = run.output_text
        if run.session is None:
            gen.open_session(run, False)
        assert run.session is not None
        if not run.output or text.endswith((" ", "\n")):
            sep = ""
        elif text[last_complete_sentence_end(text):].strip():  # an unfinished sentence: end it, never cut it
            sep = " " if text.endswith((",", ";", ":", "-")) else ". "
        else:
            sep = " "
        yield from gen.extend(run, sep + self.phrase)
        steps = yield from gen.generate(run, parts.engine.forced_answer_tokens,
                                        stop=lambda s: _forced_end(text_of(s)) is not None,
                                        processor=gen.processor(run), answer_end=_forced_end)
        run.generated += len(steps)
        yield from gen.accept(run, steps)


def answer_again(run: Run, parts: EngineParts) -> Iterator[TokenEvent]:
    """Drop the answer and write it from its first word, unchecked, with every passage the prompt holds now (the
    context policy's, in its order), then the answer phrase if the engine forces one."""
    gen = parts.generation
    del run.output[:]
    run.attempt += 1
    gen.open_session(run, False)
    assert run.session is not None
    steps = yield from gen.generate(run, parts.engine.max_new_tokens, stop=lambda s: gen.stopped(text_of(s)),
                                    processor=gen.processor(run))
    run.generated += len(steps)
    yield from gen.accept(run, steps)
    gen.trim_repetition(run)
    phrase = parts.engine.answer_phrase
    if phrase:
        yield from ForceAnswer(phrase)(run, parts)  # type: ignore[misc]  # its events are tokens only


@dataclass(frozen=True)
class AnswerAgain:
    """``reanswer``: once a retrieval after the first token added passages, answer again from the first word with
    every passage held (:func:`answer_again`); the draft goes to ``run.draft``."""

    name: str = "reanswer"
    rewrites: bool = True

    def describe(self) -> dict[str, Any]:
        return {"reanswer": True}

    def __call__(self, run: Run, parts: EngineParts) -> Iterator[StreamEvent]:
        if any(r.position > 0 and r.new_ids for r in run.retrievals):
            run.draft = run.output_text.strip()
            yield from answer_again(run, parts)


def _kept_draft_reason(check: AnswerCheck, draft: Any, second: Any) -> str:
    """Why the check kept the draft after looking again (the record's ``reason``)."""
    if draft.tokens == 0 and second.tokens == 0:
        return "neither answer has an answer span (no \"the answer is\"): the draft stands"
    if second.tokens == 0:
        return "the second answer has no answer span"
    if check.select == "new-evidence":
        return (f"the second answer {second.answer!r} is found in the draft's passages and in none the look added: "
                f"the draft {draft.answer!r} stands")
    return (f"rule {check.select!r} keeps the draft {draft.answer!r} (weakest answer token p={draft.min_prob:.3f}) over "
            f"{second.answer!r} (p={second.min_prob:.3f})")


def _passage_text(run: Run, ids: Sequence[str]) -> str:
    """The titles and texts of the passages ``ids`` that the run retrieved, in that order."""
    return passages_text(run.retrieved(ids))


@dataclass(frozen=True)
class LookAgain:
    """``answer_check``: check the finished answer's span; when unsure, retrieve the question's next passages
    (those the prompt does not hold), answer again from the first word and keep the surer answer. The record of
    the check goes to ``run.answer_check`` (``ActiveRAGResult.answer_check``); a run without retrievals has none."""

    check: AnswerCheck
    name: str = "look-again"
    rewrites: bool = True

    def describe(self) -> dict[str, Any]:
        return {"answer_check": self.check.describe()}

    def __call__(self, run: Run, parts: EngineParts) -> Iterator[StreamEvent]:
        if not run.retrievals:
            return
        first = run.output_text.strip()
        run.answer_check = yield from self._look(run, parts)
        if run.answer_check["second"] is not None:
            run.draft = first

    def _decision(self, run: Run, parts: EngineParts, draft: Any, draft_passages: list[str]) -> TriggerDecision:
        check = self.check
        held = _passage_text(run, draft_passages) if check.ground_draft else None
        unsure = check.unsure(draft, held)
        ungrounded = held is not None and draft.tokens > 0 and grounded_in(draft.answer, held) is False
        compared = (unsure and check.held_comparison_stands and draft.tokens > 0
                    and choose_reading(run.question).way == "compare"
                    and not question_articles(parts.engine.retriever, run.question, {p.id for p in run.docs}))
        unsure = unsure and not compared
        decision = TriggerDecision(
            fire=unsure,
            trigger=check.name,
            token=draft.token,
            score=draft.min_prob,
            threshold=check.theta,
            reason=(
                "no answer span" if draft.tokens == 0
                else YES_NO_STANDS if check.grounds and grounded_in(draft.answer, "") is None
                else HELD_COMPARISON_STANDS if compared
                else f"answer {draft.answer!r} is not found in its passages" if ungrounded
                else f"answer token {draft.token!r} has p={draft.min_prob:.3f} {'<' if unsure else '>='} theta={check.theta:g}"
            ),
        )
        decision.output_start = 0
        decision.passage_ids = draft_passages
        return decision

    def _look(self, run: Run, parts: EngineParts) -> Generator[StreamEvent, None, dict[str, Any]]:
        check = self.check
        draft_steps = list(run.output)
        draft_passages = list(run.answer_passages)
        draft = answer_confidence(draft_steps)
        decision = self._decision(run, parts, draft, draft_passages)
        run.decisions.append(decision)
        yield decision
        record: dict[str, Any] = {**check.describe(), "fired": decision.fire, "draft": draft.to_dict(),
                                  "second": None, "kept": "draft"}
        if not decision.fire:
            if decision.reason in (YES_NO_STANDS, HELD_COMPARISON_STANDS):
                record["reason"] = decision.reason
            return record
        retrieval = self._retrieve(run, parts, decision, check.look_query(run.question, text_of(draft_steps)))
        yield retrieval
        if not retrieval.new_ids:  # nothing new to read: the draft stands
            record["reason"] = "the retrieval added no passage"
            return record
        yield from answer_again(run, parts)
        second = answer_confidence(run.output)
        record["second"] = second.to_dict()
        added = [i for i in run.answer_passages if i not in draft_passages]
        if check.keep_second(draft, second, run.question, (_passage_text(run, draft_passages),
                                                             _passage_text(run, run.answer_passages)),
                             _passage_text(run, added)):
            record["kept"] = "second"
            return record
        record["second_text"] = text_of(run.output)  # what the model wrote, kept
        record["reason"] = _kept_draft_reason(check, draft, second)
        run.output[:] = draft_steps  # the draft is surer: it is the answer again, streamed again from position 0
        run.answer_passages = draft_passages
        for n, s in enumerate(draft_steps):
            yield TokenEvent(text=s.text, token_id=s.id, logprob=s.logprob, entropy=s.entropy, position=n,
                             passage_ids=draft_passages, attempt=0)
        return record

    def _retrieve(self, run: Run, parts: EngineParts, decision: TriggerDecision, query: str) -> Retrieval:
        if self.check.query in ("linked", "choose"):  # the names the draft's passages mention, then the question
            answered_from = set(run.answer_passages)
            read = [p for p in run.docs if p.id in answered_from]
            return parts.retrieving.linked(run, read, position=len(run.output), decision=decision,
                                           choose=self.check.query == "choose")
        return parts.retrieving.retrieve(run, [query], position=len(run.output), decision=decision, details={},
                                         formulator="input" if query == run.question else "question+draft")


@dataclass(frozen=True)
class SettleVersions:
    """A comparison of versions settled by the versions the reader wrote (``"reasoning"``) or, for an option it
    gave none, the version the option's own passage in the prompt states (``"passages"``):
    :func:`~active_rag.answer.versions.settle_versions`, recorded in ``run.settled``. With ``asked`` (the default),
    a question that asks for a version gets the version its answer names as the short answer
    (:func:`~active_rag.answer.versions.asked_version`)."""

    rule: Literal["reasoning", "passages"] = "passages"
    asked: bool = True
    name: str = "settle-versions"
    rewrites: bool = False

    def describe(self) -> dict[str, Any]:
        return {"settle_versions": True if self.rule == "reasoning" else self.rule,
                **({"version_asked": True} if self.asked else {})}

    def __call__(self, run: Run, parts: EngineParts) -> Iterator[StreamEvent]:
        own = run.retrieved(run.answer_passages) if self.rule == "passages" else None
        settled = settle_versions(run.question, run.output_text.strip(), own)
        run.settled = None if isinstance(settled, VersionAnswer) and not self.asked else settled
        return iter(())


@dataclass(frozen=True)
class SettleDates:
    """A comparison of dates settled by the dates the reader wrote (:func:`~active_rag.answer.dates.settle_dates`),
    unless a step before it settled the question already."""

    name: str = "settle-dates"
    rewrites: bool = False

    def describe(self) -> dict[str, Any]:
        return {"settle_dates": True}

    def __call__(self, run: Run, parts: EngineParts) -> Iterator[StreamEvent]:
        if run.settled is None:
            run.settled = settle_dates(run.question, run.output_text.strip())
        return iter(())


@dataclass(frozen=True)
class AskEachName:
    """When the finished answer to a "both" question (:func:`~active_rag.answer.both_names.both_question`) is
    "yes", ask the reader the question of each name with the passages its answer was written from, in their order,
    and settle the answer by theirs (:func:`~active_rag.answer.both_names.settle_both`). Each question is answered
    from its first word, as the answer was (its prompt shares the passages' prefix, so only the question and the
    answer are new), and its text and prompt tokens count in the run's cost; nothing streams. The record goes to
    ``run.each_name`` (``ActiveRAGResult.each_name``)."""

    name: str = "each-name"
    rewrites: bool = False

    def describe(self) -> dict[str, Any]:
        return {"ask_each_name": True}

    def __call__(self, run: Run, parts: EngineParts) -> Iterator[StreamEvent]:
        parsed = both_question(run.question)
        if parsed is None or yes_or_no(run.output_text) != "yes":
            return iter(())
        docs = run.retrieved(run.answer_passages)
        asked = [{"question": q, "answer": t, "verdict": yes_or_no(t)}
                 for q, t in zip(parsed.questions, ask_each(run, parts, parsed.questions, docs))]
        run.each_name = {"names": list(parsed.names), "asked": asked, "answer": settle_both([a["verdict"] for a in asked]),
                         "passage_ids": [p.id for p in docs]}
        return iter(())


def ask_each(run: Run, parts: EngineParts, questions: Sequence[str], docs: list[Any]) -> list[str]:
    """The reader's answer to each of ``questions``, written from its first word with ``docs``; the tokens count in the
    run's cost, none stream. The answer's prompt goes back into the prefix cache before each question (its passages'
    prefix is the question's too), so only the question and the answer are prefilled even after a batch's other
    prompts aged it out."""
    texts: list[str] = []
    remember = getattr(run.session, "remember_prefix", None)  # a local model's session: its prompt's KV
    for question in questions:
        if remember is not None and run.layout is not None:  # the answer's prompt, most recent in the prefix cache
            remember(len(run.layout.ids))
        one = dataclasses.replace(run, question=question, output=[], docs=docs, session=None, layout=None,
                                  decisions=[], generated=0, options=False, streamed=0, attempt=0, followed=[])
        for _ in answer_again(one, parts):  # its tokens are not the answer's: nothing streams
            pass
        run.generated += one.generated
        texts.append(one.output_text.strip())
    return texts


@dataclass(frozen=True)
class AskSame:
    """A question whether two names share a value (:func:`~active_rag.answer.same_value.same_question`: "Do A and
    B have the same author?") asks the reader the value of each name with the passages its answer was written
    from, in their order, and is answered by comparing the two values without the model
    (:func:`~active_rag.answer.same_value.settle_same`); the reader's own answer stands when a value is missing.
    The record goes to ``run.each_name`` (``ActiveRAGResult.each_name``, ``rule`` ``"same"``)."""

    name: str = "same"
    rewrites: bool = False

    def describe(self) -> dict[str, Any]:
        return {"ask_same": True}

    def __call__(self, run: Run, parts: EngineParts) -> Iterator[StreamEvent]:
        parsed = same_question(run.question)
        if parsed is None or run.settled is not None:
            return iter(())
        docs = run.retrieved(run.answer_passages)
        texts = ask_each(run, parts, parsed.questions, docs)
        values = [value_of(text) for text in texts]
        asked = [{"question": q, "answer": t, "verdict": v or None} for q, t, v in zip(parsed.questions, texts, values)]
        run.each_name = {"rule": "same", "names": list(parsed.names), "attribute": parsed.attribute, "asked": asked,
                         "answer": settle_same(values), "passage_ids": [p.id for p in docs]}
        return iter(())


#: the built-in steps' classes (a stage's own; any other step in ``ActiveRAG.answer_steps`` is the user's)
BUILT_IN = (ForceAnswer, AnswerAgain, LookAgain, SettleVersions, SettleDates, AskEachName, AskSame)


def answer_steps_for(stage: ResolvedAnswerStage) -> list[AnswerStep]:
    """The built-in steps ``stage`` names, in the order they run (see the module docstring)."""
    steps: list[AnswerStep] = []
    if stage.phrase:
        steps.append(ForceAnswer(stage.phrase))
    if stage.reanswer:
        steps.append(AnswerAgain())
    if stage.check is not None:
        steps.append(LookAgain(stage.check))
    if stage.versions:
        steps.append(SettleVersions(stage.versions))
    if stage.dates:
        steps.append(SettleDates())
    if stage.each_name:
        steps.append(AskEachName())
    if stage.same:
        steps.append(AskSame())
    return steps
