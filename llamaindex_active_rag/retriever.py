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
import itertools
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path, PurePath
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, QueryBundle, TextNode

from active_rag.retrieval.held_index import MAX_HELD_PASSAGES, attach_held, held_name_index, held_original
from active_rag.retrieval.name_index import NameIndex, name_index_of
from active_rag.types import Passage, Retriever

__all__ = [
    "LlamaIndexRetrieverAdapter",
    "attach_name_index",
    "demo_nodes",
    "node_from_passage",
    "node_title",
    "nodes_from_passages",
    "passage_from_node",
]

#: Node metadata key read as the passage title (and written by :func:`node_from_passage`).
TITLE_KEY = "title"

#: A callable that builds a LlamaIndex retriever returning ``k`` nodes per query.
RetrieverFactory = Callable[[int], BaseRetriever]


def _metadata_title(metadata: Mapping[str, Any]) -> str:
    """A node's title from its metadata: ``title``, else the file it was read from (``file_name``, else the last part
    of ``file_path``, as ``SimpleDirectoryReader`` writes them); ``""`` without any."""
    title = metadata.get(TITLE_KEY)
    if title is not None and str(title):
        return str(title)
    name, path = metadata.get("file_name"), metadata.get("file_path")
    if isinstance(name, str) and name.strip():
        return name
    return PurePath(path).name if isinstance(path, str) and path.strip() else ""


def node_title(node: BaseNode | NodeWithScore) -> str:
    """What to call a node when showing it: its ``title`` metadata, else its file's name (``file_name``, else the last
    part of ``file_path``), else its id: ``[node_title(n) for n in response.source_nodes]``."""
    inner = node.node if isinstance(node, NodeWithScore) else node
    return _metadata_title(inner.metadata or {}) or inner.node_id


