"""Retrieval glue: LlamaIndex nodes <-> ``active_rag.Passage``.

:class:`LlamaIndexRetrieverAdapter` lets the engine (which calls ``retrieve(query, k) -> list[Passage]``)
use any LlamaIndex :class:`~llama_index.core.base.base_retriever.BaseRetriever`. Every call goes
through the retriever's own ``retrieve`` (so LlamaIndex instrumentation records a retrieval span with
its start/end events), and the adapter remembers the :class:`NodeWithScore` behind every passage id, so
the query engine can hand back the original nodes as ``Response.source_nodes``.

The retriever given is never changed (it may be shared by other engines and threads). When the engine asks for
more nodes than its ``similarity_top_k`` (``top_k`` above it, or a look that skips the passages the prompt holds
and asks for the next ones), a shallow copy with ``similarity_top_k=k`` answers: it shares the index, so the
engine gets the top ``k`` nodes it asked for. A factory ``k -> BaseRetriever`` may be passed instead, called once
per ``k``, e.g. ``lambda k: BM25Retriever.from_defaults(index=index, similarity_top_k=k)``.

The adapter also accepts a plain engine retriever (``active_rag.BM25Index``, any object with
``retrieve(query, k)``); its passages are then turned into :class:`TextNode` s.
"""

from __future__ import annotations

import copy
import threading
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode

from active_rag.retrieval.name_index import NameIndex, name_index_for, name_index_of
from active_rag.types import Passage, Retriever

__all__ = [
    "LlamaIndexRetrieverAdapter",
    "demo_nodes",
    "node_from_passage",
    "nodes_from_passages",
    "passage_from_node",
]

#: Node metadata key read as the passage title (and written by :func:`node_from_passage`).
TITLE_KEY = "title"

#: A callable that builds a LlamaIndex retriever returning ``k`` nodes per query.
RetrieverFactory = Callable[[int], BaseRetriever]


def passage_from_node(node: NodeWithScore) -> Passage:
    """The engine's view of a retrieved node: its id, its text (no metadata), ``title`` metadata, score."""
    metadata = dict(node.node.metadata or {})
    title = metadata.pop(TITLE_KEY, "")
    return Passage(
        id=node.node.node_id,
        text=node.node.get_content(metadata_mode=MetadataMode.NONE),
        title="" if title is None else str(title),
        score=node.score,
        metadata=metadata,
    )


def node_from_passage(passage: Passage) -> NodeWithScore:
    """A :class:`TextNode` whose id is the passage id (title kept in ``metadata["title"]``), with its score."""
    metadata: dict[str, Any] = dict(passage.metadata)
    if passage.title:
        metadata[TITLE_KEY] = passage.title
    return NodeWithScore(node=TextNode(id_=passage.id, text=passage.text, metadata=metadata), score=passage.score)


def nodes_from_passages(passages: Iterable[Passage]) -> list[TextNode]:
    """Index-ready :class:`TextNode` s (``id_`` = passage id, ``metadata={"title": ...}``) for LlamaIndex."""
    return [node_from_passage(p).node for p in passages]  # type: ignore[misc]


def demo_nodes(path: str | Path | None = None) -> list[TextNode]:
    """The bundled demo corpus (300 HotpotQA paragraphs, ``active_rag.retrieval.demo_corpus_path()``) as nodes."""
    from active_rag.retrieval.bm25 import demo_corpus_path, read_jsonl_passages

    return nodes_from_passages(read_jsonl_passages(path or demo_corpus_path()))


