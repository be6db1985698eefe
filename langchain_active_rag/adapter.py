"""``RetrieverAdapter``: a LangChain ``BaseRetriever`` seen by the engine as ``retrieve(query, k)``."""

from __future__ import annotations

import functools
import threading
from typing import Any

from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig

from active_rag import Passage
from active_rag.retrieval.name_index import NameIndex, name_index_for

from ._convert import document_id, document_to_passage


class RetrieverAdapter:
    """Implements the engine's ``Retriever`` protocol over any LangChain retriever, for one call.

    Every ``retrieve(query, k)`` goes through ``retriever.invoke(query, config=config, k=k)``, so the
    retriever run is traced as a child of the run whose child ``config`` is given. ``k`` is passed as a
    keyword (retrievers that take no extra arguments ignore it; set ``pass_k=False`` for retrievers that
    reject it) and the result is cut to ``k``. Every Document returned is remembered under its passage
    id (``doc.id``, else ``metadata["id"]``, else a content hash), so :meth:`documents` maps the engine's
    passages back to the original Document objects (the first one returned under each id).
    """

    def __init__(self, retriever: BaseRetriever, config: RunnableConfig | None = None, *, pass_k: bool = True) -> None:
        self.retriever = retriever
        self.config = config
        self.pass_k = pass_k
        self._docs: dict[str, Document] = {}
        self._lock = threading.Lock()

    def retrieve(self, query: str, k: int) -> list[Passage]:
        kwargs: dict[str, Any] = {"k": k} if self.pass_k else {}
        docs = self.retriever.invoke(query, config=self.config, **kwargs)
        if not isinstance(docs, list):
            raise TypeError(f"{type(self.retriever).__name__}.invoke returned {type(docs).__name__}, not a list of Documents.")
        passages: list[Passage] = []
        seen: set[str] = set()
        for doc in docs:
            passage = document_to_passage(doc)
            if passage.id in seen:  # the same Document twice in one ranking
                continue
            seen.add(passage.id)
            with self._lock:  # the first Document returned under an id stands for it (stream and output agree)
                self._docs.setdefault(passage.id, doc)
            passages.append(passage)
            if len(passages) >= k:
                break
        return passages

    @property
    def name_index(self) -> NameIndex | None:
        """Which held passages are about which name, for linked retrieval (:mod:`active_rag.methods.linked`): the engine
        index's (``BM25sRetriever``), else one built once from the Documents the retriever holds (``docs``, an
        ``InMemoryVectorStore``'s), with the ids and titles this adapter gives them; ``None`` for one that lists
        none."""
        return name_index_for(self.retriever, lambda: [document_to_passage(d) for d in _held_documents(self.retriever)])

    def document(self, passage_id: str) -> Document | None:
        """The original Document behind a passage id, if this adapter returned it."""
        with self._lock:
            return self._docs.get(passage_id)

    def documents(self, passages: list[Passage]) -> list[Document]:
        """The original Documents of ``passages``, in order (passages this adapter never returned are rebuilt)."""
        from ._convert import passage_to_document

        out: list[Document] = []
        for p in passages:
            doc = self.document(p.id)
            out.append(doc if doc is not None else passage_to_document(p))
        return out


def _held_documents(retriever: BaseRetriever) -> list[Document]:
    """The Documents a retriever searches, where it lists them: ``docs`` (langchain-community's BM25, TF-IDF and
    kNN retrievers) or the ``store`` of an ``InMemoryVectorStore``."""
    docs = getattr(retriever, "docs", None)
    if isinstance(docs, list) and all(isinstance(d, Document) for d in docs):
        return docs
    store = getattr(getattr(retriever, "vectorstore", None), "store", None)
    if isinstance(store, dict):
        return [Document(id=key, page_content=row["text"], metadata=row.get("metadata") or {})
                for key, row in store.items() if isinstance(row, dict) and isinstance(row.get("text"), str)]
    return []


@functools.lru_cache(maxsize=256)
def _named_adapter(name: str) -> type[RetrieverAdapter]:
    return type(name, (RetrieverAdapter,), {"__module__": __name__, "__doc__": RetrieverAdapter.__doc__})


def adapt(retriever: BaseRetriever, config: RunnableConfig | None = None, *, pass_k: bool = True) -> RetrieverAdapter:
    """A :class:`RetrieverAdapter` whose class carries the retriever's class name, so the engine's
    messages (e.g. ``RetrieverError: The retriever MyRetriever failed on query ...``) name the user's retriever."""
    return _named_adapter(type(retriever).__name__)(retriever, config, pass_k=pass_k)


__all__ = ["RetrieverAdapter", "adapt", "document_id"]
