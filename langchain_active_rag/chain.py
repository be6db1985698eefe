"""``ActiveRAG``: the engine's active retrieval loop as a LangChain ``Runnable``.

Input: a question string or ``{"question": "..."}`` (:class:`ActiveRAGInput`). Output
(:class:`ActiveRAGOutput`; ``rag.input_schema`` and ``rag.output_schema`` name these fields)::

    {"answer": str,                  # the full text the model wrote
     "short_answer": str,            # the answer span ("So the answer is X." -> "X"; ActiveRAGResult.short_answer)
     "documents": [Document, ...],   # the retriever's own Documents of the final prompt, in its order
     "trace": [Retrieval.to_dict(), ...],
     "route": {...}}                 # only with router=

``stream``/``astream`` yield :class:`~langchain_core.runnables.AddableDict` chunks that add up to that
output (``sum`` them with ``+``, as LCEL does): ``{"route": {...}}`` (with a router), then, as they
happen, ``{"trace": [Retrieval.to_dict()]}`` per retrieval (its query, passage ids and titles) and
``{"answer": text}`` per accepted token, and last ``{"documents": [...], "short_answer": ...}``: the Documents of
the passages the model read for its final answer (the prompt of its last segment,
``ActiveRAGResult.source_passage_ids``), once the answer is known. So ``rag.pick("answer").stream(q)``
streams plain text. Tokens come as the engine accepts them: at once where no check reads them (wo-RAG, SR-RAG,
``sr-rag-linked``), else once the trigger's check of their segment lets them through, so a retrieval that fires
after a segment (e.g. FL-RAG's every 16 tokens; its ``position`` says where) is streamed before the segment's
tokens. The ``answer`` chunks hold back only what the engine may still cut
(:class:`~active_rag.answer_stream.AnswerStream`, docs/api.md "Streaming"): a method that may write the answer
again (``reanswer``, an ``answer_check`` such as ``look-again``) yields its ``answer`` once, when the kept answer
is known; its tokens still stream live, each attempt from position 0, as ``active_rag.token`` events.

Run-time settings: ``rag.with_config(configurable={"preset": "flare", "top_k": 6})`` switches the fields named in
``CONFIGURABLE`` for that call, as ``rag.as_configurable()`` does (which also lists them in ``config_specs``);
per-call keyword arguments (``rag.invoke(q, top_k=2)``) come first.

Per-token and per-decision detail travels as custom events (``astream_events`` ``on_custom_event``,
callback handlers' ``on_custom_event``): ``active_rag.token`` (text, token_id, position, logprob,
entropy), ``active_rag.decision`` (every trigger decision), ``active_rag.retrieval`` and
``active_rag.route``. The generation itself is reported as child chat-model runs
(:mod:`langchain_active_rag.tracing`: ``on_chat_model_start`` / ``on_chat_model_stream`` /
``on_chat_model_end`` with logprobs, token usage and model name), one per segment between
retrievals and one for the router's decision. Retriever calls go through the retriever's own
``invoke`` with this run's child config, so traces nest them under the chain.

Nothing of the method lives here. The runnable holds one configured :class:`active_rag.ActiveRAG` per settings
(:meth:`ActiveRAG.configured_engine`: built at the first call, again when its settings change) and each call runs a
shallow copy of it with the call's own :class:`~langchain_active_rag.adapter.RetrieverAdapter`
(:func:`active_rag.per_call.engine_for_call`), as the LlamaIndex query engine does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import AddableDict, ConfigurableField, RunnableConfig, RunnableSerializable
from pydantic import BaseModel, ConfigDict, Field, InstanceOf, PrivateAttr, field_validator
from typing_extensions import TypedDict

import active_rag
from active_rag import (
    PRESETS,
    ActiveRAGResult,
    ContextPolicy,
    Passage,
    PromptTemplate,
    QueryFormulator,
    Retrieval,
    RouteDecision,
    TokenEvent,
    Trigger,
    TriggerDecision,
    make_router,
    make_trigger,
)

from active_rag._aio import aiter_in_thread, run_in_thread
from active_rag.per_call import PER_CALL_RETRIEVER, EngineCache, engine_for_call
from active_rag.components.settings import engine_kwargs

from ._convert import question_of, resolve_lm
from .adapter import adapt
from .events import DECISION_EVENT, RETRIEVAL_EVENT, ROUTE_EVENT, TOKEN_EVENT, dispatch, route_dict, token_dict
from .tracing import GenerationTracer


class ActiveRAGInput(TypedDict):
    """The mapping form of the input."""

    question: str


class ActiveRAGOutput(BaseModel):
    """The fields of the dict ``invoke`` returns (``stream`` chunks add up to it): ``rag.output_schema``."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    answer: str = Field(description="The full text the model wrote (ActiveRAGResult.answer).")
    short_answer: str = Field(description='The answer span: what follows "the answer is" (ActiveRAGResult.short_answer), '
                                          "else the whole answer.")
    documents: list[Document] = Field(description="The retriever's own Documents of the passages the model read for its "
                                                  "final answer (the prompt of its last segment), in the prompt's order.")
    trace: list[dict[str, Any]] = Field(description="One active_rag.Retrieval.to_dict() per retrieval: where, why "
                                                    "(trigger, token, score, threshold), the query, the passages.")
    route: dict[str, Any] | None = Field(default=None, description="The router's verdict (only with router=).")


