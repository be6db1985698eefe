"""``ActiveRAGQueryEngine``: the engine's active retrieval loop as a LlamaIndex query engine."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Generator
from typing import Any

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.response.schema import RESPONSE_TYPE, AsyncStreamingResponse, Response, StreamingResponse
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.schema import QueryBundle

from active_rag.errors import EmptyQuestionError
from active_rag.loop import ActiveRAG, Router
from active_rag.model import ActiveLM
from active_rag.queries import QueryFormulator
from active_rag.routing import make_router
from active_rag.triggers import Trigger
from active_rag.types import Retriever, TokenEvent

from ._calls import EngineCall
from .retriever import LlamaIndexRetrieverAdapter

__all__ = ["ActiveRAGQueryEngine"]

_DONE = object()


class ActiveRAGQueryEngine(BaseQueryEngine):
    """Answer with active retrieval (FLARE, DRAGIN, ...) from a local model and any LlamaIndex retriever.

    >>> engine = ActiveRAGQueryEngine(ActiveLM.load("smollm2"), BM25Retriever.from_defaults(nodes=demo_nodes()),
    ...                               preset="dragin")  # doctest: +SKIP
    >>> response = engine.query("Were Scott Derrickson and Ed Wood of the same nationality?")  # doctest: +SKIP
    >>> response.source_nodes, response.metadata["retrievals"]  # doctest: +SKIP

    Args:
        lm: the engine's local model (``ActiveLM.load(...)`` or ``ActiveLM(hf_model, tokenizer)``).
        retriever: a LlamaIndex ``BaseRetriever`` (or an engine retriever with ``retrieve(query, k)``);
            ``None`` only for methods that never retrieve (``preset="wo-rag"``).
        preset: a method of ``active_rag.PRESETS`` (``dragin``, ``flare``, ``fl-rag``, ...); ``trigger`` and
            ``query`` then override its trigger / query formulator. Without a preset, ``trigger``
            defaults to ``"rind"`` and ``query`` to ``"attention"`` (the engine's defaults).
        router: ``"ta-are"``, ``"vanilla"``, a router object with ``decide(question)``, or ``None``.
        streaming: ``query``/``aquery`` return a ``StreamingResponse``/``AsyncStreamingResponse``.
        **options: passed to ``ActiveRAG``: ``top_k``, ``max_new_tokens``, ``max_retrievals``, ``prompt``,
            ``initial_retrieval``, ``stop``, ``answer_phrase``, ``method``...

    Responses: ``response.source_nodes`` are the original ``NodeWithScore`` s of the passages the engine
    retrieved (ids equal the trace's ``passage_ids``; first retrieval first, no duplicates) and
    ``response.metadata`` holds ``method``, ``retrievals`` (``Retrieval.to_dict()`` each), ``route``,
    ``warnings``, ``generated_tokens``, ``decisions`` (count) and ``complete``.

    Streaming: ``response_gen`` yields each answer token as the engine accepts it. ``source_nodes`` and
    ``metadata`` are the same list/dict objects throughout; they grow as retrievals happen and are
    final once ``response_gen`` is exhausted (``metadata["complete"]`` is then ``True``). Generation and
    retrieval run while ``response_gen`` is consumed, so their retriever spans open under whatever
    instrumentation span is active then, not under the (already closed) ``query`` span.

    Instrumentation: ``query``/``aquery`` open a span (``BaseQueryEngine``); every retrieval is a call of
    the retriever's own ``retrieve`` (its span and ``RetrievalStart/EndEvent``), and every trigger
    decision dispatches an :class:`~llamaindex_active_rag.ActiveRetrievalEvent` (a router verdict, an
    :class:`~llamaindex_active_rag.ActiveRouteEvent`).

    Thread safety: the configured ``ActiveRAG`` is shared and never mutated; each question runs on a
    shallow per-call copy with its own retriever adapter.
    """

    def __init__(
        self,
        lm: ActiveLM,
        retriever: BaseRetriever | Retriever | None = None,
        *,
        preset: str | None = None,
        trigger: str | Trigger | None = None,
        query: str | QueryFormulator | None = None,
        router: str | Router | None = None,
        streaming: bool = False,
        callback_manager: CallbackManager | None = None,
        **options: Any,
    ) -> None:
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
            rag = ActiveRAG(lm, adapter, **overrides)
        self._init(rag, adapter, streaming, callback_manager)

    def _init(
        self, rag: ActiveRAG, adapter: LlamaIndexRetrieverAdapter | None, streaming: bool, callback_manager: CallbackManager | None
    ) -> None:
        self._rag = rag
        self._adapter = adapter
        self._streaming = streaming
        super().__init__(callback_manager=callback_manager)

    @classmethod
    def from_engine(cls, rag: ActiveRAG, *, streaming: bool = False, callback_manager: CallbackManager | None = None) -> ActiveRAGQueryEngine:
        """Wrap an already configured ``ActiveRAG`` (its retriever may be an engine or a LlamaIndex retriever)."""
        self = cls.__new__(cls)
        adapter = LlamaIndexRetrieverAdapter(rag.retriever) if rag.retriever is not None else None
        self._init(rag, adapter, streaming, callback_manager)
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

    def start_call(self, question: str, **kwargs: Any) -> EngineCall:
        """A per-question engine run (used by the query methods and by ``ActiveRAGWorkflow``)."""
        if not isinstance(question, str) or not question.strip():
            raise EmptyQuestionError()
        adapter = self._adapter.fresh() if self._adapter is not None else None
        return EngineCall.start(self._rag, question, adapter=adapter, **kwargs)

    # -- BaseQueryEngine --------------------------------------------------------------------------
    def _get_prompt_modules(self) -> dict[str, Any]:
        return {}

    def _query(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        call = self.start_call(query_bundle.query_str)
        if self._streaming:
            return self._streaming_response(call)
        for _ in call.events():
            pass
        return self._response(call)

    async def _aquery(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        call = self.start_call(query_bundle.query_str)
        if self._streaming:
            return self._async_streaming_response(call)
        await asyncio.to_thread(_drain, call)
        return self._response(call)

    # -- responses --------------------------------------------------------------------------------
    @staticmethod
    def _response(call: EngineCall) -> Response:
        assert call.result is not None
        return Response(response=call.result.answer, source_nodes=call.source_nodes(), metadata=call.metadata())

    @staticmethod
    def _streaming_response(call: EngineCall) -> StreamingResponse:
        nodes: list[Any] = []
        metadata: dict[str, Any] = call.metadata()

        def tokens() -> Generator[str, None, None]:
            for event in call.events():
                if isinstance(event, TokenEvent):
                    yield event.text
                else:
                    nodes[:] = call.source_nodes()
                    metadata.update(call.metadata())

        return StreamingResponse(response_gen=tokens(), source_nodes=nodes, metadata=metadata)

    @staticmethod
    def _async_streaming_response(call: EngineCall) -> AsyncStreamingResponse:
        nodes: list[Any] = []
        metadata: dict[str, Any] = call.metadata()

        async def tokens() -> AsyncGenerator[str, None]:
            events = call.events()
            try:
                while (event := await asyncio.to_thread(next, events, _DONE)) is not _DONE:
                    if isinstance(event, TokenEvent):
                        yield event.text
                    else:
                        nodes[:] = call.source_nodes()
                        metadata.update(call.metadata())
            finally:
                try:
                    events.close()
                except ValueError:  # still running in its worker thread (the consumer was cancelled)
                    pass

        return AsyncStreamingResponse(response_gen=tokens(), source_nodes=nodes, metadata=metadata)


def _drain(call: EngineCall) -> None:
    for _ in call.events():
        pass
