"""``ActiveRAG``: the framework-neutral active retrieval loop.

One loop runs every method; a trigger ("when"), a query formulator ("what") and a context policy ("what the
prompt keeps", :mod:`active_rag.methods.context`) select the paper:

- FLARE-direct (Jiang et al. 2023, §3.2): retrieve with the input and generate the first sentence with those
  documents (App. A), then per step generate a look-ahead sentence WITHOUT retrieved documents (§3); if a
  token has probability < theta, retrieve with a query built from it and regenerate the sentence with the
  documents retrieved for it.
- DRAGIN (Su et al. 2024, §3.3): generate; at the first token whose RIND score exceeds theta, truncate
  the output at the start of its word (Eq. 6), retrieve with QFS, continue with the new documents
  replacing the old, keep the continuation's first sentence and check again (DRAGIN's released code,
  ``AttnWeightRAG.inference``). Every truncating trigger re-checks after its retrieval's first sentence.
  With the ``replace`` context policy (the default) the documents serve that one sentence and the next
  sentences are generated and checked without documents, as the released code does; ``keep-newest`` keeps
  them for the rest of the answer, ``accumulate`` and ``rerank`` keep passages across retrievals.
- FLARE-instruct (§3.1): the model writes ``[Search(query)]``; the tag is removed, the query retrieved.
- FL-RAG / FS-RAG / self-ask: retrieve after every window / sentence / follow-up question.
- Follow the bridge (beyond the papers; the ``bridge`` trigger): after a sentence that names an entity
  the question does not, retrieve that entity's own article and start the next sentence with its name.

All signals come from the one KV-cached pass (:class:`~active_rag.decoding.model.DecodingSession`). When no
retrieval happens, a segment is accepted and generation continues in the same cache.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .methods.answer_stage import AnswerStage
from .methods.answering import retrieved_passages
from .methods.date_compare import settle_dates
from .methods.version_compare import settle_versions
from .methods.context import ContextPolicy, make_context
from .decoding.context_window import fit_passages
from .errors import ContextOverflowError, QuestionsTypeError
from .decoding.model import ActiveLM, DecodingSession, PromptUsage, count_prompt_tokens
from .methods.profiles import get_profile
from .methods.prompt_layout import Layout as _Layout
from .methods.prompt_layout import build_layout, resolve_prompt_mode
from .methods.prompts import DRAGIN_PROMPT, PROMPTS, PromptTemplate
from .methods.queries import InputQuery, QueryContext, QueryFormulator, make_query
from .methods.retrieving import RetrievalSteps
from .decoding.stopping import has_completed_answer, last_complete_sentence_end, repeated_sentence_start
from .text import first_sentence_end
from .text import tokens_within as _tokens_within
from .text import word_start as _word_start
from .methods.thresholds import resolve_threshold
from .methods.triggers import NeverTrigger, SegmentContext, Trigger, make_trigger
from .types import (ActiveRAGResult, Passage, Retrieval, Retriever, RouteDecision, StreamEvent, TokenEvent, TokenStep,
                    TriggerDecision)
from .settings import RunSettings, engine_kwargs
from .validation import MAX_RETRIEVALS_HINT, MAX_TOP_K, TOP_K_HINT, check_int, check_question


class Router(Protocol):
    """Decides before generation whether to retrieve at all (TA-ARE, vanilla)."""

    def decide(self, question: str) -> RouteDecision: ...


@dataclass
class _Run:
    """Per-call state: lives on the stack of one call, never on the engine (thread safety)."""

    question: str
    trigger: Trigger
    output: list[TokenStep] = field(default_factory=list)
    docs: list[Passage] = field(default_factory=list)
    retrievals: list[Retrieval] = field(default_factory=list)
    decisions: list[TriggerDecision] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    route: RouteDecision | None = None
    generated: int = 0
    session: DecodingSession | None = None
    layout: _Layout | None = None
    done: bool = False
    skip_check: bool = False
    after_retrieval: bool = False  # the next segment is the first sentence after a truncating retrieval
    session_docs: bool = False  # the open session's prompt holds retrieved passages
    session_passages: list[str] = field(default_factory=list)  # ids of the passages in the open session's prompt
    answer_passages: list[str] = field(default_factory=list)  # ... in the prompt of the last generated segment
    attempt: int = 0  # answers written from the first word before this one (``reanswer``, an answer check)
    followed: list[str] = field(default_factory=list)  # bridge entities the answer went on from (``follow``)
    usage: PromptUsage = field(default_factory=PromptUsage)  # prompt tokens from the prefix cache / prefilled
    options: Any = None  # the answer-options constraint (built on first use; False: the question offers none)
    streamed: int = 0  # leading tokens of the generation not yet accepted that were streamed live (unchecked)

    @property
    def output_ids(self) -> list[int]:
        return [s.id for s in self.output]

    @property
    def output_text(self) -> str:
        return "".join(s.text for s in self.output)


class ActiveRAG(RetrievalSteps):
    """Active retrieval-augmented generation with a local model that exposes logits and attentions.

    >>> rag = ActiveRAG.from_preset("dragin", ActiveLM.load(), BM25Index.demo())  # doctest: +SKIP
    >>> result = rag.run("Were Scott Derrickson and Ed Wood of the same nationality?")  # doctest: +SKIP
    >>> result.answer, result.short_answer, [r.query for r in result.retrievals]  # doctest: +SKIP

    A method is its components: ``trigger`` (when to retrieve, :mod:`active_rag.methods.triggers`), ``query``
    (what to retrieve with, :mod:`active_rag.methods.queries`), ``context`` (what the prompt keeps of the passages,
    :mod:`active_rag.methods.context`; ``None``: ``replace``), ``prompt`` (:mod:`active_rag.methods.prompts`),
    ``answer`` (how the answer is finished: the forced answer phrase, a check, options, links;
    :class:`~active_rag.methods.answer_stage.AnswerStage`) and ``router`` (whether to retrieve at all, TA-ARE;
    :mod:`active_rag.methods.routing`). ``top_k`` passages a retrieval, ``max_new_tokens`` tokens an answer;
    ``settings`` (:class:`~active_rag.settings.RunSettings`) holds the rest: the first retrieval with the input,
    the retrieval cap, stop rules, prompt layout, profile and the method's name. A preset names all of them
    (:meth:`from_preset`).

    The flat keywords of earlier versions (``answer_check=``, ``initial_retrieval=``, ...,
    :data:`active_rag.settings.FLAT_NAMES`) still work here with a :class:`DeprecationWarning`;
    :meth:`from_preset` takes them as overrides of the preset's fields.
    """

    def __init__(
        self,
        model: ActiveLM,
        retriever: Retriever | None = None,
        *,
        trigger: str | Trigger = "rind",
        query: str | QueryFormulator = "attention",
        context: str | ContextPolicy | None = None,
        prompt: str | PromptTemplate = DRAGIN_PROMPT,
        answer: AnswerStage | None = None,
        router: Router | None = None,
        top_k: int = 3,
        max_new_tokens: int = 256,
        settings: RunSettings | None = None,
        **deprecated: Any,
    ) -> None:
        if deprecated:  # the flat names of before the components (answer_check=..., initial_retrieval=...)
            moved = engine_kwargs({"answer": answer, "settings": settings, **deprecated}, deprecated=True)
            answer, settings = moved.pop("answer"), moved.pop("settings")
            if moved:
                raise TypeError(f"ActiveRAG got an unexpected keyword argument {next(iter(moved))!r}")
        self.answer = answer = AnswerStage() if answer is None else answer
        self.settings = settings = RunSettings() if settings is None else settings
        for name, value, cls in (("answer", answer, AnswerStage), ("settings", settings, RunSettings)):
            if not isinstance(value, cls):
                raise TypeError(f"ActiveRAG's {name} must be {cls.__name__}; got {type(value).__name__}.")
        self.model = model
        self.retriever = retriever
        self.prompt_mode = resolve_prompt_mode(settings.prompt_mode, str(getattr(model, "name", "")))
        self.profile = get_profile(settings.profile) if isinstance(settings.profile, str) else settings.profile
        self.trigger = resolve_threshold(make_trigger(trigger), str(getattr(model, "variant", None) or getattr(model, "name", "")), self.profile, self.prompt_mode)
        self.query = make_query(query)
        self.prompt = PROMPTS[prompt] if isinstance(prompt, str) else prompt
        self.top_k = check_int("top_k", top_k, minimum=1, maximum=MAX_TOP_K, hint=TOP_K_HINT)
        self.context = make_context(context, top_k=self.top_k)  # None: replace, the papers'; accumulate: 2 x top_k
        self.max_retrievals = (  # None: no cap (the generated-token guard still stops runaways)
            None if settings.max_retrievals is None
            else check_int("max_retrievals", settings.max_retrievals, minimum=0, hint=MAX_RETRIEVALS_HINT)
        )
        self.max_new_tokens = check_int("max_new_tokens", max_new_tokens, minimum=1)
        self.initial_retrieval = initial_retrieval = settings.initial_retrieval
        self.router = router
        self.stop = settings.stop
        self.keep_attention = settings.keep_attention
        self.repetition_guard = settings.repetition_guard
        self.stop_when_answered = settings.stop_when_answered
        retrieves_first = self.trigger.action == "once" or (initial_retrieval and self.trigger.action != "never")
        stage = answer.resolve(model, self.context, retrieves_first)
        self.reanswer = stage.reanswer
        self.answer_check = stage.check
        self.answer_options = stage.options
        self.answer_phrase = stage.phrase
        self.follow_links = stage.links
        self.settle_dates = stage.dates
        self.settle_versions = stage.versions
        self.ask_each_name = stage.each_name
        self.method = settings.method or f"{self.trigger.name}+{self.query.name}"
        if self.retriever is None and (self.trigger.action != "never" or initial_retrieval):
            raise ValueError(
                f"Method {self.method!r} retrieves, but no retriever was given: pass retriever=BM25Index.demo() "
                "or any object with retrieve(query, k)."
            )
        if (self.trigger.needs_attention or self.query.needs_attention) and not model.supports_attention:
            model.require_attention()

    @classmethod
    def from_preset(cls, name: str, model: ActiveLM, retriever: Retriever | None = None, **overrides: Any) -> ActiveRAG:
        """Build a preset by name (:data:`active_rag.methods.presets.PRESETS`). ``overrides`` replace the preset's
        components (``trigger=``, ``answer=AnswerStage(...)``, ...) or set one field of its answer stage or run
        settings by its flat name (``answer_options=False``, ``initial_retrieval=True``:
        :data:`active_rag.settings.FLAT_NAMES`), keeping the others."""
        from .methods.presets import preset_kwargs

        return cls(model, retriever, **preset_kwargs(name, **overrides))

    @property
    def rewrites_answer(self) -> bool:
        """Whether a run may write the answer again from its first word (``reanswer``, an answer check): its
        stream then gives a second attempt from position 0, so a consumer cannot treat tokens as final."""
        return self.reanswer or self.answer_check is not None

    def describe(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "trigger": self.trigger.describe(),
            "query": self.query.describe(),
            "prompt": self.prompt.name,
            "top_k": self.top_k,
            "max_retrievals": self.max_retrievals,
            "initial_retrieval": self.initial_retrieval,
            "prompt_mode": self.prompt_mode,
            "profile": self.profile.name if self.profile else None,
            "threshold": getattr(self.trigger, "theta", None),
            "threshold_source": getattr(self.trigger, "threshold_source", None),
            "repetition_guard": self.repetition_guard,
            "stop_when_answered": self.stop_when_answered,
            **self._context_description(),
            **({"reanswer": True} if self.reanswer else {}),
            **({"answer_check": self.answer_check.describe()} if self.answer_check else {}),
            **({"answer_options": True} if self.answer_options else {}),
            **({"follow_links": self.follow_links} if self.follow_links else {}),
            **({"settle_dates": True} if self.settle_dates else {}),
            **({"settle_versions": True if self.settle_versions == "reasoning" else self.settle_versions}
               if self.settle_versions else {}),
            **({"ask_each_name": True} if self.ask_each_name else {}),
        }

    def _context_description(self) -> dict[str, Any]:
        """The context policy, when it makes this method behave otherwise than before context policies existed
        (every trigger but RIND keeps the newest passages under ``replace`` and ``keep-newest``
        alike): descriptions, and so evaluation row keys, of unchanged methods stay as they were."""
        name = self.context.name
        if name == "keep-newest" or (name == "replace" and not self.trigger.documents_for_one_sentence):
            return {}
        return {"context": self.context.describe()}

    # -- public API ---------------------------------------------------------------------------------
    def run(self, question: str) -> ActiveRAGResult:
        result: ActiveRAGResult | None = None
        for event in self.stream(question):
            if isinstance(event, ActiveRAGResult):
                result = event
        assert result is not None
        return result

    __call__ = run

    def run_batch(
        self, questions: Sequence[str], *, batch_size: int = 8, return_exceptions: bool = False
    ) -> list[ActiveRAGResult | BaseException]:
        """Answer many questions with up to ``batch_size`` decoding together (one batched forward per
        step, continuous batching); results in input order. See :mod:`active_rag.decoding.many_questions`.
        One string (not a list of them) raises :class:`~active_rag.errors.QuestionsTypeError`."""
        from .decoding.many_questions import run_batch

        _check_questions(questions)
        return run_batch(self, questions, batch_size=batch_size, return_exceptions=return_exceptions)

    def stream_batch(
        self, questions: Sequence[str], *, batch_size: int = 8, return_exceptions: bool = False
    ) -> Iterator[tuple[int, StreamEvent | BaseException]]:
        """Yield ``(question index, event)`` while many questions advance together. See :mod:`active_rag.decoding.many_questions`."""
        from .decoding.many_questions import stream_batch

        _check_questions(questions)
        return stream_batch(self, questions, batch_size=batch_size, return_exceptions=return_exceptions)

    def stream(self, question: str) -> Iterator[StreamEvent]:
        """Yield, as they happen: a :class:`RouteDecision` (with a router), every
        :class:`TriggerDecision` (fired or not), a :class:`Retrieval` per retrieval, the accepted
        :class:`TokenEvent` tokens, and finally the :class:`ActiveRAGResult`."""
        run = _Run(question=check_question(question), trigger=self.trigger)
        if self.router is not None:
            with count_prompt_tokens(run.usage):
                run.route = self.router.decide(run.question)
            yield run.route
            if not run.route.retrieve:
                run.trigger = NeverTrigger()
        trigger = run.trigger
        if trigger.action == "once" or (self.initial_retrieval and trigger.action != "never"):
            decision = TriggerDecision(fire=True, trigger=trigger.name, reason="initial retrieval with the input")
            ctx = QueryContext(question=run.question, output=[], segment=[], decision=decision, action="continue", lm=self.model)
            yield self._retrieve(run, InputQuery().formulate(ctx), position=0, decision=decision, details={}, formulator="input")
            if self.follow_links:  # before the first token: the own articles of the names those passages mention
                yield self._linked_retrieval(run, list(run.docs), position=0, choose=self.follow_links == "choose",
                                             decision=TriggerDecision(fire=True, trigger=trigger.name, reason=(
                                                 "choose what to read after the passages retrieved with the input"
                                                 if self.follow_links == "choose" else
                                                 "follow the links of the passages retrieved with the input")))
        processor = self._processor(run, trigger.logits_processor(self.model))
        capture = trigger.needs_attention or self.query.needs_attention
        max_generated = 4 * self.max_new_tokens  # runaway guard, whatever the retrieval budget
        while not run.done and len(run.output) < self.max_new_tokens:
            if run.session is None:
                # FLARE §3: a look-ahead sentence is generated without retrieved documents; only the first one
                # sees the documents retrieved with the input (App. A; the released code's look-ahead
                # pre-retrieval "first")
                lookahead = trigger.action == "regenerate" and bool(run.output)
                self._open_session(run, capture, with_docs=not lookahead)
            # a segment that no check will see is accepted as it is generated: its tokens stream at once
            will_check = self._will_check(run, max_generated)
            steps = yield from self._segment(run, processor, one_sentence=run.after_retrieval, live=not will_check)
            run.generated += len(steps)
            first_after_retrieval = run.after_retrieval
            assert run.session is not None
            ended = (
                run.session.finished
                or self._stopped(run.output_text + _text(steps))
                or len(run.output) + len(steps) >= self.max_new_tokens
            )
            checkable = will_check and run.generated <= max_generated and bool(steps)
            run.skip_check = run.after_retrieval = False
            decision = None
            if checkable:
                decision = trigger.check(
                    SegmentContext(steps, run.session.max_attention if capture else None, run.output_text, ended,
                                   question=run.question, followed=tuple(run.followed))
                )
                decision.output_start = len(run.output)
                decision.passage_ids = list(run.session_passages)
                run.decisions.append(decision)
                yield decision
            if decision is None or not decision.fire:
                yield from self._accept(run, steps)
                if first_after_retrieval:
                    self._after_sentence(run, trigger)
                if trigger.action == "regenerate" and run.session_docs:
                    run.session = None  # the next look-ahead is generated without documents
                if ended or not steps:
                    break
                continue
            qctx = QueryContext(
                question=run.question,
                output=list(run.output),
                segment=steps,
                decision=decision,
                action=trigger.action,
                lm=self.model,
                session_ids=run.session.ids,
                question_span=run.layout.question_span if run.layout else None,
                output_start=run.layout.output_start if run.layout else None,
            )
            with count_prompt_tokens(run.usage):  # FLARE's generated questions prompt the model too
                queries = self.query.formulate(qctx)
            cut = _word_start(steps, decision.index or 0)  # truncation never cuts a word
            if trigger.action == "truncate" and getattr(trigger, "truncate", "word") == "sentence":
                cut = self._sentence_cut(run, steps, cut)  # the released code drops the whole sentence
            position = len(run.output) + (cut if trigger.action == "truncate" else 0)
            if trigger.action in ("continue", "follow"):
                position = len(run.output) + len(steps)
            if trigger.action == "follow":
                yield from self._accept(run, steps)
                run.session = None
                followed = yield from self._follow(run, queries, position, decision, qctx.details, capture)
                if ended and not followed:
                    break
                continue
            yield self._retrieve(run, queries, position=position, decision=decision, details=qctx.details,
                                 formulator=self.query.name)
            if trigger.action == "regenerate":
                self._open_session(run, capture, with_docs=True)
                regenerated = yield from self._segment(run, processor, live=True)  # accepted unchecked
                run.generated += len(regenerated)
                yield from self._accept(run, regenerated)
                assert run.session is not None
                if run.session.finished or self._stopped(run.output_text):
                    break
                run.session = None  # the next look-ahead is generated without documents
            elif trigger.action == "truncate":
                yield from self._accept(run, steps[:cut])
                run.session = None
                # the continuation's first sentence: accepted unchecked (RIND, as DRAGIN's code does) or checked
                run.after_retrieval = True
                run.skip_check = not trigger.recheck_after_retrieval
                if hasattr(processor, "after_search"):
                    processor.after_search()
            else:  # continue
                yield from self._accept(run, steps)
                run.session = None
                if ended:
                    break
        self._trim_repetition(run)
        if self.answer_phrase:
            yield from self._force_answer(run)
        draft = None
        if self.reanswer and any(r.position > 0 and r.new_ids for r in run.retrievals):
            draft = run.output_text.strip()
            yield from self._answer_again(run)
        look = None
        if self.answer_check is not None and run.retrievals:
            first = run.output_text.strip()
            look = yield from self._look_again(run)
            if look["second"] is not None:
                draft = first
        answer = run.output_text.strip()
        own = retrieved_passages(run, run.answer_passages) if self.settle_versions == "passages" else None
        settled = settle_versions(run.question, answer, own) if self.settle_versions else None
        if settled is None and self.settle_dates:
            settled = settle_dates(run.question, answer)
        each_name = self._ask_each_name(run) if self.ask_each_name else None
        yield ActiveRAGResult(
            question=run.question,
            answer=answer,
            method=self.method,
            retrievals=run.retrievals,
            decisions=run.decisions,
            tokens=run.output,
            route=run.route,
            warnings=run.warnings,
            generated_tokens=run.generated,
            cached_prompt_tokens=run.usage.cached,
            prefilled_prompt_tokens=run.usage.prefilled,
            final_passage_ids=list(run.answer_passages),
            draft=draft,
            answer_check=look,
            answer_options=list(run.options.options) if run.options else None,
            date_comparison=settled.to_dict() if settled is not None else None,
            each_name=each_name,
        )

    # -- internals ----------------------------------------------------------------------------------
    def _after_sentence(self, run: _Run, trigger: Trigger) -> None:
        """The sentence after a truncating retrieval is accepted: the context policy decides what stays (DRAGIN's
        ``replace``: nothing, the next sentences are generated without documents)."""
        kept = self.context.after_sentence(run.docs, trigger)
        if [p.id for p in kept] != [p.id for p in run.docs]:
            run.docs = kept
            run.session = None

    def _stopped(self, text: str) -> bool:
        """The user's stop rule, the answer-complete rule and the repetition guard, on the output so far."""
        if self.stop is not None and self.stop(text):
            return True
        if self.stop_when_answered and has_completed_answer(text):
            return True
        if self.repetition_guard and text.rstrip().endswith((".", "!", "?")):
            return repeated_sentence_start(text) is not None
        return False

    def _trim_repetition(self, run: _Run) -> None:
        """Drop a sentence that repeats an earlier one (the repetition guard stopped on it) and what follows."""
        if self.repetition_guard:
            start = repeated_sentence_start(run.output_text)
            if start is not None:
                self._truncate_output(run, start)

    def _sentence_cut(self, run: _Run, steps: Sequence[TokenStep], cut: int) -> int:
        """Truncate at the start of the sentence that holds ``steps[cut]`` (DRAGIN's released code keeps only the
        sentences before the hallucinated one). Accepted output is dropped too when that sentence began before
        this segment; returns the number of the segment's tokens to keep."""
        before = run.output_text
        end = last_complete_sentence_end(before + _text(steps[:cut]))
        if end < len(before):
            self._truncate_output(run, end)
            return 0
        return min(cut, _tokens_within(steps, end - len(before)))

    def _truncate_output(self, run: _Run, chars: int) -> None:
        """Keep the output tokens that end within its first ``chars`` characters; the session is reopened."""
        keep = _tokens_within(run.output, chars)
        if keep < len(run.output):
            del run.output[keep:]
            run.session = None

    def _layout(self, run: _Run, docs: Sequence[Passage]) -> _Layout:
        return build_layout(self.model, self.prompt, self.prompt_mode, run.question, docs, run.output_ids)

    def _fits(self, run: _Run, passages: Sequence[Passage]) -> bool:
        """Whether the prompt with ``passages`` leaves room for the tokens still to generate."""
        reserve = self.max_new_tokens - len(run.output)
        return len(self._layout(run, passages).ids) + reserve <= self.model.max_context

    def _fit_passages(self, run: _Run, held: Sequence[Passage], retrieval: Retrieval) -> list[Passage]:
        """The longest version of ``held`` whose prompt fits the context (:func:`~active_rag.decoding.context_window.fit_passages`)."""
        return fit_passages(
            held, retrieval, lambda passages: self._fits(run, passages), model=self.model,
            max_new_tokens=self.max_new_tokens, run_warnings=run.warnings, retrieval_number=len(run.retrievals) + 1,
            stacklevel=5,  # fit_passages, this method, _retrieve or _open_session, stream: the caller of stream
        )

    def _open_session(self, run: _Run, capture: bool, with_docs: bool = True) -> None:
        docs = list(run.docs) if with_docs else []
        reserve = self.max_new_tokens - len(run.output)
        layout = self._layout(run, docs)
        if len(layout.ids) + reserve > self.model.max_context and docs and run.retrievals:
            # _retrieve already fitted the passages; this only runs if the output outgrew max_new_tokens
            docs = run.docs = self._fit_passages(run, run.docs, run.retrievals[-1])
            layout = self._layout(run, docs)
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

    def _will_check(self, run: _Run, max_generated: int) -> bool:
        """Whether the trigger will check the next segment (before it is generated: the budgets as they stand)."""
        return (
            not run.skip_check
            and run.trigger.action in ("continue", "regenerate", "truncate", "follow")
            and (self.max_retrievals is None or len(run.retrievals) < self.max_retrievals)
            and run.generated <= max_generated
        )

    def _segment(
        self, run: _Run, processor: Any, one_sentence: bool = False, live: bool = False
    ) -> Generator[TokenEvent, None, list[TokenStep]]:
        """Generate one segment: the trigger's unit (a sentence, up to ``max_tokens``, or the whole answer), or
        with ``one_sentence`` the first sentence of a continuation after a truncating retrieval. ``live``: the
        segment is accepted unchecked, so its tokens stream as they are generated (:meth:`_generate`)."""
        trigger = run.trigger
        session = run.session
        assert session is not None
        remaining = self.max_new_tokens - len(run.output)
        limit = remaining if trigger.unit == "answer" else min(trigger.max_tokens, remaining)
        prefix = run.output_text
        by_sentence = trigger.unit == "sentence" or one_sentence

        def stop(steps: list[TokenStep]) -> bool:
            text = _text(steps)
            if by_sentence and first_sentence_end(text) is not None:
                return True
            return trigger.segment_done(text) or self._stopped(prefix + text)

        steps = yield from self._generate(run, limit, stop=stop, processor=processor, live=live, by_sentence=by_sentence)
        if by_sentence and steps:
            cut = first_sentence_end(_text(steps))
            if cut is not None:
                keep, chars = 0, 0
                while keep < len(steps) and chars < cut:
                    chars += len(steps[keep].text)
                    keep += 1
                if keep < len(steps):
                    session.crop(steps[keep].position)
                    steps = steps[:keep]
        return steps

    def _accept(self, run: _Run, steps: Sequence[TokenStep]) -> Iterator[TokenEvent]:
        """Append ``steps`` to the answer and stream those not streamed live while they were generated."""
        if run.session is not None and not self.keep_attention:
            run.session.commit()
        ids = list(run.answer_passages)
        streamed, run.streamed = run.streamed, 0
        for n, s in enumerate(steps):
            if not self.keep_attention:
                s.attention = None
            run.output.append(s)
            if n >= streamed:
                yield TokenEvent(text=s.text, token_id=s.id, logprob=s.logprob, entropy=s.entropy,
                                 position=len(run.output) - 1, passage_ids=ids, attempt=run.attempt)


def _text(steps: Sequence[TokenStep]) -> str:
    return "".join(s.text for s in steps)


def _check_questions(questions: object) -> None:
    """Refuse one string (or bytes) where a list of questions belongs: it would be answered a character at a time."""
    if isinstance(questions, (str, bytes, bytearray)):
        raise QuestionsTypeError(questions)