#: Per-call keyword overrides accepted by ``invoke``/``stream``/... (``rag.invoke(q, top_k=2)``).
OVERRIDABLE = (
    "preset",
    "trigger",
    "query",
    "prompt",
    "top_k",
    "max_new_tokens",
    "max_retrievals",
    "initial_retrieval",
    "router",
    "answer_phrase",
    "context",
)
#: The fields :meth:`ActiveRAG.as_configurable` exposes by default.
CONFIGURABLE = ("preset", "trigger", "query", "context", "top_k", "max_new_tokens", "max_retrievals")
_DESCRIPTIONS = {
    "preset": "A method of active_rag.PRESETS (`active-rag methods` lists them): the papers' (dragin, flare, "
              "flare-instruct, fl-rag, fs-rag, sr-rag, wo-rag, self-ask, dragin-code) and beyond them (sr-rag-choose, "
              "sr-rag-linked, look-again-grounded).",
    "trigger": "When to retrieve: an active_rag trigger name (rind, low-confidence, fixed-length, ...) or method alias.",
    "query": "What to retrieve: an active_rag query formulator name (attention, masked-sentence, last-tokens, ...).",
    "context": "What the prompt keeps of the retrieved passages: replace (the papers'), keep-newest, accumulate, read-links, focus or rerank.",
    "top_k": "Passages per retrieval.",
    "max_new_tokens": "Maximum answer length in tokens.",
    "max_retrievals": "Maximum retrievals during generation (None: no cap).",
}


def paired_query(trigger: str | Trigger) -> str | None:
    """The query formulator that the paper method using ``trigger`` pairs with it (from ``PRESETS``)."""
    name = make_trigger(trigger).name
    for preset in PRESETS.values():
        if preset.trigger == name:
            return preset.query
    return None


