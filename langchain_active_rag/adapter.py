"""``RetrieverAdapter``: a LangChain ``BaseRetriever`` seen by the engine as ``retrieve(query, k)``."""

from __future__ import annotations

import functools
import itertools
import sys
import threading
from collections.abc import Iterable
from typing import Any

from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig

from active_rag import Passage
from active_rag.retrieval.held_index import MAX_HELD_PASSAGES, attach_held, held_name_index, held_original
from active_rag.retrieval.name_index import NameIndex

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
        """Which held passages are about which name, for linked retrieval (:mod:`active_rag.answer.links`): one
        attached to the retriever (:func:`attach_name_index`) or the engine index's (``BM25sRetriever``), else one built
        once per retriever, the first time it is needed, from the Documents it holds (:func:`held_documents`), with the
        ids and titles this adapter gives them; ``None`` for one that lists none (said once, in one logged line)."""
        return held_name_index(self.retriever, lambda limit: _pairs(held_documents(self.retriever, limit)),
                               kind=type(self.retriever).__name__, attach=ATTACH_HINT)

    def document(self, passage_id: str) -> Document | None:
        """The original Document behind a passage id: the one this adapter returned under it, else the retriever's
        own that its name index was built from (a linked look reads those without asking the retriever)."""
        with self._lock:
            doc = self._docs.get(passage_id)
        return doc if doc is not None else held_original(self.retriever, passage_id)

    def documents(self, passages: list[Passage]) -> list[Document]:
        """The original Documents of ``passages``, in order (passages this adapter never returned are rebuilt)."""
        from ._convert import passage_to_document

        out: list[Document] = []
        for p in passages:
            doc = self.document(p.id)
            out.append(doc if doc is not None else passage_to_document(p))
        return out


#: The one line said when a retriever lists no documents: how to give it a name index.
ATTACH_HINT = "langchain_active_rag.attach_name_index(retriever, documents) with the Documents it searches"


def held_documents(retriever: BaseRetriever, limit: int = MAX_HELD_PASSAGES + 1) -> list[Document] | None:
    """The Documents a retriever searches, where it lists them (at most ``limit``): ``docs`` (langchain-community's
    BM25, TF-IDF and kNN retrievers), the ``store`` of an ``InMemoryVectorStore`` and a langchain-chroma ``Chroma``
    collection's documents (``vectorstore.get``, read once, ``limit`` at most) behind a ``VectorStoreRetriever``;
    ``None`` for a retriever that does not list them."""
    docs = getattr(retriever, "docs", None)
    if isinstance(docs, list) and all(isinstance(d, Document) for d in docs):
        return docs[:limit]
    store = getattr(retriever, "vectorstore", None)
    rows = getattr(store, "store", None)
    if isinstance(rows, dict):
        return [Document(id=key, page_content=row["text"], metadata=row.get("metadata") or {})
                for key, row in itertools.islice(rows.items(), limit)
                if isinstance(row, dict) and isinstance(row.get("text"), str)]
    chroma = sys.modules.get("langchain_chroma")  # a Chroma store means the module is loaded; never import it here
    if chroma is not None and isinstance(store, chroma.Chroma):
        got = store.get(include=["documents", "metadatas"], limit=limit)
        return [Document(id=i, page_content=text, metadata=meta or {})
                for i, text, meta in zip(got["ids"], got["documents"], got["metadatas"] or [None] * len(got["ids"]))
                if isinstance(text, str)]
    return None


def _pairs(docs: list[Document] | None) -> list[tuple[Passage, Document]] | None:
    return None if docs is None else [(document_to_passage(d), d) for d in docs]


def attach_name_index(retriever: BaseRetriever, documents: Iterable[Document | Passage] | NameIndex) -> NameIndex:
    """Give ``retriever`` the name index of the ``documents`` it searches (LangChain Documents, or engine passages),
    so that linked retrieval (``sr-rag-linked``, ``sr-rag-choose``) looks the names its passages mention up there
    instead of asking the retriever once per name. Needed only for a retriever whose documents the adapter cannot
    list (:func:`held_documents`); call it again after adding documents. Returns the index."""
    if isinstance(documents, NameIndex):
        return attach_held(retriever, [], documents)
    pairs = [(d, None) if isinstance(d, Passage) else (document_to_passage(d), d) for d in documents]
    return attach_held(retriever, pairs)


@functools.lru_cache(maxsize=256)
def _named_adapter(name: str) -> type[RetrieverAdapter]:
    return type(name, (RetrieverAdapter,), {"__module__": __name__, "__doc__": RetrieverAdapter.__doc__})


def adapt(retriever: BaseRetriever, config: RunnableConfig | None = None, *, pass_k: bool = True) -> RetrieverAdapter:
    """A :class:`RetrieverAdapter` whose class carries the retriever's class name, so the engine's
    messages (e.g. ``RetrieverError: The retriever MyRetriever failed on query ...``) name the user's retriever."""
    return _named_adapter(type(retriever).__name__)(retriever, config, pass_k=pass_k)


__all__ = ["RetrieverAdapter", "adapt", "attach_name_index", "document_id", "held_documents"]
