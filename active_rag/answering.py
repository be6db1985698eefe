"""How an answer is finished: forced words (the answer phrase, a bridge's name) and answering again.

:class:`AnswerSteps` holds the engine's steps that write words into the answer other than by checked generation
(:class:`~active_rag.loop.ActiveRAG` inherits them):

- :meth:`AnswerSteps._extend`: append text as if the model wrote it (log-probability 0): DRAGIN's answer phrase
  (App. B) and the ``bridge`` trigger's seed, the name of the entity the next sentence starts from.
- :meth:`AnswerSteps._force_answer`: DRAGIN App. B, "So the answer is" when the model did not write it.
- :meth:`AnswerSteps._answer_again` (``reanswer``, issue 28, beyond the papers): once the answer's retrievals
  have chosen the evidence, write the answer again from its first word with every passage the prompt holds.
  The draft's checks found the evidence; a fresh answer reads all of it at once, as a single-round prompt does,
  instead of going on from a draft that committed to a wrong first hop. The draft is kept in
  ``ActiveRAGResult.draft``; the new answer's tokens stream again from position 0.
- :meth:`AnswerSteps._look_again` (``answer_check``, :mod:`active_rag.answer_check`): when the model is unsure
  of the finished answer, retrieve the question's next passages, answer again and keep the surer answer.
- :meth:`AnswerSteps._processor` (``answer_options``, :mod:`active_rag.answer_options`): a choice question's
  answer is one of its own options.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from typing import Any

from .answer_check import AnswerCheck, answer_confidence, grounded_in, passages_text
from .answer_options import OptionsConstraint, question_options
from .constrained import chain
from .linked import linked_names, linked_sources
from .stopping import last_complete_sentence_end
from .text import first_sentence_end
from .types import Passage, StreamEvent, TokenEvent, TokenStep, TriggerDecision

__all__ = ["AnswerSteps"]


YES_NO_STANDS = "a yes or no answer stands: no passage can confirm it"


def _text(steps: Sequence[TokenStep]) -> str:
    return "".join(s.text for s in steps)


def _passage_text(run: Any, ids: Sequence[str]) -> str:
    """The titles and texts of the passages ``ids`` that the run retrieved, in that order."""
    found = {p.id: p for r in run.retrievals for p in r.passages}
    return passages_text(found[i] for i in ids if i in found)


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

    def _accept(self, run: Any, steps: Sequence[TokenStep]) -> Iterator[TokenEvent]:  # pragma: no cover - engine
        raise NotImplementedError

    def _open_session(self, run: Any, capture: bool, with_docs: bool = True) -> None:  # pragma: no cover - engine
        raise NotImplementedError

    def _truncate_output(self, run: Any, chars: int) -> None:  # pragma: no cover - engine
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
        """DRAGIN App. B: if the answer phrase is missing, append it and let the model finish the sentence."""
        assert self.answer_phrase is not None
        if self.answer_phrase.lower() in run.output_text.lower():
            return
        # never mid-sentence: go back to the end of the last complete sentence first
        text = run.output_text
        end = last_complete_sentence_end(text)
        if text[end:].strip():
            self._truncate_output(run, end)
        if run.session is None:
            self._open_session(run, False)
        assert run.session is not None
        sep = "" if not run.output or run.output_text.endswith((" ", "\n")) else " "
        yield from self._extend(run, sep + self.answer_phrase)

        def stop(steps: list[TokenStep]) -> bool:
            # only once the answer itself has begun: "So the answer is:\n\nX" must not stop at the first newline
            body = _text(steps).lstrip(" :\n")
            if not body.strip():
                return False
            return "\n" in body or first_sentence_end(body) is not None or body.rstrip().endswith(".")

        steps = list(run.session.generate(32, stop=stop, logits_processor=self._processor(run)))
        run.answer_passages = list(run.session_passages)
        run.generated += len(steps)
        yield from self._accept(run, steps)

    def _answer_again(self, run: Any) -> Iterator[TokenEvent]:
        """``reanswer``: drop the draft and write the answer from its first word, unchecked, with every passage
        the prompt holds now (the context policy's, in its order)."""
        del run.output[:]
        run.attempt += 1
        self._open_session(run, False)
        assert run.session is not None
        steps = list(run.session.generate(self.max_new_tokens, stop=lambda s: self._stopped(_text(s)),
                                          logits_processor=self._processor(run)))
        run.answer_passages = list(run.session_passages)
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
        unsure = check.unsure(draft)
        decision = TriggerDecision(
            fire=unsure,
            trigger=check.name,
            token=draft.token,
            score=draft.min_prob,
            threshold=check.theta,
            reason=(
                "no answer span" if draft.tokens == 0
                else YES_NO_STANDS if check.grounds and grounded_in(draft.answer, "") is None
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
            if decision.reason == YES_NO_STANDS:
                record["reason"] = YES_NO_STANDS
            return record
        query = check.look_query(run.question, "".join(step.text for step in draft_steps))
        retrieval = yield from self._yield_retrieval(run, decision, query)
        if not retrieval.new_ids:  # nothing new to read: the draft stands
            record["reason"] = "the retrieval added no passage"
            return record
        yield from self._answer_again(run)
        second = answer_confidence(run.output)
        record["second"] = second.to_dict()
        if check.keep_second(draft, second, run.question, (_passage_text(run, draft_passages),
                                                             _passage_text(run, run.answer_passages))):
            record["kept"] = "second"
            return record
        record["second_text"] = "".join(step.text for step in run.output)  # what the model wrote, kept
        run.output[:] = draft_steps  # the draft is surer: it is the answer again, streamed again from position 0
        run.answer_passages = draft_passages
        for n, s in enumerate(draft_steps):
            yield TokenEvent(text=s.text, token_id=s.id, logprob=s.logprob, entropy=s.entropy, position=n,
                             passage_ids=draft_passages, attempt=0)
        return record

    def _linked_retrieval(self, run: Any, read: Sequence[Passage], *, position: int, decision: TriggerDecision) -> Any:
        """Retrieve the own articles of the names ``read`` mentions and the question does not, then the question's
        next passages (:func:`active_rag.linked.linked_sources`). The trace records the names asked (``details
        ["names"]``, and the query) and which passage is whose article (``details["articles"]``)."""
        names = linked_names(read, run.question)
        details: dict[str, Any] = {"names": names}

        def fetch(held: set[str]) -> list[Passage]:
            sources = linked_sources(self.retriever, read, run.question, self.top_k, held)
            details["articles"] = {p.id: name for p, name in sources if name is not None}  # the rest: question's
            return [p for p, _ in sources]

        return self._retrieve(run, [*names, run.question], position=position, decision=decision, details=details,
                              formulator="linked", fetch=fetch)

    def _yield_retrieval(self, run: Any, decision: TriggerDecision, query: str) -> Generator[StreamEvent, None, Any]:
        assert self.answer_check is not None
        if self.answer_check.query == "linked":  # the names the draft's passages mention, then the question
            answered_from = set(run.answer_passages)
            read = [p for p in run.docs if p.id in answered_from]
            retrieval = self._linked_retrieval(run, read, position=len(run.output), decision=decision)
        else:
            retrieval = self._retrieve(run, [query], position=len(run.output), decision=decision, details={},
                                       formulator="input" if query == run.question else "question+draft")
        yield retrieval
        return retrieval