def passage_from_node(node: NodeWithScore) -> Passage:
    """The engine's view of a retrieved node: its id, its text (no metadata), its title (``title`` metadata, else the
    name of the file it was read from: ``file_name``, else the last part of ``file_path``; ``""`` without them), its
    score, and its other metadata."""
    metadata = dict(node.node.metadata or {})
    title = _metadata_title(metadata)
    metadata.pop(TITLE_KEY, None)
    return Passage(
        id=node.node.node_id,
        text=node.node.get_content(metadata_mode=MetadataMode.NONE),
        title=title,
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

    def source_nodes(self, passages: Sequence[Passage]) -> list[NodeWithScore]:
        """The nodes of ``passages``, in that order: the node this adapter returned under each id, else the
        retriever's own node its name index was built from (a linked look reads those without asking the
        retriever), else one rebuilt from the passage (:func:`node_from_passage`); each with the passage's score
        where the node came without one."""
        out: list[NodeWithScore] = []
        for p in passages:
            found = self.nodes.get(p.id)
            if found is None:
                held = held_original(self.retriever, p.id)
                found = NodeWithScore(node=held, score=p.score) if held is not None else node_from_passage(p)
            out.append(found)
        return out

    @property
    def name_index(self) -> NameIndex | None:
        """Which held passages are about which name, for linked retrieval (:mod:`active_rag.answer.links`): one
        attached to the retriever (:func:`attach_name_index`) or an engine retriever's own, else one built once per
        retriever, the first time it is needed, from the nodes the LlamaIndex retriever holds (:func:`held_nodes`), as
        :func:`passage_from_node` sees them (a factory ``k -> retriever``: those of the retriever it builds, once);
        ``None`` for one that lists none (said once, in one logged line)."""
        if not self.is_llamaindex:
            return name_index_of(self.retriever)
        factory = self.retriever if self.is_factory else None

        def held(limit: int) -> list[tuple[Passage, BaseNode]] | None:
            retriever = factory(1) if factory is not None else self.retriever  # type: ignore[operator]
            nodes = held_nodes(retriever, limit)
            return None if nodes is None else [(passage_from_node(NodeWithScore(node=n)), n) for n in nodes]

        return held_name_index(self.retriever, held, kind=type(self.retriever).__name__, attach=ATTACH_HINT)

    def __repr__(self) -> str:
        return f"LlamaIndexRetrieverAdapter({type(self.retriever).__name__})"


#: The one line said when a retriever lists no nodes: how to give it a name index.
ATTACH_HINT = "llamaindex_active_rag.attach_name_index(retriever, nodes) with the nodes it searches"


def held_nodes(retriever: BaseRetriever, limit: int = MAX_HELD_PASSAGES + 1) -> list[BaseNode] | None:
    """The nodes a LlamaIndex retriever searches, where it lists them (at most ``limit``): a ``BM25Retriever``'s
    ``corpus`` (node metadata dicts), the docstore of a vector index retriever's index, or, where that index keeps
    its nodes in its vector store (``ChromaVectorStore``), the store's (``get_nodes``); ``None`` for a retriever
    that does not list them."""
    from llama_index.core.vector_stores.utils import metadata_dict_to_node

    corpus = getattr(retriever, "corpus", None)
    if isinstance(corpus, list) and corpus and all(isinstance(row, dict) and "_node_content" in row for row in corpus):
        return [metadata_dict_to_node(row) for row in corpus[:limit]]
    index = getattr(retriever, "_index", None)
    docs = getattr(getattr(index, "docstore", None), "docs", None)
    if isinstance(docs, dict) and docs:
        return [n for n in itertools.islice(docs.values(), limit) if isinstance(n, BaseNode)]
    store = getattr(index, "vector_store", None)
    if getattr(store, "stores_text", False) and callable(getattr(store, "get_nodes", None)):
        return _store_nodes(store, limit)
    return [] if isinstance(docs, dict) else None


def _store_nodes(store: Any, limit: int) -> list[BaseNode] | None:
    """The nodes of a vector store that keeps their text (at most ``limit``): a ``ChromaVectorStore``'s collection
    read once (``limit`` rows at most), any other store's ``get_nodes()``; ``None`` when it cannot list them."""
    from llama_index.core.vector_stores.utils import metadata_dict_to_node

    collection = getattr(store, "client", None)  # ChromaVectorStore.client: its Chroma collection
    if type(store).__name__ == "ChromaVectorStore" and callable(getattr(collection, "get", None)):
        got = collection.get(limit=limit, include=["documents", "metadatas"])
        nodes: list[BaseNode] = []
        for text, meta in zip(got["documents"], got["metadatas"]):
            node = metadata_dict_to_node(meta)
            node.set_content(text or "")
            nodes.append(node)
        return nodes
    try:
        listed = store.get_nodes()
    except NotImplementedError:
        return None
    return [n for n in listed[:limit] if isinstance(n, BaseNode)]


def attach_name_index(retriever: BaseRetriever | RetrieverFactory, nodes: Iterable[BaseNode | NodeWithScore | Passage] | NameIndex) -> NameIndex:
    """Give ``retriever`` (the one given to ``ActiveRAGQueryEngine``, or its factory) the name index of the ``nodes``
    it searches (LlamaIndex nodes, or engine passages), so that linked retrieval (``sr-rag-linked``,
    ``sr-rag-choose``) looks the names its passages mention up there instead of asking the retriever once per name.
    Needed only for a retriever whose nodes the adapter cannot list (:func:`held_nodes`); call it again after adding
    nodes. Returns the index."""
    if isinstance(nodes, NameIndex):
        return attach_held(retriever, [], nodes)
    pairs: list[tuple[Passage, Any]] = []
    for n in nodes:
        if isinstance(n, Passage):
            pairs.append((n, None))
        else:
            inner = n.node if isinstance(n, NodeWithScore) else n
            pairs.append((passage_from_node(NodeWithScore(node=inner)), inner))
    return attach_held(retriever, pairs)


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
