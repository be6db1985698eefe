"""How an answer is finished: forced words (the answer phrase, a bridge's name) and answering again.

:class:`AnswerSteps` holds the engine's steps that write words into the answer other than by checked generation
(:class:`~active_rag.loop.ActiveRAG` inherits them):

- :meth:`AnswerSteps._extend`: append text as if the model wrote it (log-probability 0): DRAGIN's answer phrase
  (App. B) and the ``bridge`` trigger's seed, the name of the entity the next sentence starts from.
- :meth:`AnswerSteps._force_answer`: DRAGIN App. B, "So the answer is" when the model did not write it.
- :meth:`AnswerSteps._answer_again` (``reanswer``, beyond the papers): once the answer's retrievals
  have chosen the evidence, write the answer again from its first word with every passage the prompt holds.
  The draft's checks found the evidence; a fresh answer reads all of it at once, as a single-round prompt does,
  instead of going on from a draft that committed to a wrong first hop. The draft is kept in
  ``ActiveRAGResult.draft``; the new answer's tokens stream again from position 0.
- :meth:`AnswerSteps._look_again` (``answer_check``, :mod:`active_rag.methods.answer_check`): when the model is unsure
  of the finished answer, retrieve the question's next passages, answer again and keep the surer answer.
- :meth:`AnswerSteps._ask_each_name` (``AnswerStage(each_name=True)``, :mod:`active_rag.methods.both_names`): a
  "yes" to "Are both A and B P?" stands only when the reader, asked "Is A P?" and "Is B P?" with the passages its
  answer was written from, says "yes" to each.
- :meth:`AnswerSteps._processor` (``answer_options``, :mod:`active_rag.methods.answer_options`): a choice question's
  answer is one of its own options.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any

from .answer_check import AnswerCheck, answer_confidence, grounded_in, passages_text
from .answer_options import OptionsConstraint, question_options
from .both_names import both_question, settle_both, yes_or_no
from ..decoding.constrained import chain
from .linked import Links, follow_links, question_articles
from .read_choice import choose_reading
from ..answer_end import answer_body_end
from ..decoding.stopping import completed_answer_end, has_completed_answer, last_complete_sentence_end
from ..types import Passage, StreamEvent, TokenEvent, TokenStep, TriggerDecision

__all__ = ["ANSWER_PHRASE", "AnswerSteps", "resolve_answer_phrase", "retrieved_passages"]

#: The phrase the DRAGIN and FLARE prompts' exemplars end their answers with ("... So the answer is X.").
ANSWER_PHRASE = "So the answer is"


YES_NO_STANDS = "a yes or no answer stands: no passage can confirm it"
HELD_COMPARISON_STANDS = ("a comparison whose named things' own articles its passages already hold stands: the look "
                          "would read only the question's next passages")

#: The most tokens the model writes after a forced answer phrase (beyond ``max_new_tokens``, with the phrase).
FORCED_ANSWER_TOKENS = 32

#: a mark that may end a sentence: a segment cut after its first sentence streams no token past one live
_SENTENCE_MARK = re.compile(r"[.!?\n]")

#: text that ends with a sentence-end mark and spaces: what follows decides whether the answer ended there
_AFTER_MARK = re.compile(r"[.!?][\"'”’)\]]*\s*$")


def _text(steps: Sequence[TokenStep]) -> str:
    return "".join(s.text for s in steps)


def _tokens_before(steps: Sequence[TokenStep], chars: int) -> int:
    """How many leading tokens of ``steps`` begin within their first ``chars`` characters (a token that holds the
    answer's end is kept whole)."""
    keep, total = 0, 0
    while keep < len(steps) and total < chars:
        total += len(steps[keep].text)
        keep += 1
    return keep


def _forced_end(text: str) -> int | None:
    """Where the answer written after a forced answer phrase ends in ``text`` (:mod:`active_rag.answer_end`), once
    the answer itself has begun: "So the answer is:\n\nX" does not stop at the first newline."""
    start = len(text) - len(text.lstrip(" :\n"))
    return answer_body_end(text, start)


def resolve_answer_phrase(phrase: str | None, answer_check: bool, answer_options: bool) -> str | None:
    """The engine's ``answer_phrase``: ``"auto"`` is :data:`ANSWER_PHRASE` when an answer check or ``answer_options``
    reads the answer span after it (without it the check finds no span and looks again every time), else ``None``;
    anything else as given."""
    if phrase == "auto":
        return ANSWER_PHRASE if answer_check or answer_options else None
    return phrase


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


def retrieved_passages(run: Any, ids: Sequence[str]) -> list[Passage]:
    """The passages ``ids`` that the run retrieved, in that order."""
    found = {p.id: p for r in run.retrievals for p in r.passages}
    return [found[i] for i in ids if i in found]


def _passage_text(run: Any, ids: Sequence[str]) -> str:
    """The titles and texts of the passages ``ids`` that the run retrieved, in that order."""
    return passages_text(retrieved_passages(run, ids))


class AnswerSteps:
    """Answer-writing steps of the engine; see the module docstring. The engine provides the model, the settings
    and the session helpers named below."""

    model: Any
    retriever: Any
    top_k: int
    answer_phrase: str | None
    max_new_tokens: int
    answer_check: AnswerCheck | None
    answer_options: bool
    forced_answer_tokens: int = FORCED_ANSWER_TOKENS
    """The most tokens the model writes after a forced answer phrase (the command line lowers it to fit
    ``--max-new-tokens``)."""

    def _accept(self, run: Any, steps: Sequence[TokenStep]) -> Iterator[TokenEvent]:  # pragma: no cover - engine
        raise NotImplementedError

    def _open_session(self, run: Any, capture: bool, with_docs: bool = True) -> None:  # pragma: no cover - engine
        raise NotImplementedError

    def _stopped(self, text: str) -> bool:  # pragma: no cover - engine
        raise NotImplementedError

    def _trim_repetition(self, run: Any) -> None:  # pragma: no cover - engine
        raise NotImplementedError

    def _retrieve(self, run: Any, queries: Sequence[str], **kwargs: Any) -> Any:  # pragma: no cover - engine
        raise NotImplementedError

    def _processor(self, run: Any, base: Any = None) -> Any:
        """The logits processor of a generation: ``base`` (the trigger's), then with ``answer_options`` the
        question's options after the answer phrase (built once a run)."""
        if not self.answer_options:
            return base
        if run.options is None:
            options = question_options(run.question)
            run.options = OptionsConstraint(self.model, options) if options else False
        return chain(base, run.options or None)

    def _generate(
        self, run: Any, limit: int, *, stop: Callable[[list[TokenStep]], bool] | None, processor: Any,
        live: bool = True, by_sentence: bool = False, answer_end: Callable[[str], int | None] | None = None,
    ) -> Generator[TokenEvent, None, list[TokenStep]]:
        """Generate up to ``limit`` tokens in the open session and return them. ``live``: no check will see them (the
        caller accepts them as they are), so each token streams as soon as it is generated, a :class:`TokenEvent`
        at the position it takes in the answer; with ``by_sentence`` (a segment cut after its first sentence) only
        until a sentence-end mark, the rest when accepted, after the cut. ``run.streamed`` counts those streamed
        (:meth:`_accept` streams the others).

        When ``stop`` ends the generation on a finished answer sentence, the stop rule has seen a token past its
        full stop (it waits for it: "3." may become "3.10"); the tokens after the answer's end are cut off again (they
        count in ``run.generated``, the others are the caller's to count) and the session is marked finished, so
        that the engine stops there. ``answer_end`` says where the answer ends in
        the generated text (default: the answer-complete stop rule on the output, :meth:`_answer_end`). A live token
        that stops the generation, or only whitespace after a sentence-end mark, streams only once the next token
        shows that it stays, so a token that is cut off never streams."""
        assert run.session is not None
        run.answer_passages = list(run.session_passages)
        ids = list(run.answer_passages)
        steps: list[TokenStep] = []
        run.streamed = 0
        text = ""
        halted = False
        session = run.session
        for step in session.generate(limit, stop=None if stop is None else (lambda _steps: halted),
                                     logits_processor=processor):
            steps.append(step)
            text += step.text
            halted = stop is not None and stop(steps)
            if not live or (by_sentence and _SENTENCE_MARK.search(text)):
                live = False
                continue
            if halted or (not step.text.strip() and _AFTER_MARK.search(text)):
                continue  # may be cut off: streams with the next token, or when accepted
            for n in range(run.streamed, len(steps)):
                s = steps[n]
                yield TokenEvent(text=s.text, token_id=s.id, logprob=s.logprob, entropy=s.entropy,
                                 position=len(run.output) + n, passage_ids=ids, attempt=run.attempt)
            run.streamed = len(steps)
        if halted and steps:
            end = answer_end(text) if answer_end is not None else self._answer_end(run, text)
            keep = _tokens_before(steps, end) if end is not None else len(steps)
            if keep < len(steps):
                session.crop(steps[keep].position)
                session.finished = True  # the answer is complete: nothing more is generated after it
                run.generated += len(steps) - keep  # the look-ahead was generated: it counts in the run's cost
                del steps[keep:]
                run.streamed = min(run.streamed, keep)
        return steps

    def _answer_end(self, run: Any, text: str) -> int | None:
        """Where the completed answer sentence ends in ``text``, generated after the output so far, when the engine
        stops on it (``stop_when_answered``, or :func:`has_completed_answer` as its ``stop``); else ``None``."""
        if not (getattr(self, "stop_when_answered", False) or getattr(self, "stop", None) is has_completed_answer):
            return None
        prefix = run.output_text
        end = completed_answer_end(prefix + text)
        return None if end is None or end < len(prefix) else end - len(prefix)

    def _extend(self, run: Any, text: str) -> Iterator[TokenEvent]:
        """Append ``text`` to the answer as if the model wrote it (logprob 0): a forced answer phrase or seed."""
        assert run.session is not None
        forced_ids = self.model.encode(text)
        context = list(run.session.ids)
        forced: list[TokenStep] = []
        for i in forced_ids:
            forced.append(TokenStep(id=i, text=self.model.token_text(context, i), logprob=0.0, entropy=0.0,
                                    position=len(context)))
            context.append(i)
        run.session.extend(forced_ids)
        yield from self._accept(run, forced)

    def _force_answer(self, run: Any) -> Iterator[TokenEvent]:
        """DRAGIN App. B: if the answer phrase is missing, append it and let the model finish the sentence.

        An unfinished last sentence (the model stopped, or the budget ran out, before its full stop) is kept and
        closed with a full stop before the phrase: nothing the model wrote is cut, so its tokens stream as they
        are written (:class:`~active_rag.answer_stream.AnswerStream`). The model's answer after the phrase runs to
        its full stop (:mod:`active_rag.answer_end`: "J. Nick Koston", "3.10" and "U.S." are not cut)."""
        assert self.answer_phrase is not None
        if self.answer_phrase.lower() in run.output_text.lower():
            return
        text = run.output_text
        if run.session is None:
            self._open_session(run, False)
        assert run.session is not None
        if not run.output or text.endswith((" ", "\n")):
            sep = ""
        elif text[last_complete_sentence_end(text):].strip():  # an unfinished sentence: end it, never cut it
            sep = " " if text.endswith((",", ";", ":", "-")) else ". "
        else:
            sep = " "
        yield from self._extend(run, sep + self.answer_phrase)

        steps = yield from self._generate(run, self.forced_answer_tokens,
                                          stop=lambda s: _forced_end(_text(s)) is not None,
                                          processor=self._processor(run), answer_end=_forced_end)
        run.generated += len(steps)
        yield from self._accept(run, steps)

    def _answer_again(self, run: Any) -> Iterator[TokenEvent]:
        """``reanswer``: drop the draft and write the answer from its first word, unchecked, with every passage
        the prompt holds now (the context policy's, in its order)."""
        del run.output[:]
        run.attempt += 1
        self._open_session(run, False)
        assert run.session is not None
        steps = yield from self._generate(run, self.max_new_tokens, stop=lambda s: self._stopped(_text(s)),
                                          processor=self._processor(run))
        run.generated += len(steps)
        yield from self._accept(run, steps)
        self._trim_repetition(run)
        if self.answer_phrase:
            yield from self._force_answer(run)

    def _look_again(self, run: Any) -> Generator[StreamEvent, None, dict[str, Any]]:
        """``answer_check``: check the finished answer's span; when unsure, retrieve the question's next passages
        (those the prompt does not hold), answer again from the first word and keep the surer answer. Returns
        the record of the check (``ActiveRAGResult.answer_check``)."""
        check = self.answer_check
        assert check is not None
        draft_steps = list(run.output)
        draft_passages = list(run.answer_passages)
        draft = answer_confidence(draft_steps)
        held = _passage_text(run, draft_passages) if check.ground_draft else None
        unsure = check.unsure(draft, held)
        ungrounded = held is not None and draft.tokens > 0 and grounded_in(draft.answer, held) is False
        compared = (unsure and check.held_comparison_stands and draft.tokens > 0
                    and choose_reading(run.question).way == "compare"
                    and not question_articles(self.retriever, run.question, {p.id for p in run.docs}))
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
        run.decisions.append(decision)
        yield decision
        record: dict[str, Any] = {**check.describe(), "fired": unsure, "draft": draft.to_dict(), "second": None,
                                  "kept": "draft"}
        if not unsure:
            if decision.reason in (YES_NO_STANDS, HELD_COMPARISON_STANDS):
                record["reason"] = decision.reason
            return record
        query = check.look_query(run.question, "".join(step.text for step in draft_steps))
        retrieval = yield from self._yield_retrieval(run, decision, query)
        if not retrieval.new_ids:  # nothing new to read: the draft stands
            record["reason"] = "the retrieval added no passage"
            return record
        yield from self._answer_again(run)
        second = answer_confidence(run.output)
        record["second"] = second.to_dict()
        added = [i for i in run.answer_passages if i not in draft_passages]
        if check.keep_second(draft, second, run.question, (_passage_text(run, draft_passages),
                                                             _passage_text(run, run.answer_passages)),
                             _passage_text(run, added)):
            record["kept"] = "second"
            return record
        record["second_text"] = "".join(step.text for step in run.output)  # what the model wrote, kept
        record["reason"] = _kept_draft_reason(check, draft, second)
        run.output[:] = draft_steps  # the draft is surer: it is the answer again, streamed again from position 0
        run.answer_passages = draft_passages
        for n, s in enumerate(draft_steps):
            yield TokenEvent(text=s.text, token_id=s.id, logprob=s.logprob, entropy=s.entropy, position=n,
                             passage_ids=draft_passages, attempt=0)
        return record

    def _ask_each_name(self, run: Any) -> dict[str, Any] | None:
        """``each_name``: when the finished answer to a "both" question (:func:`both_question`) is "yes", ask the
        reader the question of each name with the passages its answer was written from, in their order, and settle
        the answer by theirs (:func:`settle_both`). Each question is answered from its first word, as the answer
        was (its prompt shares the passages' prefix, so only the question and the answer are new), and its text
        and prompt tokens count in the run's cost; nothing streams. Returns the record
        (``ActiveRAGResult.each_name``), or ``None`` when the question is not of that form or the answer is not
        "yes"."""
        parsed = both_question(run.question)
        if parsed is None or yes_or_no(run.output_text) != "yes":
            return None
        docs = retrieved_passages(run, run.answer_passages)
        asked: list[dict[str, Any]] = []
        for question in parsed.questions:
            one = dataclasses.replace(run, question=question, output=[], docs=docs, session=None, layout=None,
                                      decisions=[], generated=0, options=False, streamed=0, attempt=0, followed=[])
            for _ in self._answer_again(one):  # its tokens are not the answer's: nothing streams
                pass
            run.generated += one.generated
            text = one.output_text.strip()
            asked.append({"question": question, "answer": text, "verdict": yes_or_no(text)})
        settled = settle_both([a["verdict"] for a in asked])
        return {"names": list(parsed.names), "asked": asked, "answer": settled,
                "passage_ids": [p.id for p in docs]}

    def _linked_retrieval(self, run: Any, read: Sequence[Passage], *, position: int, decision: TriggerDecision,
                          choose: bool = False) -> Any:
        """Add the own articles of the names worth following that ``read`` mentions, looked up in the retriever's
        name index, then the question's next passages (:func:`active_rag.methods.linked.follow_links`). The trace records
        the names followed, best first (``details["names"]``, a list), and which passage is whose article
        (``details["articles"]``); the query is the question, the only one the retriever may be asked.

        ``choose``: first choose by the question's form (:func:`active_rag.methods.read_choice.choose_reading`); a
        comparison of named things follows only the question's own names (``details["choice"]`` and
        ``details["choice_reason"]`` say which way and why), and the prompt keeps what the context policy keeps for
        that way (:meth:`~active_rag.methods.context.ContextPolicy.for_look`)."""
        details: dict[str, Any] = {}
        context = self.context
        if choose:
            choice = choose_reading(run.question)
            details.update(choice=choice.way, choice_reason=choice.reason)
            context = context.for_look(choice.way)
            if choice.way == "compare":
                read = []

        found: list[Links] = []

        def fetch(held: set[str]) -> list[Passage]:
            links = follow_links(self.retriever, read, run.question, self.top_k, held, fill=context.fill_links)
            details.update(names=links.names, articles=links.articles)  # articles: the rest are the question's
            details["linked_from"] = dict(links.linked_from)
            if links.unrelated:  # names mentioned whose passage does not bear on the question: not read
                details["unrelated"] = list(links.unrelated)
            if links.outranked:  # names whose passage bears on the question less than the next chunk read instead
                details["outranked"] = list(links.outranked)
            found.append(links)
            return links.passages

        return self._retrieve(run, [run.question], position=position, decision=decision, details=details,
                              formulator="linked", fetch=fetch, context=context,
                              arrange=lambda kept: context.arrange_links(kept, found[-1]) if found else kept)

    def _yield_retrieval(self, run: Any, decision: TriggerDecision, query: str) -> Generator[StreamEvent, None, Any]:
        assert self.answer_check is not None
        if self.answer_check.query in ("linked", "choose"):  # the names the draft's passages mention, then the question
            answered_from = set(run.answer_passages)
            read = [p for p in run.docs if p.id in answered_from]
            retrieval = self._linked_retrieval(run, read, position=len(run.output), decision=decision,
                                               choose=self.answer_check.query == "choose")
        else:
            retrieval = self._retrieve(run, [query], position=len(run.output), decision=decision, details={},
                                       formulator="input" if query == run.question else "question+draft")
        yield retrieval
        return retrieval
