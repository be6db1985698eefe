"""How the engine generates: :class:`Generation`, the helpers every step uses to prompt the model and take its tokens.

- the prompt: :meth:`Generation.layout` lays out the question, the passages and the answer so far
  (:mod:`active_rag.components.prompt_layout`); :meth:`Generation.open_session` opens a KV-cached session on it
  (the prefix cache serves what an earlier prompt already computed) after fitting the passages to the context;
- the tokens: :meth:`Generation.segment` generates the trigger's unit (a sentence, a window, the whole answer),
  :meth:`Generation.generate` any number of tokens with a stop rule, streaming them live when no check will see
  them; :meth:`Generation.accept` appends tokens to the answer, :meth:`Generation.extend` text as if the model
  wrote it (a forced answer phrase, a bridge's name);
- the stop rules: the user's, the answer-complete rule and the repetition guard (:meth:`Generation.stopped`,
  :mod:`active_rag.stopping`), and the cuts that keep whole words and sentences.

One is made per call of :meth:`ActiveRAG.stream <active_rag.engine.loop.ActiveRAG.stream>` from the engine as it is
then (a per-call copy of an engine with another retriever or prompt is served as configured).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any

from ..decoding.constrained import chain
from .context_window import fit_passages
from ..decoding.model import count_prompt_tokens
from ..stopping import (completed_answer_end, has_completed_answer, last_complete_sentence_end,
                                 repeated_sentence_start)
from ..errors import ContextOverflowError
from ..answer.options import OptionsConstraint, question_options
from ..components.prompt_layout import Layout, build_layout
from ..text import first_sentence_end, tokens_within
from ..types import Passage, Retrieval, TokenEvent, TokenStep
from .run import EngineView, Run

__all__ = ["Generation", "text_of"]

#: a mark that may end a sentence: a segment cut after its first sentence streams no token past one live
_SENTENCE_MARK = re.compile(r"[.!?\n]")

#: text that ends with a sentence-end mark and spaces: what follows decides whether the answer ended there
_AFTER_MARK = re.compile(r"[.!?][\"'”’)\]]*\s*$")

#: ``warnings.warn``'s stacklevel for a passage that does not fit: fit_passages, :meth:`Generation.fit_passages`,
#: the retrieval step, the loop's phase, ``stream``: the caller of ``stream``
_FIT_STACKLEVEL = 6


def text_of(steps: Sequence[TokenStep]) -> str:
    return "".join(s.text for s in steps)


def _tokens_before(steps: Sequence[TokenStep], chars: int) -> int:
    """How many leading tokens of ``steps`` begin within their first ``chars`` characters (a token that holds the
    answer's end is kept whole)."""
    keep, total = 0, 0
    while keep < len(steps) and total < chars:
        total += len(steps[keep].text)
        keep += 1
    return keep


class Generation:
    """The generation helpers of one call (see the module docstring), on the engine ``engine``."""

    def __init__(self, engine: EngineView) -> None:
        self.engine = engine
        self.model = engine.model

    # -- the prompt ---------------------------------------------------------------------------------
    def layout(self, run: Run, docs: Sequence[Passage]) -> Layout:
        e = self.engine
        return build_layout(self.model, e.prompt, e.prompt_mode, run.question, docs, run.output_ids)

    def fits(self, run: Run, passages: Sequence[Passage]) -> bool:
        """Whether the prompt with ``passages`` leaves room for the tokens still to generate."""
        reserve = self.engine.max_new_tokens - len(run.output)
        return len(self.layout(run, passages).ids) + reserve <= self.model.max_context

    def fit_passages(self, run: Run, held: Sequence[Passage], retrieval: Retrieval) -> list[Passage]:
        """The longest version of ``held`` whose prompt fits the context (:func:`~active_rag.engine.context_window.fit_passages`)."""
        return fit_passages(
            held, retrieval, lambda passages: self.fits(run, passages), model=self.model,
            max_new_tokens=self.engine.max_new_tokens, run_warnings=run.warnings,
            retrieval_number=len(run.retrievals) + 1, stacklevel=_FIT_STACKLEVEL,
        )

    def open_session(self, run: Run, capture: bool, with_docs: bool = True) -> None:
        """Open a session on the prompt with the run's passages (``with_docs``) and the answer so far."""
        docs = list(run.docs) if with_docs else []
        reserve = self.engine.max_new_tokens - len(run.output)
        layout = self.layout(run, docs)
        if len(layout.ids) + reserve > self.model.max_context and docs and run.retrievals:
            # the retrieval already fitted the passages; this only runs if the output outgrew max_new_tokens
            docs = run.docs = self.fit_passages(run, run.docs, run.retrievals[-1])
            layout = self.layout(run, docs)
        if len(layout.ids) + reserve > self.model.max_context:
            raise ContextOverflowError(
                f"The prompt needs {len(layout.ids)} tokens plus {reserve} to generate, more than the context of "
                f"{self.model.max_context} tokens of model {self.model.name!r}, even without retrieved passages. "
                "Shorten the question or the prompt template, lower max_new_tokens, or use a model with a longer context."
            )
        run.layout = layout
        run.session_docs = bool(docs)
        run.session_passages = [p.id for p in docs]
        with count_prompt_tokens(run.usage):
            run.session = self.model.session(layout.ids, capture_attention=capture)

    def processor(self, run: Run, base: Any = None) -> Any:
        """The logits processor of a generation: ``base`` (the trigger's), then with ``answer_options`` the
        question's options after the answer phrase (built once a run)."""
        if not self.engine.stage.options:
            return base
        if run.options is None:
            options = question_options(run.question)
            run.options = OptionsConstraint(self.model, options) if options else False
        return chain(base, run.options or None)

    # -- the tokens ---------------------------------------------------------------------------------
    def segment(
        self, run: Run, processor: Any, one_sentence: bool = False, live: bool = False
    ) -> Generator[TokenEvent, None, list[TokenStep]]:
        """Generate one segment: the trigger's unit (a sentence, up to ``max_tokens``, or the whole answer), or
        with ``one_sentence`` the first sentence of a continuation after a truncating retrieval. ``live``: the
        segment is accepted unchecked, so its tokens stream as they are generated (:meth:`generate`)."""
        trigger = run.trigger
        session = run.session
        assert session is not None
        remaining = self.engine.max_new_tokens - len(run.output)
        limit = remaining if trigger.unit == "answer" else min(trigger.max_tokens, remaining)
        prefix = run.output_text
        by_sentence = trigger.unit == "sentence" or one_sentence

        def stop(steps: list[TokenStep]) -> bool:
            text = text_of(steps)
            if by_sentence and first_sentence_end(text) is not None:
                return True
            return trigger.segment_done(text) or self.stopped(prefix + text)

        steps = yield from self.generate(run, limit, stop=stop, processor=processor, live=live, by_sentence=by_sentence)
        if by_sentence and steps:
            cut = first_sentence_end(text_of(steps))
            if cut is not None:
                keep, chars = 0, 0
                while keep < len(steps) and chars < cut:
                    chars += len(steps[keep].text)
                    keep += 1
                if keep < len(steps):
                    session.crop(steps[keep].position)
                    steps = steps[:keep]
        return steps

    def generate(
        self, run: Run, limit: int, *, stop: Callable[[list[TokenStep]], bool] | None, processor: Any,
        live: bool = True, by_sentence: bool = False, answer_end: Callable[[str], int | None] | None = None,
    ) -> Generator[TokenEvent, None, list[TokenStep]]:
        """Generate up to ``limit`` tokens in the open session and return them. ``live``: no check will see them (the
        caller accepts them as they are), so each token streams as soon as it is generated, a :class:`TokenEvent`
        at the position it takes in the answer; with ``by_sentence`` (a segment cut after its first sentence) only
        until a sentence-end mark, the rest when accepted, after the cut. ``run.streamed`` counts those streamed
        (:meth:`accept` streams the others).

        When ``stop`` ends the generation on a finished answer sentence, the stop rule has seen a token past its
        full stop (it waits for it: "3." may become "3.10"); the tokens after the answer's end are cut off again (they
        count in ``run.generated``, the others are the caller's to count) and the session is marked finished, so
        that the engine stops there. ``answer_end`` says where the answer ends in
        the generated text (default: the answer-complete stop rule on the output, :meth:`answer_end`). A live token
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
        tokens = session.generate(limit, logits_processor=processor)
        for step in tokens:
            steps.append(step)
            text += step.text
            halted = stop is not None and stop(steps)
            if halted:
                tokens.close()  # ends the session's generation there, as its own ``stop`` would have
                break
            if not live or (by_sentence and _SENTENCE_MARK.search(text)):
                live = False
                continue
            if not step.text.strip() and _AFTER_MARK.search(text):
                continue  # may be cut off: streams with the next token, or when accepted
            for n in range(run.streamed, len(steps)):
                s = steps[n]
                yield TokenEvent(text=s.text, token_id=s.id, logprob=s.logprob, entropy=s.entropy,
                                 position=len(run.output) + n, passage_ids=ids, attempt=run.attempt)
            run.streamed = len(steps)
        if halted and steps:
            end = answer_end(text) if answer_end is not None else self.answer_end(run, text)
            keep = _tokens_before(steps, end) if end is not None else len(steps)
            if keep < len(steps):
                session.crop(steps[keep].position)
                session.finished = True  # the answer is complete: nothing more is generated after it
                run.generated += len(steps) - keep  # the look-ahead was generated: it counts in the run's cost
                del steps[keep:]
                run.streamed = min(run.streamed, keep)
        return steps

    def answer_end(self, run: Run, text: str) -> int | None:
        """Where the completed answer sentence ends in ``text``, generated after the output so far, when the engine
        stops on it (``stop_when_answered``, or :func:`has_completed_answer` as its ``stop``); else ``None``."""
        settings = self.engine.settings
        if not (settings.stop_when_answered or settings.stop is has_completed_answer):
            return None
        prefix = run.output_text
        end = completed_answer_end(prefix + text)
        return None if end is None or end < len(prefix) else end - len(prefix)

    def accept(self, run: Run, steps: Sequence[TokenStep]) -> Iterator[TokenEvent]:
        """Append ``steps`` to the answer and stream those not streamed live while they were generated."""
        keep_attention = self.engine.settings.keep_attention
        if run.session is not None and not keep_attention:
            run.session.commit()
        ids = list(run.answer_passages)
        streamed, run.streamed = run.streamed, 0
        for n, s in enumerate(steps):
            if not keep_attention:
                s.attention = None
            run.output.append(s)
            if n >= streamed:
                yield TokenEvent(text=s.text, token_id=s.id, logprob=s.logprob, entropy=s.entropy,
                                 position=len(run.output) - 1, passage_ids=ids, attempt=run.attempt)

    def extend(self, run: Run, text: str) -> Iterator[TokenEvent]:
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
        yield from self.accept(run, forced)

    # -- the stop rules and cuts --------------------------------------------------------------------
    def stopped(self, text: str) -> bool:
        """The user's stop rule, the answer-complete rule and the repetition guard, on the output so far."""
        settings = self.engine.settings
        if settings.stop is not None and settings.stop(text):
            return True
        if settings.stop_when_answered and has_completed_answer(text):
            return True
        if settings.repetition_guard and text.rstrip().endswith((".", "!", "?")):
            return repeated_sentence_start(text) is not None
        return False

    def trim_repetition(self, run: Run) -> None:
        """Drop a sentence that repeats an earlier one (the repetition guard stopped on it) and what follows."""
        if self.engine.settings.repetition_guard:
            start = repeated_sentence_start(run.output_text)
            if start is not None:
                self.truncate_output(run, start)

    def sentence_cut(self, run: Run, steps: Sequence[TokenStep], cut: int) -> int:
        """Truncate at the start of the sentence that holds ``steps[cut]`` (DRAGIN's released code keeps only the
        sentences before the hallucinated one). Accepted output is dropped too when that sentence began before
        this segment; returns the number of the segment's tokens to keep."""
        before = run.output_text
        end = last_complete_sentence_end(before + text_of(steps[:cut]))
        if end < len(before):
            self.truncate_output(run, end)
            return 0
        return min(cut, tokens_within(steps, end - len(before)))

    def truncate_output(self, run: Run, chars: int) -> None:
        """Keep the output tokens that end within its first ``chars`` characters; the session is reopened."""
        keep = tokens_within(run.output, chars)
        if keep < len(run.output):
            del run.output[keep:]
            run.session = None
