"""``ActiveRAG``: the framework-neutral active retrieval loop.

One loop runs every method; a trigger ("when"), a query formulator ("what") and a context policy ("what the
prompt keeps", :mod:`active_rag.components.context`) select the paper:

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

:meth:`ActiveRAG.stream` runs a question in four phases, each a method below: route (TA-ARE's verdict), the first
retrieval (with the input, and the links of its passages), generate until the answer ends (a segment at a time:
checked by the trigger, kept, or cut at a retrieval), and the answer steps (:mod:`active_rag.engine.answer_steps`).
Every phase reads and writes one :class:`~active_rag.engine.run.Run`; the generation helpers
(:mod:`active_rag.engine.generation`) and the retrieval steps (:mod:`active_rag.engine.retrieving`) are made for the
call from the engine as it is then.

All signals come from the one KV-cached pass (:class:`~active_rag.decoding.model.DecodingSession`). When no
retrieval happens, a segment is accepted and generation continues in the same cache.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from typing import Any, Protocol

from ..answer_stream import AnswerStream
from ..decoding.model import ActiveLM, count_prompt_tokens
from ..errors import QuestionsTypeError
from ..components.answer_stage import AnswerStage, ResolvedAnswerStage
from ..components.context import ContextPolicy, make_context
from ..components.profiles import get_profile
from ..components.prompt_layout import resolve_prompt_mode
from ..components.prompts import DRAGIN_PROMPT, PROMPTS, PromptTemplate
from ..components.queries import InputQuery, QueryContext, QueryFormulator, make_query
from ..components.thresholds import resolve_threshold
from ..components.triggers import NeverTrigger, SegmentContext, Trigger, make_trigger
from ..components.settings import RunSettings
from ..text import word_start
from ..types import ActiveRAGResult, Retriever, RouteDecision, StreamEvent, TokenStep, TriggerDecision
from ..validation import MAX_RETRIEVALS_HINT, MAX_TOP_K, TOP_K_HINT, check_int, check_question
from .answer_steps import BUILT_IN, FORCED_ANSWER_TOKENS, AnswerStep, EngineParts, SettleVersions, answer_steps_for
from .generation import Generation, text_of
from .retrieving import Retrieving
from .run import Run

__all__ = ["ActiveRAG", "Router"]


class Router(Protocol):
    """Decides before generation whether to retrieve at all (TA-ARE, vanilla)."""

    def decide(self, question: str) -> RouteDecision: ...


class ActiveRAG:
    """Active retrieval-augmented generation with a local model that exposes logits and attentions.

    >>> rag = ActiveRAG.from_preset("dragin", ActiveLM.load(), BM25Index.demo())  # doctest: +SKIP
    >>> result = rag.run("Were Scott Derrickson and Ed Wood of the same nationality?")  # doctest: +SKIP
    >>> result.answer, result.short_answer, [r.query for r in result.retrievals]  # doctest: +SKIP

    A method is its components: ``trigger`` (when to retrieve, :mod:`active_rag.components.triggers`), ``query``
    (what to retrieve with, :mod:`active_rag.components.queries`), ``context`` (what the prompt keeps of the passages,
    :mod:`active_rag.components.context`; ``None``: ``replace``), ``prompt`` (:mod:`active_rag.components.prompts`),
    ``answer`` (how the answer is finished: the forced answer phrase, a check, options, links;
    :class:`~active_rag.components.answer_stage.AnswerStage`, run as :attr:`answer_steps`) and ``router`` (whether to
    retrieve at all, TA-ARE; :mod:`active_rag.components.routing`). ``top_k`` passages a retrieval, ``max_new_tokens``
    tokens an answer; ``settings`` (:class:`~active_rag.components.settings.RunSettings`) holds the rest: the first retrieval
    with the input, the retrieval cap, stop rules, prompt layout, profile and the method's name. A preset names all
    of them (:meth:`from_preset`, which also takes one field of the answer stage or the settings by its flat name).

    A step of one's own joins the answer stage with ``rag.answer_steps.append(step)``: any callable
    ``step(run, parts)`` that yields stream events (:class:`~active_rag.engine.answer_steps.AnswerStep`).
    """

    forced_answer_tokens: int = FORCED_ANSWER_TOKENS
    """The most tokens the model writes after a forced answer phrase (the command line lowers it to fit
    ``--max-new-tokens``)."""

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
    ) -> None:
        self.answer = answer = AnswerStage() if answer is None else answer
        self.settings = settings = RunSettings() if settings is None else settings
        for name, value, cls in (("answer", answer, AnswerStage), ("settings", settings, RunSettings)):
            if not isinstance(value, cls):
                raise TypeError(f"ActiveRAG's {name} must be {cls.__name__}; got {type(value).__name__}.")
        self.model = model
        self.retriever = retriever
        self.router = router
        self.prompt_mode = resolve_prompt_mode(settings.prompt_mode, str(getattr(model, "name", "")))
        self.profile = get_profile(settings.profile) if isinstance(settings.profile, str) else settings.profile
        variant = str(getattr(model, "variant", None) or getattr(model, "name", ""))
        self.trigger = resolve_threshold(make_trigger(trigger), variant, self.profile, self.prompt_mode)
        self.query = make_query(query)
        self.prompt = PROMPTS[prompt] if isinstance(prompt, str) else prompt
        self.top_k = check_int("top_k", top_k, minimum=1, maximum=MAX_TOP_K, hint=TOP_K_HINT)
        self.context = make_context(context, top_k=self.top_k)  # None: replace, the papers'; accumulate: 2 x top_k
        self.max_retrievals = (  # None: no cap (the generated-token guard still stops runaways)
            None if settings.max_retrievals is None
            else check_int("max_retrievals", settings.max_retrievals, minimum=0, hint=MAX_RETRIEVALS_HINT)
        )
        self.max_new_tokens = check_int("max_new_tokens", max_new_tokens, minimum=1)
        self.answer_steps: list[AnswerStep] = []
        self.stage = answer.resolve(model, self.context, self.retrieves_first)
        self.method = settings.method or f"{self.trigger.name}+{self.query.name}"
        if self.retriever is None and (self.trigger.action != "never" or settings.initial_retrieval):
            raise ValueError(
                f"Method {self.method!r} retrieves, but no retriever was given: pass retriever=BM25Index.demo() "
                "or any object with retrieve(query, k)."
            )
        if (self.trigger.needs_attention or self.query.needs_attention) and not model.supports_attention:
            model.require_attention()

    @classmethod
    def from_preset(cls, name: str, model: ActiveLM, retriever: Retriever | None = None, **overrides: Any) -> ActiveRAG:
        """Build a preset by name (:data:`active_rag.components.presets.PRESETS`). ``overrides`` replace the preset's
        components (``trigger=``, ``answer=AnswerStage(...)``, ...) or set one field of its answer stage or run
        settings by its flat name (``answer_options=False``, ``initial_retrieval=True``:
        :data:`active_rag.components.settings.FLAT_NAMES`), keeping the others."""
        from ..components.presets import preset_kwargs

        return cls(model, retriever, **preset_kwargs(name, **overrides))

    # -- the answer stage ---------------------------------------------------------------------------
    @property
    def stage(self) -> ResolvedAnswerStage:
        """The answer stage as resolved for this engine. Setting it (``dataclasses.replace(rag.stage, dates=False)``)
        rebuilds the built-in :attr:`answer_steps` and keeps the steps one added."""
        return self._stage

    @stage.setter
    def stage(self, stage: ResolvedAnswerStage) -> None:
        own = [s for s in self.answer_steps if not isinstance(s, BUILT_IN)]
        self._stage = stage
        self.answer_steps = answer_steps_for(stage) + own

    @property
    def retrieves_first(self) -> bool:
        """Whether a run retrieves with the input before its first token (the ``once`` trigger, ``initial_retrieval``)."""
        return _retrieves_first(self.trigger, self.settings)

    answer_phrase = property(lambda self: self._stage.phrase, doc="The forced answer phrase (``None``: none).")
    answer_check = property(lambda self: self._stage.check, doc="The answer check (``None``: none).")
    answer_options = property(lambda self: self._stage.options, doc="A choice question answers with an option.")
    follow_links = property(lambda self: self._stage.links, doc="Read the links of the first passages (``\"choose\"``).")
    reanswer = property(lambda self: self._stage.reanswer, doc="Answer again with every passage held.")
    settle_dates = property(lambda self: self._stage.dates, doc="Settle date comparisons by the dates written.")
    settle_versions = property(lambda self: self._stage.versions, doc="Settle version comparisons by versions.")
    ask_each_name = property(lambda self: self._stage.each_name, doc="Ask a \"both\" question's names one by one.")
    ask_same = property(lambda self: self._stage.same, doc="Answer a \"same X\" question by each name's X.")
    initial_retrieval = property(lambda self: self.settings.initial_retrieval, doc="RunSettings.initial_retrieval")

    @property
    def rewrites_answer(self) -> bool:
        """Whether a run may write the answer again from its first word (``reanswer``, an answer check): its
        stream then gives a second attempt from position 0, so a consumer cannot treat tokens as final."""
        return any(getattr(step, "rewrites", False) for step in self.answer_steps)

    def answer_stream(self) -> AnswerStream:
        """How an adapter streams this engine's answer as text no later step of a run cuts
        (:class:`~active_rag.answer_stream.AnswerStream`): held back past the last full sentence under a trigger that
        truncates to sentences, before a sentence that may repeat under the repetition guard, and to the end when a
        run may write the answer again."""
        trigger = self.trigger
        return AnswerStream(
            repetition_guard=self.settings.repetition_guard,
            sentence_truncation=trigger.action == "truncate" and getattr(trigger, "truncate", "word") == "sentence",
            rewrites=self.rewrites_answer,
        )

    def describe(self) -> dict[str, Any]:
        settings = self.settings
        own = [getattr(s, "name", type(s).__name__) for s in self.answer_steps if not isinstance(s, BUILT_IN)]
        return {
            "method": self.method,
            "trigger": self.trigger.describe(),
            "query": self.query.describe(),
            "prompt": self.prompt.name,
            "top_k": self.top_k,
            "max_retrievals": self.max_retrievals,
            "initial_retrieval": settings.initial_retrieval,
            "prompt_mode": self.prompt_mode,
            "profile": self.profile.name if self.profile else None,
            "threshold": getattr(self.trigger, "theta", None),
            "threshold_source": getattr(self.trigger, "threshold_source", None),
            "repetition_guard": settings.repetition_guard,
            "stop_when_answered": settings.stop_when_answered,
            **self._context_description(),
            **({"reanswer": True} if self.reanswer else {}),
            **({"answer_check": self.answer_check.describe()} if self.answer_check else {}),
            **({"answer_options": True} if self.answer_options else {}),
            **({"follow_links": self.follow_links} if self.follow_links else {}),
            **({"settle_dates": True} if self.settle_dates else {}),
            **({"settle_versions": True if self.settle_versions == "reasoning" else self.settle_versions}
               if self.settle_versions else {}),
            **({"version_asked": True} if any(isinstance(s, SettleVersions) and s.asked
                                              for s in self.answer_steps) else {}),
            **({"ask_each_name": True} if self.ask_each_name else {}),
            **({"ask_same": True} if self.ask_same else {}),
            **({"answer_steps": own} if own else {}),
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
        from ..decoding.many_questions import run_batch

        _check_questions(questions)
        return run_batch(self, questions, batch_size=batch_size, return_exceptions=return_exceptions)

    def stream_batch(
        self, questions: Sequence[str], *, batch_size: int = 8, return_exceptions: bool = False
    ) -> Iterator[tuple[int, StreamEvent | BaseException]]:
        """Yield ``(question index, event)`` while many questions advance together. See :mod:`active_rag.decoding.many_questions`."""
        from ..decoding.many_questions import stream_batch

        _check_questions(questions)
        return stream_batch(self, questions, batch_size=batch_size, return_exceptions=return_exceptions)

    def stream(self, question: str) -> Iterator[StreamEvent]:
        """Yield, as they happen: a :class:`RouteDecision` (with a router), every
        :class:`TriggerDecision` (fired or not), a :class:`Retrieval` per retrieval, the accepted
        :class:`TokenEvent` tokens, and finally the :class:`ActiveRAGResult`."""
        run = Run(question=check_question(question), trigger=self.trigger)
        generation = Generation(self)
        parts = EngineParts(self, generation, Retrieving(self, generation))
        yield from self._route(run)
        yield from self._first_retrieval(run, parts)
        yield from self._generate(run, parts)
        for step in self.answer_steps:
            yield from step(run, parts)
        yield self._result(run)

    # -- the phases ---------------------------------------------------------------------------------
    def _route(self, run: Run) -> Iterator[StreamEvent]:
        """TA-ARE (or the vanilla router): no retrieval at all when the router says the model knows."""
        if self.router is None:
            return
        with count_prompt_tokens(run.usage):
            run.route = self.router.decide(run.question)
        yield run.route
        if not run.route.retrieve:
            run.trigger = NeverTrigger()

    def _first_retrieval(self, run: Run, parts: EngineParts) -> Iterator[StreamEvent]:
        """Retrieve with the input before the first token (the ``once`` trigger, FLARE App. A), then, with
        ``links``, the own articles of the names those passages mention (or what the question's form chooses)."""
        trigger = run.trigger
        if not _retrieves_first(trigger, self.settings):  # the run's: the router may have turned retrieval off
            return
        decision = TriggerDecision(fire=True, trigger=trigger.name, reason="initial retrieval with the input")
        ctx = QueryContext(question=run.question, output=[], segment=[], decision=decision, action="continue", lm=self.model)
        yield parts.retrieving.retrieve(run, InputQuery().formulate(ctx), position=0, decision=decision, details={},
                                        formulator="input")
        if self.follow_links:
            choose = self.follow_links == "choose"
            reason = ("choose what to read after the passages retrieved with the input" if choose
                      else "follow the links of the passages retrieved with the input")
            yield parts.retrieving.linked(run, list(run.docs), position=0, choose=choose,
                                          decision=TriggerDecision(fire=True, trigger=trigger.name, reason=reason))

    def _generate(self, run: Run, parts: EngineParts) -> Generator[StreamEvent, None, None]:
        """Generate a segment at a time until the answer ends: a segment the trigger does not fire on is kept
        (:meth:`_keep`), one it fires on is acted on (:meth:`_act`)."""
        gen, trigger = parts.generation, run.trigger
        processor = gen.processor(run, trigger.logits_processor(self.model))
        capture = trigger.needs_attention or self.query.needs_attention
        max_generated = 4 * self.max_new_tokens  # runaway guard, whatever the retrieval budget
        while not run.done and len(run.output) < self.max_new_tokens:
            if run.session is None:
                # FLARE §3: a look-ahead sentence is generated without retrieved documents; only the first one
                # sees the documents retrieved with the input (App. A; the released code's look-ahead
                # pre-retrieval "first")
                gen.open_session(run, capture, with_docs=not (trigger.action == "regenerate" and bool(run.output)))
            # a segment that no check will see is accepted as it is generated: its tokens stream at once
            will_check = self._will_check(run, max_generated)
            steps = yield from gen.segment(run, processor, one_sentence=run.after_retrieval, live=not will_check)
            run.generated += len(steps)
            first_after_retrieval = run.after_retrieval
            assert run.session is not None
            ended = (run.session.finished or gen.stopped(run.output_text + text_of(steps))
                     or len(run.output) + len(steps) >= self.max_new_tokens)
            run.skip_check = run.after_retrieval = False
            decision = None
            if will_check and run.generated <= max_generated and steps:
                decision = self._check(run, steps, ended, capture)
                yield decision
            if decision is None or not decision.fire:
                yield from self._keep(run, parts, steps, first_after_retrieval)
                if ended or not steps:
                    break
            elif not (yield from self._act(run, parts, steps, decision, ended, processor, capture)):
                break
        gen.trim_repetition(run)

    def _will_check(self, run: Run, max_generated: int) -> bool:
        """Whether the trigger will check the next segment (before it is generated: the budgets as they stand)."""
        return (
            not run.skip_check
            and run.trigger.action in ("continue", "regenerate", "truncate", "follow")
            and (self.max_retrievals is None or len(run.retrievals) < self.max_retrievals)
            and run.generated <= max_generated
        )

    def _check(self, run: Run, steps: list[TokenStep], ended: bool, capture: bool) -> TriggerDecision:
        """The trigger's decision on a segment, recorded in the run."""
        assert run.session is not None
        decision = run.trigger.check(
            SegmentContext(steps, run.session.max_attention if capture else None, run.output_text, ended,
                           question=run.question, followed=tuple(run.followed))
        )
        decision.output_start = len(run.output)
        decision.passage_ids = list(run.session_passages)
        run.decisions.append(decision)
        return decision

    def _keep(self, run: Run, parts: EngineParts, steps: list[TokenStep], first_after_retrieval: bool
              ) -> Iterator[StreamEvent]:
        """Accept a segment the trigger let through. After the first sentence of a truncating retrieval's
        continuation the context policy decides what the prompt keeps (DRAGIN's ``replace``: nothing, the next
        sentences are generated without documents); FLARE's next look-ahead is generated without documents."""
        yield from parts.generation.accept(run, steps)
        if first_after_retrieval:
            kept = self.context.after_sentence(run.docs, run.trigger)
            if [p.id for p in kept] != [p.id for p in run.docs]:
                run.docs = kept
                run.session = None
        if run.trigger.action == "regenerate" and run.session_docs:
            run.session = None

    def _act(self, run: Run, parts: EngineParts, steps: list[TokenStep], decision: TriggerDecision, ended: bool,
             processor: Any, capture: bool) -> Generator[StreamEvent, None, bool]:
        """Retrieve where the trigger fired and go on as its action says: ``regenerate`` the segment with the new
        passages (FLARE), ``truncate`` at the fired token and continue (DRAGIN), ``continue`` after the segment,
        ``follow`` a bridge entity. Returns whether generation goes on."""
        gen, trigger = parts.generation, run.trigger
        queries, details = self._queries(run, steps, decision)
        cut = word_start(steps, decision.index or 0)  # truncation never cuts a word
        if trigger.action == "truncate" and getattr(trigger, "truncate", "word") == "sentence":
            cut = gen.sentence_cut(run, steps, cut)  # the released code drops the whole sentence
        position = len(run.output) + (cut if trigger.action == "truncate" else 0)
        if trigger.action in ("continue", "follow"):
            position = len(run.output) + len(steps)
        if trigger.action == "follow":
            yield from gen.accept(run, steps)
            run.session = None
            followed = yield from parts.retrieving.follow(run, queries, position, decision, details, capture)
            return followed or not ended
        yield parts.retrieving.retrieve(run, queries, position=position, decision=decision, details=details,
                                        formulator=self.query.name)
        if trigger.action == "regenerate":
            gen.open_session(run, capture, with_docs=True)
            regenerated = yield from gen.segment(run, processor, live=True)  # accepted unchecked
            run.generated += len(regenerated)
            yield from gen.accept(run, regenerated)
            assert run.session is not None
            if run.session.finished or gen.stopped(run.output_text):
                return False
        elif trigger.action == "truncate":
            yield from gen.accept(run, steps[:cut])
            # the continuation's first sentence: accepted unchecked (RIND, as DRAGIN's code does) or checked
            run.after_retrieval = True
            run.skip_check = not trigger.recheck_after_retrieval
            if hasattr(processor, "after_search"):
                processor.after_search()
        else:  # continue
            yield from gen.accept(run, steps)
        run.session = None  # regenerate: the next look-ahead is generated without documents
        return trigger.action != "continue" or not ended

    def _queries(self, run: Run, steps: list[TokenStep], decision: TriggerDecision) -> tuple[list[str], dict[str, Any]]:
        """The query formulator's queries for a fired segment, and the details it records in the trace."""
        qctx = QueryContext(
            question=run.question,
            output=list(run.output),
            segment=steps,
            decision=decision,
            action=run.trigger.action,
            lm=self.model,
            session_ids=run.session.ids if run.session is not None else [],
            question_span=run.layout.question_span if run.layout else None,
            output_start=run.layout.output_start if run.layout else None,
        )
        with count_prompt_tokens(run.usage):  # FLARE's generated questions prompt the model too
            queries = self.query.formulate(qctx)
        return list(queries), qctx.details

    def _result(self, run: Run) -> ActiveRAGResult:
        return ActiveRAGResult(
            question=run.question,
            answer=run.output_text.strip(),
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
            draft=run.draft,
            answer_check=run.answer_check,
            answer_options=list(run.options.options) if run.options else None,
            date_comparison=run.settled.to_dict() if run.settled is not None else None,
            each_name=run.each_name,
        )


def _retrieves_first(trigger: Trigger, settings: RunSettings) -> bool:
    return trigger.action == "once" or (settings.initial_retrieval and trigger.action != "never")


def _check_questions(questions: object) -> None:
    """Refuse one string (or bytes) where a list of questions belongs: it would be answered a character at a time."""
    if isinstance(questions, (str, bytes, bytearray)):
        raise QuestionsTypeError(questions)