class ActiveRAG(RunnableSerializable[Any, dict[str, Any]]):
    """Active retrieval-augmented generation (DRAGIN, FLARE, ...) over any LangChain retriever.

    >>> rag = ActiveRAG(ActiveLM.load("smollm2"), retriever, preset="dragin")  # doctest: +SKIP
    >>> rag.invoke("Who was the father of Kasper Schmeichel?")["answer"]      # doctest: +SKIP

    Choosing the method: ``preset`` names one of :data:`active_rag.PRESETS`; ``trigger`` and ``query``
    (names or instances) override its parts. Without a preset, ``trigger`` alone picks its paper's
    query formulator (``fixed-length`` -> ``last-tokens``, ``low-confidence`` -> ``masked-sentence``, ...);
    with neither, the engine's default (DRAGIN: ``rind`` + ``attention``) applies. When ``trigger`` is set
    and ``query`` is not, the trigger's paired query also replaces the preset's, so switching the trigger
    at run time (:meth:`as_configurable`) always gives a working combination.

    ``model`` is an :class:`active_rag.ActiveLM`, a :class:`~langchain_active_rag.ChatActiveHF`, a
    registry name, or a chat model served by an OpenAI-compatible endpoint that returns logprobs
    (``ChatOpenAI(base_url=..., logprobs=True)``, ``ChatOllama``; see ``tokenizer``); ``router`` is ``"ta-are"``, ``"vanilla"`` or an engine router object; any other
    :class:`active_rag.ActiveRAG` keyword (``answer=AnswerStage(...)``, ``settings=RunSettings(...)``) or flat name of
    one of their fields (``answer_options=True``; :data:`active_rag.components.settings.FLAT_NAMES`) goes in ``engine_options``.
    """

    model: Any
    retriever: InstanceOf[BaseRetriever] | None = None
    preset: str | None = None
    trigger: str | InstanceOf[Trigger] | None = None
    query: str | InstanceOf[QueryFormulator] | None = None
    context: str | InstanceOf[ContextPolicy] | None = None
    """What the prompt keeps of the retrieved passages (:mod:`active_rag.components.context`); ``None``: the preset's, else
    ``replace``."""
    prompt: str | InstanceOf[PromptTemplate] | None = None
    top_k: int | None = None
    """Passages per retrieval; ``None``: the preset's (``sr-rag`` 6), else 3."""
    max_new_tokens: int = 256
    max_retrievals: int | None = None
    """Cap on retrievals per question; ``None`` (default, as the engine's): no cap, the engine's generated-token
    guard (4 x ``max_new_tokens``) stops runaways."""
    initial_retrieval: bool | None = None
    router: Any = None
    answer_phrase: str | None = "auto"
    """Forced when the answer ends without it (DRAGIN App. B); ``"auto"``: "So the answer is" for the methods that
    read the answer span (an answer check, ``answer_options``), else none; ``None``: never (the engine's)."""
    stop: Callable[[str], bool] | None = None
    engine_options: dict[str, Any] = {}
    pass_k: bool = True
    """Pass ``k=top_k`` to ``retriever.invoke`` (turn off for retrievers that reject extra keywords)."""
    weights: str = "auto"
    """When ``model`` is a name: how the loaded model stores its linear layers (``auto``: mixed on the CPU,
    ``float32``, ``int8``, ``int4``; :mod:`active_rag.models.weights`)."""

    tokenizer: Any = None
    """When ``model`` is a chat model served by an OpenAI-compatible endpoint (``ChatOpenAI(base_url=...,
    logprobs=True)``): the served model's tokenizer or registry name, so that the engine lays out prompts as the local
    engine does (docs/endpoint.md); ``None``: plain text prompts."""

    model_config = ConfigDict(arbitrary_types_allowed=True, protected_namespaces=())
    _engines: EngineCache = PrivateAttr(default_factory=EngineCache)  # configured engines by their settings

    def __init__(
        self,
        model: Any = None,
        retriever: BaseRetriever | active_rag.BM25Index | None = None,
        *,
        preset: str | None = None,
        trigger: str | Trigger | None = None,
        query: str | QueryFormulator | None = None,
        context: str | ContextPolicy | None = None,
        prompt: str | PromptTemplate | None = None,
        top_k: int | None = None,
        max_new_tokens: int = 256,
        max_retrievals: int | None = None,
        initial_retrieval: bool | None = None,
        router: Any = None,
        answer_phrase: str | None = "auto",
        stop: Callable[[str], bool] | None = None,
        engine_options: dict[str, Any] | None = None,
        pass_k: bool = True,
        weights: str = "auto",
        tokenizer: Any = None,
        name: str | None = None,
    ) -> None:
        """See the class docstring and the fields' own; ``model`` and ``retriever`` may be given by position,
        ``name`` is the Runnable's name in traces."""
        if model is None:
            raise TypeError("ActiveRAG needs a model: an active_rag.ActiveLM, a ChatActiveHF or a model name.")
        super().__init__(
            model=model, retriever=retriever, preset=preset, trigger=trigger, query=query, context=context, prompt=prompt,
            top_k=top_k, max_new_tokens=max_new_tokens, max_retrievals=max_retrievals,
            initial_retrieval=initial_retrieval, router=router, answer_phrase=answer_phrase, stop=stop,
            engine_options=dict(engine_options or {}), pass_k=pass_k, weights=weights, tokenizer=tokenizer, name=name,
        )

    @field_validator("retriever", mode="before")
    @classmethod
    def _wrap_engine_index(cls, value: Any) -> Any:
        if isinstance(value, active_rag.BM25Index):
            from .retrievers import BM25sRetriever

            return BM25sRetriever.from_index(value)
        return value

    @classmethod
    def is_lc_serializable(cls) -> bool:
        return False

    @property
    def InputType(self) -> Any:  # noqa: N802
        return str | ActiveRAGInput

    @property
    def OutputType(self) -> Any:  # noqa: N802
        return ActiveRAGOutput

    # -- configuration ------------------------------------------------------------------------------
    def as_configurable(self, *fields: str, prefix: str = "") -> Any:
        """This runnable with ``fields`` (default: preset, trigger, query, context, top_k, max_new_tokens,
        max_retrievals) switchable at run time and listed in ``config_specs`` / ``config_schema()``, e.g.
        ``rag.as_configurable().with_config(configurable={"trigger": "flare"})``. (``rag.with_config(...)`` switches
        the default ones as well; this also lists them, takes other fields, and a ``prefix``.)

        Config keys are ``prefix + field``; this is ``configurable_fields`` with one
        :class:`~langchain_core.runnables.ConfigurableField` per field."""
        names = fields or CONFIGURABLE
        unknown = [n for n in names if n not in type(self).model_fields]
        if unknown:
            raise ValueError(f"ActiveRAG has no field(s) {unknown}; configurable ones include {list(CONFIGURABLE)}.")
        return self.configurable_fields(
            **{
                n: ConfigurableField(id=prefix + n, name=n, description=_DESCRIPTIONS.get(n, f"ActiveRAG.{n}"))
                for n in names
            }
        )

    def _settings(self, overrides: dict[str, Any], config: RunnableConfig | None = None) -> dict[str, Any]:
        """This runnable's settings for one call: its fields, then the ``CONFIGURABLE`` keys of ``config``'s
        ``configurable`` (``with_config``), then the per-call ``overrides``."""
        unknown = sorted(set(overrides) - set(OVERRIDABLE))
        if unknown:
            raise TypeError(f"ActiveRAG got unexpected keyword argument(s) {unknown}; per-call overrides: {list(OVERRIDABLE)}.")
        configurable = (config or {}).get("configurable") or {}
        switched = {name: configurable[name] for name in CONFIGURABLE if name in configurable}
        return {**{name: getattr(self, name) for name in OVERRIDABLE}, **switched, **overrides}

    def configured_engine(self, config: RunnableConfig | None = None, *, retrieves: bool | None = None,
                          **overrides: Any) -> active_rag.ActiveRAG:
        """The configured :class:`active_rag.ActiveRAG` of this runnable's settings (its fields, then the
        ``CONFIGURABLE`` keys of ``config``'s ``configurable``, then ``overrides``): built at the first call with
        these settings and shared by every call with them, built again when they change (a field set anew, another
        ``with_config``, a per-call override). Calls run a copy of it with their own retriever (:meth:`build_engine`);
        its own retriever only stands in for theirs (:data:`active_rag.per_call.PER_CALL_RETRIEVER`).

        ``retrieves``: whether calls bring a retriever (default: whether this runnable has one); without one, a method
        that retrieves raises the engine's ``ValueError``."""
        s = self._settings(overrides, config)
        if retrieves is None:
            retrieves = self.retriever is not None
        key = {"settings": s, "model": self.model, "weights": self.weights, "tokenizer": self.tokenizer,
               "stop": self.stop, "engine_options": self.engine_options, "retrieves": retrieves}
        return self._engines.get(key, lambda: self._build(s, PER_CALL_RETRIEVER if retrieves else None))

    def build_engine(
        self, retriever: Any = None, config: RunnableConfig | None = None, **overrides: Any
    ) -> active_rag.ActiveRAG:
        """The :class:`active_rag.ActiveRAG` one call runs: a shallow copy of :meth:`configured_engine` (sharing its
        model, trigger, query formulator, prompt and router) with the call's retriever swapped in.

        ``retriever`` is an engine retriever; by default a :class:`RetrieverAdapter` over this runnable's
        LangChain retriever whose calls run with ``config``, whose ``configurable`` may switch the
        ``CONFIGURABLE`` settings."""
        if retriever is None and self.retriever is not None:
            retriever = adapt(self.retriever, config, pass_k=self.pass_k)
        base = self.configured_engine(config, retrieves=retriever is not None, **overrides)
        return engine_for_call(base, retriever=retriever)

    def _build(self, s: dict[str, Any], retriever: Any) -> active_rag.ActiveRAG:
        """A new engine of the settings ``s`` (:meth:`_settings`) around ``retriever``."""
        lm = resolve_lm(self.model, self.weights, self.tokenizer)
        kwargs: dict[str, Any] = dict(self.engine_options)
        trigger, query = s["trigger"], s["query"]
        if trigger is not None:
            kwargs["trigger"] = trigger
            if query is None:
                query = paired_query(trigger)
        if query is not None:
            kwargs["query"] = query
        for name in ("prompt", "initial_retrieval", "context"):
            if s[name] is not None:
                kwargs[name] = s[name]
        kwargs["answer_phrase"] = s["answer_phrase"]
        router = s["router"]
        if isinstance(router, str):
            router = make_router(router, lm)
        if s["top_k"] is not None:
            kwargs["top_k"] = s["top_k"]
        kwargs.update(max_new_tokens=s["max_new_tokens"], max_retrievals=s["max_retrievals"])
        kwargs.update(router=router, stop=self.stop)
        if s["preset"] is not None:
            if trigger is not None or query is not None:
                kwargs.setdefault("method", None)  # the engine names the combination "trigger+query"
            return active_rag.ActiveRAG.from_preset(s["preset"], lm, retriever, **kwargs)
        return active_rag.ActiveRAG(lm, retriever, **engine_kwargs(kwargs))

    # -- the one loop -------------------------------------------------------------------------------
    def _chunks(self, question: Any, config: RunnableConfig, overrides: dict[str, Any],
                final: dict[str, Any] | None = None) -> Iterator[AddableDict]:
        """Run the engine for one question; yield the output as AddableDict chunks (see the module docs)."""
        adapter = adapt(self.retriever, config, pass_k=self.pass_k) if self.retriever is not None else None
        engine = self.build_engine(adapter, config, **overrides)
        tracer = GenerationTracer(
            config, engine.model, engine.prompt, question.strip() if isinstance(question, str) else "",
            max_new_tokens=engine.max_new_tokens, prompt_mode=getattr(engine, "prompt_mode", "single"),
        )
        answer = engine.answer_stream()  # the chunks join to the engine's answer (see its docstring)
        read: dict[str, Passage] = {}  # every passage retrieved, by id: the final prompt's are among them
        keys: set[str] = set()
        try:
            for event in engine.stream(question):
                chunk: AddableDict | None = None
                if isinstance(event, TokenEvent):
                    tracer.token(event)
                    dispatch(TOKEN_EVENT, token_dict(event), config)
                    delta = answer.push(event)
                    chunk = AddableDict(answer=delta) if delta else None
                elif isinstance(event, Retrieval):
                    tracer.retrieval(event)
                    data = event.to_dict()
                    dispatch(RETRIEVAL_EVENT, data, config)
                    read.update((p.id, p) for p in event.passages if p.id not in read)
                    chunk = AddableDict(trace=[data])
                elif isinstance(event, TriggerDecision):
                    dispatch(DECISION_EVENT, event.to_dict(), config)
                elif isinstance(event, RouteDecision):
                    tracer.route(event)
                    data = route_dict(event)
                    dispatch(ROUTE_EVENT, data, config)
                    chunk = AddableDict(route=data)
                elif isinstance(event, ActiveRAGResult):
                    tracer.finish()
                    if final is not None:
                        final["answer"] = event.answer
                    rest = answer.finish(event.answer)
                    if rest:
                        keys.add("answer")
                        yield AddableDict(answer=rest)
                    empty = {"answer": "", "trace": []}
                    final_passages = [read[i] for i in event.source_passage_ids if i in read]
                    documents = adapter.documents(final_passages) if adapter is not None else []
                    chunk = AddableDict({**{k: v for k, v in empty.items() if k not in keys},
                                         "documents": documents, "short_answer": event.short_answer})
                if chunk is not None:
                    keys.update(chunk)
                    yield chunk
        except BaseException as exc:
            tracer.error(exc)
            raise

    def _run(self, input: Any, config: RunnableConfig, **overrides: Any) -> dict[str, Any]:
        total = AddableDict()
        final: dict[str, Any] = {}
        for chunk in self._chunks(question_of(input), config, overrides, final):
            total = total + chunk
        if "answer" in final:
            total["answer"] = final["answer"]  # the chunks join to it; the engine's own string all the same
        return {k: total[k] for k in ("answer", "short_answer", "documents", "trace", "route") if k in total}

    # -- Runnable interface -------------------------------------------------------------------------
    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> dict[str, Any]:
        return self._call_with_config(self._run, input, config, **kwargs)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> dict[str, Any]:
        async def run(value: Any, config: RunnableConfig) -> dict[str, Any]:
            return await run_in_thread(self._run, value, config, **kwargs)

        return await self._acall_with_config(run, input, config)

    def stream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Iterator[AddableDict]:
        def transform(inputs: Iterator[Any], config: RunnableConfig) -> Iterator[AddableDict]:
            value = _last(inputs)
            yield from self._chunks(question_of(value), config, kwargs)

        yield from self._transform_stream_with_config(iter([input]), transform, config)

    async def astream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> AsyncIterator[AddableDict]:
        async def transform(inputs: AsyncIterator[Any], config: RunnableConfig) -> AsyncIterator[AddableDict]:
            value = None
            async for value in inputs:  # noqa: B007 - the input is one value
                pass
            question = question_of(value)
            async for chunk in aiter_in_thread(lambda: self._chunks(question, config, kwargs)):
                yield chunk

        async for chunk in self._atransform_stream_with_config(_aiter([input]), transform, config):
            yield chunk


def _last(values: Iterator[Any]) -> Any:
    value = None
    for value in values:  # noqa: B007
        pass
    return value


async def _aiter(values: list[Any]) -> AsyncIterator[Any]:
    for v in values:
        yield v


__all__ = ["ActiveRAG", "ActiveRAGInput", "ActiveRAGOutput", "paired_query", "OVERRIDABLE", "CONFIGURABLE"]
