"""``ActiveRAGQueryEngine``: the engine's active retrieval loop as a LlamaIndex query engine."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import AsyncGenerator, Generator
from typing import Any

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.response.schema import RESPONSE_TYPE, AsyncStreamingResponse, Response, StreamingResponse
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.prompts import BasePromptTemplate, PromptTemplate
from llama_index.core.schema import QueryBundle

from active_rag._aio import aiter_in_thread, run_in_thread
from active_rag.errors import EmptyQuestionError
from active_rag.engine import ActiveRAG, Router
from active_rag.decoding.model import ActiveLM
from active_rag.remote.lm import RemoteLM
from active_rag.components.prompts import PromptTemplate as EnginePrompt
from active_rag.components.queries import QueryFormulator
from active_rag.components.routing import make_router
from active_rag.components.triggers import Trigger
from active_rag.types import Retriever
from active_rag.components.settings import engine_kwargs

from .engine_call import EngineCall
from .llm import ActiveHFLLM
from .retriever import LlamaIndexRetrieverAdapter, RetrieverFactory

__all__ = ["ActiveRAGQueryEngine"]

#: ``get_prompts()`` keys: the method's prompt without passages, and with the retrieved passages.
DIRECT_PROMPT = "direct_prompt"
WITH_DOCS_PROMPT = "with_docs_prompt"
_PROMPT_VARS = {DIRECT_PROMPT: ("question",), WITH_DOCS_PROMPT: ("question", "documents")}
_MARKS = {"question": "\uE002Q\uE002", "documents": "\uE002D\uE002"}


def engine_template(name: str, prompt: BasePromptTemplate | str) -> str:
    """A LlamaIndex prompt as an engine ``str.format`` template.

    The prompt is formatted the LlamaIndex way (partials and variable mappings applied; any other
    ``{name}``, e.g. a JSON example, stays literal text, as LlamaIndex leaves it), with markers for the
    engine's variables. Raises ``ValueError`` when ``{question}`` (or, with passages, ``{documents}``) is missing.
    """
    needed = _PROMPT_VARS[name]
    if isinstance(prompt, str):
        prompt = PromptTemplate(prompt)
    if not isinstance(prompt, BasePromptTemplate):
        raise TypeError(f"update_prompts({name}=...) needs a LlamaIndex prompt template or a string, got {type(prompt).__name__}.")
    text = prompt.format(**{v: _MARKS[v] for v in needed})
    missing = [v for v in needed if _MARKS[v] not in text]
    if missing:
        raise ValueError(
            f"The {name} template must contain " + " and ".join("{" + v + "}" for v in missing)
            + f": the engine fills {', '.join('{' + v + '}' for v in needed)}."
        )
    text = text.replace("{", "{{").replace("}", "}}")
    for v in needed:
        text = text.replace(_MARKS[v], "{" + v + "}")
    return text


def llamaindex_template(template: str) -> PromptTemplate:
    """An engine ``str.format`` template as a LlamaIndex prompt (escaped braces shown as single braces)."""
    return PromptTemplate(template.replace("{{", "{").replace("}}", "}"))


class ActiveRAGQueryEngine(BaseQueryEngine):
    """Answer with active retrieval (FLARE, DRAGIN, ...) from a local model and any LlamaIndex retriever.

    >>> engine = ActiveRAGQueryEngine(ActiveLM.load("smollm2"), BM25Retriever.from_defaults(nodes=demo_nodes()),
    ...                               preset="dragin")  # doctest: +SKIP
    >>> response = engine.query("Were Scott Derrickson and Ed Wood of the same nationality?")  # doctest: +SKIP
    >>> response.source_nodes, response.metadata["retrievals"]  # doctest: +SKIP

    Args:
        lm: the engine's local model (``ActiveLM.load(...)`` or ``ActiveLM(hf_model, tokenizer)``), or an
            :class:`~llamaindex_active_rag.ActiveHFLLM`.
        retriever: a LlamaIndex ``BaseRetriever`` (never changed: when the engine asks for more nodes than its
            ``similarity_top_k``, a copy with ``similarity_top_k=k`` answers; one without that setting gives what it
            gives, and a warning says so when that is fewer than ``top_k``), or a factory ``k -> BaseRetriever``
            (e.g. ``lambda k: BM25Retriever.from_defaults(index=..., similarity_top_k=k)``), or an engine
            retriever with ``retrieve(query, k)``; ``None`` only for methods that never retrieve (``preset="wo-rag"``).
        llm: an :class:`~llamaindex_active_rag.ActiveHFLLM` instead of ``lm`` (its model generates; the LLM
            instrumentation events name it). Never ``Settings.llm``.
        preset: a method of ``active_rag.PRESETS`` (``dragin``, ``flare``, ``fl-rag``, ...); ``trigger`` and
            ``query`` then override its trigger / query formulator. Without a preset, ``trigger``
            defaults to ``"rind"`` and ``query`` to ``"attention"`` (the engine's defaults).
        router: ``"ta-are"``, ``"vanilla"``, a router object with ``decide(question)``, or ``None``.
        streaming: ``query``/``aquery`` return a ``StreamingResponse``/``AsyncStreamingResponse``.
        **options: passed to ``ActiveRAG``: ``context`` (what the prompt keeps: ``"replace"``, ``"keep-newest"``,
            ``"accumulate"``, ``"read-links"``, ``"focus"``, ``"rerank"`` or an ``active_rag.ContextPolicy``), ``top_k``,
            ``max_new_tokens``, ``prompt``, ``answer`` (an ``active_rag.AnswerStage``), ``settings`` (an
            ``active_rag.RunSettings``), or one field of those by its flat name (``answer_options``,
            ``initial_retrieval``, ``max_retrievals``, ``stop``, ``answer_phrase``, ``method``...;
            ``active_rag.components.settings.FLAT_NAMES``).

    Responses: ``str(response)`` is the full text the model wrote; ``response.source_nodes`` are the
    ``NodeWithScore`` s of every passage the model read for its final answer, in the prompt's order (the prompt of
    its last segment, ``ActiveRAGResult.source_passage_ids``; a linked look's passages included): the retriever's own
    nodes, with their scores; the trace (``metadata["retrievals"]``) says what each retrieval brought. ``response.metadata`` holds ``method``, ``retrievals``
    (``Retrieval.to_dict()`` each), ``route``, ``warnings``, ``generated_tokens``, ``decisions`` (count),
    ``short_answer`` (the answer span, ``ActiveRAGResult.short_answer``) and ``complete``.

    Streaming: ``query`` runs the engine up to its first answer token, so ``source_nodes`` already hold the
    nodes of the prompt it was written with (SR-RAG's, FLARE's first retrieval) when the response comes back; then
    ``response_gen`` yields each answer token as the engine accepts it: at once where no check reads it, else
    once its segment's check let it through; only what the engine may still cut is held back
    (:class:`~active_rag.answer_stream.AnswerStream`; a method that may write the answer again, ``reanswer`` or an
    answer check such as ``look-again``, yields the kept answer once, when known). ``source_nodes`` and
    ``metadata`` are the same list/dict objects throughout; they follow the prompt as retrievals change it and are final once
    ``response_gen`` is exhausted (``metadata["complete"]`` is then ``True``). The generation after the first
    token runs while ``response_gen`` is consumed, so its retriever spans open under whatever instrumentation
    span is active then, not under the (already closed) ``query`` span.

    Instrumentation: ``query``/``aquery`` open a span (``BaseQueryEngine``); every retrieval is a call of
    the retriever's own ``retrieve`` (its span and ``RetrievalStart/EndEvent``); every trigger
    decision dispatches an :class:`~llamaindex_active_rag.ActiveRetrievalEvent` (a router verdict, an
    :class:`~llamaindex_active_rag.ActiveRouteEvent`); and the generation is reported as LLM calls
    (``LLMCompletionStartEvent`` / ``LLMCompletionInProgressEvent`` per token / ``LLMCompletionEndEvent``,
    one call per segment between retrievals; see :mod:`llamaindex_active_rag.engine_call`).

    Prompts: ``get_prompts()`` gives the method's two templates as LlamaIndex ``PromptTemplate`` s,
    ``direct_prompt`` (``{question}``; before any retrieval) and ``with_docs_prompt`` (``{question}`` and
    ``{documents}``, the retrieved passages numbered ``[1] title text``); ``update_prompts({...})``
    replaces either (one without these variables raises ``ValueError``; any other ``{name}`` stays literal
    text, as LlamaIndex's own formatting leaves it).

    Thread safety: the configured ``ActiveRAG`` is shared and never mutated (``update_prompts`` swaps in
    a copy); each question runs on a shallow per-call copy with its own retriever adapter. ``aquery``
    runs the engine in a worker thread, so concurrent questions share the model's batched decoding.
    """

    def __init__(
        self,
        lm: ActiveLM | ActiveHFLLM | None = None,
        retriever: BaseRetriever | RetrieverFactory | Retriever | None = None,
        *,
        llm: ActiveHFLLM | None = None,
        preset: str | None = None,
        trigger: str | Trigger | None = None,
        query: str | QueryFormulator | None = None,
        router: str | Router | None = None,
        streaming: bool = False,
        callback_manager: CallbackManager | None = None,
        tokenizer: Any = None,
        **options: Any,
    ) -> None:
        lm, llm = _model_and_llm(lm, llm, tokenizer)
        adapter = LlamaIndexRetrieverAdapter(retriever) if retriever is not None else None
        if isinstance(router, str):
            router = make_router(router, lm)
        overrides: dict[str, Any] = dict(options)
        if trigger is not None:
            overrides["trigger"] = trigger
        if query is not None:
            overrides["query"] = query
        if router is not None:
            overrides["router"] = router
        if preset is not None:
            rag = ActiveRAG.from_preset(preset, lm, adapter, **overrides)
        else:
            rag = ActiveRAG(lm, adapter, **engine_kwargs(overrides))
        if adapter is not None:
            adapter.check_top_k(rag.top_k)
        self._init(rag, adapter, streaming, callback_manager, llm)

    def _init(
        self,
        rag: ActiveRAG,
        adapter: LlamaIndexRetrieverAdapter | None,
        streaming: bool,
        callback_manager: CallbackManager | None,
        llm: ActiveHFLLM | None = None,
    ) -> None:
        self._rag = rag
        self._adapter = adapter
        self._streaming = streaming
        if llm is None and isinstance(rag.model, RemoteLM):
            llm = _RemoteInfo(rag.model)
        self._llm = llm if llm is not None else ActiveHFLLM(rag.model, max_new_tokens=rag.max_new_tokens)
        super().__init__(callback_manager=callback_manager)

    @classmethod
    def from_engine(
        cls,
        rag: ActiveRAG,
        *,
        streaming: bool = False,
        callback_manager: CallbackManager | None = None,
        llm: ActiveHFLLM | None = None,
    ) -> ActiveRAGQueryEngine:
        """Wrap an already configured ``ActiveRAG`` (its retriever may be an engine or a LlamaIndex retriever)."""
        if llm is not None:
            _model_and_llm(rag.model, llm)  # the LLM must wrap the engine's model
        self = cls.__new__(cls)
        adapter = LlamaIndexRetrieverAdapter(rag.retriever) if rag.retriever is not None else None
        self._init(rag, adapter, streaming, callback_manager, llm)
        return self

    # -- properties -------------------------------------------------------------------------------
    @property
    def rag(self) -> ActiveRAG:
        """The configured engine (shared, never mutated; each question runs on a per-call copy)."""
        return self._rag

    @property
    def retriever(self) -> BaseRetriever | Retriever | None:
        """The retriever given at construction."""
        return self._adapter.retriever if self._adapter is not None else None

    @property
    def streaming(self) -> bool:
        return self._streaming

    @property
    def llm(self) -> ActiveHFLLM:
        """The LLM the generation is reported as (the one given, or an ``ActiveHFLLM`` over the engine's model)."""
        return self._llm

    def start_call(self, question: str, **kwargs: Any) -> EngineCall:
        """A per-question engine run (used by the query methods and by ``ActiveRAGWorkflow``)."""
        if not isinstance(question, str) or not question.strip():
            raise EmptyQuestionError()
        adapter = self._adapter.fresh() if self._adapter is not None else None
        model_dict = self._llm.to_dict() if isinstance(self._llm, ActiveHFLLM) else _remote_dict(self._rag.model)
        return EngineCall.start(self._rag, question, adapter=adapter, model_dict=model_dict, **kwargs)

    # -- PromptMixin ------------------------------------------------------------------------------
    def _get_prompts(self) -> dict[str, BasePromptTemplate]:
        prompt = self._rag.prompt
        return {DIRECT_PROMPT: llamaindex_template(prompt.direct), WITH_DOCS_PROMPT: llamaindex_template(prompt.with_docs)}

    def _update_prompts(self, prompts_dict: dict[str, Any]) -> None:
        changes = {
            field: engine_template(key, prompts_dict[key])
            for key, field in ((DIRECT_PROMPT, "direct"), (WITH_DOCS_PROMPT, "with_docs"))
            if key in prompts_dict
        }
        if not changes:
            return
        current: EnginePrompt = self._rag.prompt
        rag = copy.copy(self._rag)  # the configured engine may be shared (from_engine): never mutate it
        name = current.name if current.name.endswith("+custom") else f"{current.name}+custom"
        rag.prompt = dataclasses.replace(current, name=name, **changes)
        self._rag = rag

    def _get_prompt_modules(self) -> dict[str, Any]:
        return {}  # the routers' prompts are the authors' fixed templates (active_rag.components.routing)

    # -- BaseQueryEngine --------------------------------------------------------------------------

    def _query(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        call = self.start_call(query_bundle.query_str)
        if self._streaming:
            call.prime()  # the retrievals before the first token: source_nodes are known when the response is
            return self._streaming_response(call)
        call.drain()
        return self._response(call)

    async def _aquery(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        call = self.start_call(query_bundle.query_str)
        if self._streaming:
            await run_in_thread(call.prime)
            return self._async_streaming_response(call)
        await run_in_thread(call.drain)
        return self._response(call)

    # -- responses --------------------------------------------------------------------------------
    @staticmethod
    def _response(call: EngineCall) -> Response:
        assert call.result is not None
        return Response(response=call.result.answer, source_nodes=call.source_nodes(), metadata=call.metadata())

    @staticmethod
    def _streaming_response(call: EngineCall) -> StreamingResponse:
        call.nodes.extend(call.source_nodes())  # what prime() retrieved before the first token
        call.meta.update(call.metadata())

        def tokens() -> Generator[str, None, None]:
            for event in call.events():
                if piece := call.answer_text(event):
                    yield piece

        return StreamingResponse(response_gen=tokens(), source_nodes=call.nodes, metadata=call.meta)

    @staticmethod
    def _async_streaming_response(call: EngineCall) -> AsyncStreamingResponse:
        call.nodes.extend(call.source_nodes())  # what prime() retrieved before the first token
        call.meta.update(call.metadata())

        async def tokens() -> AsyncGenerator[str, None]:
            async for event in aiter_in_thread(call.events):
                if piece := call.answer_text(event):
                    yield piece

        return AsyncStreamingResponse(response_gen=tokens(), source_nodes=call.nodes, metadata=call.meta)


class _RemoteInfo:
    """What ``ActiveRAGQueryEngine.llm`` reports for a :class:`~active_rag.remote.lm.RemoteLM` given directly."""

    def __init__(self, lm: RemoteLM) -> None:
        self.lm = lm

    def to_dict(self) -> dict[str, Any]:
        return _remote_dict(self.lm)


def _remote_dict(lm: Any) -> dict[str, Any]:
    """The served model as instrumentation events name it (never its API key)."""
    describe = getattr(lm, "describe", None)
    info = describe() if callable(describe) and isinstance(lm, RemoteLM) else {}
    return {"class_name": "RemoteLM", **info}


def _model_and_llm(lm: Any, llm: Any, tokenizer: Any = None) -> tuple[Any, Any]:
    """The engine's model and the LLM it is reported as, from ``lm`` and/or ``llm``: an ``ActiveLM`` / ``ActiveHFLLM``,
    or a model behind an OpenAI-compatible endpoint (``OpenAILike``, ``OpenAI``, an ``active_rag.RemoteLM``),
    whose ``tokenizer`` (registry name, folder or tokenizer) gives the engine the served model's own prompt layout."""
    from active_rag.remote.clients import is_remote_client, remote_from_client

    for candidate in (lm, llm):
        if candidate is None or isinstance(candidate, (ActiveLM, ActiveHFLLM, RemoteLM)) or not is_remote_client(candidate):
            continue
        if lm is not None and llm is not None and lm is not llm:
            raise ValueError("Pass the model once: either ActiveRAGQueryEngine(OpenAILike(...)) or llm=OpenAILike(...).")
        return remote_from_client(candidate, tokenizer), candidate
    if isinstance(lm, RemoteLM):
        if llm is not None:
            raise ValueError("Pass the model once: either a RemoteLM or llm=OpenAILike(...).")
        return lm, None
    if isinstance(lm, ActiveHFLLM):
        if llm is not None and llm is not lm:
            raise ValueError("Pass the model once: either ActiveRAGQueryEngine(llm) or ActiveRAGQueryEngine(llm=llm).")
        lm, llm = None, lm
    if llm is not None and not isinstance(llm, ActiveHFLLM):
        raise TypeError(
            f"llm= must be an llamaindex_active_rag.ActiveHFLLM (the engine reads its model's logits and attention), "
            f"got {type(llm).__name__}."
        )
    if lm is None:
        if llm is None:
            raise TypeError("ActiveRAGQueryEngine needs a model: pass ActiveLM.load('smollm2'), llm=ActiveHFLLM.from_name('smollm2') "
                            "or an OpenAI-compatible server's OpenAILike(api_base=...).")
        return llm.lm, llm
    if not isinstance(lm, ActiveLM):
        raise TypeError(f"ActiveRAGQueryEngine needs an active_rag.ActiveLM, an ActiveHFLLM or an OpenAILike (an OpenAI-compatible "
                        f"server), got {type(lm).__name__}.")
    if llm is not None and llm.lm is not lm:
        raise ValueError("lm and llm= are different models: pass one of them (llm=ActiveHFLLM(lm) to use both).")
    return lm, llm