class LlamaIndexRetrieverAdapter:
    """An engine retriever (``retrieve(query, k) -> list[Passage]``) over a LlamaIndex retriever.

    ``retriever`` is one of:

    - a LlamaIndex ``BaseRetriever``, never changed; its result is cut to ``k`` nodes. When ``k`` is above its
      ``similarity_top_k``, a shallow copy with ``similarity_top_k=k`` answers (built once per ``k``); one without
      a settable ``similarity_top_k`` gives what it gives (:meth:`check_top_k` warns when that is below
      ``top_k``);
    - a factory ``k -> BaseRetriever``, called once per distinct ``k`` (thread-safe; the retriever is
      kept for later calls);
    - an engine retriever (``retrieve(query, k) -> list[Passage]``).

    Every node returned is remembered by id in :attr:`nodes` (first retrieval wins), which the query
    engine uses to map the engine's passage ids back to the original nodes. Create one adapter per
    question (see :meth:`fresh`) so that :attr:`nodes` holds that question's nodes only.
    """

    def __init__(self, retriever: BaseRetriever | RetrieverFactory | Retriever, *, _built: dict[int, BaseRetriever] | None = None) -> None:
        if isinstance(retriever, LlamaIndexRetrieverAdapter):
            retriever = retriever.retriever
        is_engine = not isinstance(retriever, BaseRetriever) and callable(getattr(retriever, "retrieve", None))
        if not isinstance(retriever, BaseRetriever) and not is_engine and not callable(retriever):
            raise TypeError(
                "Expected a LlamaIndex BaseRetriever, a factory k -> BaseRetriever, or an object with "
                f"retrieve(query, k) -> list[Passage], got {type(retriever).__name__}."
            )
        self.retriever = retriever
        self.nodes: dict[str, NodeWithScore] = {}
        # retrievers built by the factory, by k; shared by every fresh() adapter of this one
        self._built: dict[int, BaseRetriever] = {} if _built is None else _built
        self._lock = threading.Lock()

    def fresh(self) -> LlamaIndexRetrieverAdapter:
        """A new adapter over the same retriever (and factory-built retrievers), with no remembered nodes."""
        fresh = LlamaIndexRetrieverAdapter(self.retriever, _built=self._built)
        fresh._lock = self._lock
        return fresh

    @property
    def is_llamaindex(self) -> bool:
        """A LlamaIndex retriever or factory (not an engine retriever)."""
        return self.is_factory or isinstance(self.retriever, BaseRetriever)

    @property
    def is_factory(self) -> bool:
        r = self.retriever
        return not isinstance(r, BaseRetriever) and not callable(getattr(r, "retrieve", None)) and callable(r)

    def llamaindex_retriever(self, k: int) -> BaseRetriever:
        """The LlamaIndex retriever used for ``k`` nodes: the one given (a copy with ``similarity_top_k=k`` when
        ``k`` is above its own), or the factory's for ``k``."""
        if not self.is_factory:
            top = getattr(self.retriever, "similarity_top_k", None)
            if not isinstance(top, int) or top >= k:
                return self.retriever  # type: ignore[return-value]
        with self._lock:
            built = self._built.get(k)
            if built is None:
                built = self.retriever(k) if self.is_factory else _with_top_k(self.retriever, k)  # type: ignore[operator,arg-type]
                if not isinstance(built, BaseRetriever):
                    raise TypeError(f"The retriever factory returned {type(built).__name__} for k={k}; it must return a LlamaIndex BaseRetriever.")
                self._built[k] = built
        return built

    def check_top_k(self, k: int) -> None:
        """Warn when the retriever returns fewer than ``k`` nodes per query (``similarity_top_k``) and no copy of
        it can be asked for ``k``."""
        top = getattr(self.retriever, "similarity_top_k", None) if isinstance(self.retriever, BaseRetriever) else None
        if not isinstance(top, int) or top >= k:
            return
        if self.llamaindex_retriever(k) is self.retriever:
            warnings.warn(
                f"{type(self.retriever).__name__} returns {top} nodes per query (similarity_top_k={top}) but the engine asks "
                f"for top_k={k}, and a copy of it cannot be set to {k}: each retrieval gets {top} passages. Build the "
                f"retriever with similarity_top_k={k}, or pass a factory (lambda k: ...similarity_top_k=k).",
                stacklevel=3,
            )

    def retrieve_nodes(self, query: str, k: int) -> list[NodeWithScore]:
        """The best ``k`` nodes for ``query`` (best first), through the wrapped retriever."""
        if not self.is_llamaindex:
            passages = self.retriever.retrieve(query, k)  # type: ignore[union-attr]
            if not isinstance(passages, list) or not all(isinstance(p, Passage) for p in passages):
                return passages  # the engine reports the wrong type with its own clear error
            nodes = [node_from_passage(p) for p in passages]
        else:
            nodes = self.llamaindex_retriever(k).retrieve(QueryBundle(query_str=query))
        nodes = list(nodes)[:k]
        for n in nodes:
            self.nodes.setdefault(n.node.node_id, n)
        return nodes

    def retrieve(self, query: str, k: int) -> list[Passage]:
        """The engine's retriever protocol: the best ``k`` passages for ``query``."""
        nodes = self.retrieve_nodes(query, k)
        if not self.is_llamaindex and not (isinstance(nodes, list) and all(isinstance(n, NodeWithScore) for n in nodes)):
            return nodes  # type: ignore[return-value]  # a malformed engine retriever: the engine reports it
        return [passage_from_node(n) for n in nodes]

    def source_nodes(self, passage_ids: Sequence[str]) -> list[NodeWithScore]:
        """The remembered nodes for ``passage_ids``, in that order (ids never retrieved are skipped)."""
        return [self.nodes[i] for i in passage_ids if i in self.nodes]

    @property
    def name_index(self) -> NameIndex | None:
        """Which held passages are about which name, for linked retrieval (:mod:`active_rag.methods.linked`): an engine
        retriever's own, else one built once from the nodes the LlamaIndex retriever holds (a ``BM25Retriever``'s
        corpus, a vector index retriever's docstore), as :func:`passage_from_node` sees them (a factory ``k ->
        retriever``: those of the retriever it builds, once); ``None`` for one that lists none."""
        if not self.is_llamaindex:
            return name_index_of(self.retriever)
        factory = self.retriever if self.is_factory else None

        def held() -> list[Passage]:
            retriever = factory(1) if factory is not None else self.retriever  # type: ignore[operator]
            return [passage_from_node(NodeWithScore(node=n)) for n in _held_nodes(retriever)]

        return name_index_for(self.retriever, held)

    def __repr__(self) -> str:
        return f"LlamaIndexRetrieverAdapter({type(self.retriever).__name__})"


