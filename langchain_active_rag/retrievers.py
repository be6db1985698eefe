"""``BM25sRetriever``: the engine's bm25s index (:class:`active_rag.BM25Index`) as a LangChain retriever."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables.config import run_in_executor
from pydantic import ConfigDict, InstanceOf

from active_rag import BM25Index

from ._convert import document_to_passage, passage_to_document


class BM25sRetriever(BaseRetriever):
    """BM25 over a local corpus (bm25s, English stemming and stopwords), best ``k`` first.

    >>> retriever = BM25sRetriever.from_jsonl(demo_corpus_path(), k=3)   # doctest: +SKIP
    >>> retriever.invoke("Kasper Schmeichel father", k=2)                 # doctest: +SKIP

    ``k`` (default 4) can be overridden per call: ``retriever.invoke(query, k=2)``. Documents carry the
    passage id as ``doc.id`` and ``metadata["id"]``, plus ``metadata["title"]`` and ``metadata["score"]``.
    """

    index: InstanceOf[BM25Index]
    k: int = 4

    model_config = ConfigDict(arbitrary_types_allowed=True)

    # -- constructors ---------------------------------------------------------------------------------
    @classmethod
    def from_index(cls, index: BM25Index, **kwargs: Any) -> BM25sRetriever:
        """Wrap an existing :class:`active_rag.BM25Index` (e.g. ``BM25Index.demo()``)."""
        return cls(index=index, **kwargs)

    @classmethod
    def from_jsonl(cls, path: str | os.PathLike[str], **kwargs: Any) -> BM25sRetriever:
        """Index a JSONL corpus (one ``{"id", "title", "text"}`` object per line)."""
        return cls(index=BM25Index.from_jsonl(path), **kwargs)

    @classmethod
    def from_documents(
        cls,
        documents: Iterable[Document],
        *,
        stemmer: str | None = "english",
        stopwords: str | list[str] | None = "en",
        **kwargs: Any,
    ) -> BM25sRetriever:
        """Index LangChain Documents (id: ``doc.id``, else ``metadata["id"]``, else a content hash;
        title: ``metadata["title"]``). Documents without an id whose content repeats get ``-2``, ``-3``...
        suffixes; a repeated explicit id raises :class:`active_rag.CorpusError`."""
        passages = []
        hashed: dict[str, int] = {}
        for doc in documents:
            passage = document_to_passage(doc)
            if not doc.id and (doc.metadata or {}).get("id") is None:
                n = hashed.get(passage.id, 0) + 1
                hashed[passage.id] = n
                if n > 1:
                    passage = document_to_passage(doc, pid=f"{passage.id}-{n}")
            passages.append(passage)
        return cls(index=BM25Index.from_passages(passages, stemmer=stemmer, stopwords=stopwords), **kwargs)

    @classmethod
    def from_texts(cls, texts: Iterable[str], metadatas: Iterable[dict[str, Any]] | None = None, **kwargs: Any) -> BM25sRetriever:
        """Index plain texts (with optional per-text metadata)."""
        metas = list(metadatas) if metadatas is not None else None
        docs = [Document(page_content=t, metadata=metas[i] if metas else {}) for i, t in enumerate(texts)]
        return cls.from_documents(docs, **kwargs)

    # -- retrieval ------------------------------------------------------------------------------------
    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None, **kwargs: Any
    ) -> list[Document]:
        unknown = set(kwargs) - {"verbose"}
        if unknown:
            raise TypeError(f"BM25sRetriever got unexpected keyword argument(s) {sorted(unknown)}; it takes k=.")
        return [passage_to_document(p) for p in self.index.retrieve(query, self.k if k is None else k)]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, k: int | None = None, **kwargs: Any
    ) -> list[Document]:
        return await run_in_executor(
            None, self._get_relevant_documents, query, run_manager=run_manager.get_sync(), k=k, **kwargs
        )


__all__ = ["BM25sRetriever"]