def _held_nodes(retriever: BaseRetriever) -> list[Any]:
    """The nodes a LlamaIndex retriever searches, where it lists them: a ``BM25Retriever``'s ``corpus`` (node
    metadata dicts) or the docstore of a vector index retriever's index."""
    from llama_index.core.schema import BaseNode
    from llama_index.core.vector_stores.utils import metadata_dict_to_node

    corpus = getattr(retriever, "corpus", None)
    if isinstance(corpus, list) and corpus and all(isinstance(row, dict) and "_node_content" in row for row in corpus):
        return [metadata_dict_to_node(row) for row in corpus]
    docs = getattr(getattr(getattr(retriever, "_index", None), "docstore", None), "docs", None)
    if isinstance(docs, dict):
        return [n for n in docs.values() if isinstance(n, BaseNode)]
    return []


def _with_top_k(retriever: BaseRetriever, k: int) -> BaseRetriever:
    """A shallow copy of ``retriever`` (sharing its index, docstore and callbacks) that returns ``k`` nodes (a BM25
    retriever: at most its corpus size, which bm25s requires, as ``BM25Retriever`` itself caps it); ``retriever``
    itself when its ``similarity_top_k`` cannot be set."""
    clone = copy.copy(retriever)
    scores = getattr(getattr(retriever, "bm25", None), "scores", None)
    size = scores.get("num_docs") if isinstance(scores, dict) else None
    try:
        clone.similarity_top_k = min(k, int(size)) if isinstance(size, int | float) else k  # type: ignore[attr-defined]
    except (AttributeError, TypeError, ValueError):  # a read-only setting: the retriever as it was built
        return retriever
    return clone
