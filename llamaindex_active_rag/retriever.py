"""Retrieval glue: LlamaIndex nodes <-> ``active_rag.Passage``.

:class:`LlamaIndexRetrieverAdapter` lets the engine (which calls ``retrieve(query, k) -> list[Passage]``)
use any LlamaIndex :class:`~llama_index.core.base.base_retriever.BaseRetriever`. Every call goes
through the retriever's own ``retrieve`` (so LlamaIndex instrumentation records a retrieval span with
its start/end events), and the adapter remembers the :class:`NodeWithScore` behind every passage id, so
the query engine can hand back the original nodes as ``Response.source_nodes``.

The adapter also accepts a plain engine retriever (``active_rag.BM25Index``, any object with
``retrieve(query, k)``); its passages are then turned into :class:`TextNode` s.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode

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

# Setting ``similarity_top_k`` on a shared retriever and calling it must not interleave across threads.
_TOP_K_LOCK = threading.RLock()


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
    from active_rag.retrieval import demo_corpus_path, read_jsonl_passages

    return nodes_from_passages(read_jsonl_passages(path or demo_corpus_path()))


def _max_k(retriever: Any) -> int | None:
    """The corpus size where the retriever cannot return more (bm25s refuses k > number of documents)."""
    bm25 = getattr(retriever, "bm25", None)
    scores = getattr(bm25, "scores", None)
    if isinstance(scores, dict) and scores.get("num_docs"):
        return int(scores["num_docs"])
    return None


class LlamaIndexRetrieverAdapter:
    """An engine retriever (``retrieve(query, k) -> list[Passage]``) over a LlamaIndex retriever.

    ``k`` is applied by setting the retriever's ``similarity_top_k`` for the call when it has one
    (BM25Retriever, VectorIndexRetriever), then slicing the result to ``k`` in any case. Every node
    returned is remembered by id in :attr:`nodes` (first retrieval wins), which the query engine uses
    to map the engine's passage ids back to the original nodes. Create one adapter per question (see
    :meth:`fresh`) so that :attr:`nodes` holds that question's nodes only.
    """

    def __init__(self, retriever: BaseRetriever | Retriever) -> None:
        if isinstance(retriever, LlamaIndexRetrieverAdapter):
            retriever = retriever.retriever
        if not isinstance(retriever, BaseRetriever) and not callable(getattr(retriever, "retrieve", None)):
            raise TypeError(
                f"Expected a LlamaIndex BaseRetriever or an object with retrieve(query, k) -> list[Passage], "
                f"got {type(retriever).__name__}."
            )
        self.retriever = retriever
        self.nodes: dict[str, NodeWithScore] = {}

    def fresh(self) -> LlamaIndexRetrieverAdapter:
        """A new adapter over the same retriever, with no remembered nodes (one per question)."""
        return LlamaIndexRetrieverAdapter(self.retriever)

    @property
    def is_llamaindex(self) -> bool:
        return isinstance(self.retriever, BaseRetriever)

    def retrieve_nodes(self, query: str, k: int) -> list[NodeWithScore]:
        """The best ``k`` nodes for ``query`` (best first), through the wrapped retriever."""
        if not self.is_llamaindex:
            passages = self.retriever.retrieve(query, k)  # type: ignore[union-attr]
            if not isinstance(passages, list) or not all(isinstance(p, Passage) for p in passages):
                return passages  # the engine reports the wrong type with its own clear error
            nodes = [node_from_passage(p) for p in passages]
        else:
            retriever = self.retriever
            if hasattr(retriever, "similarity_top_k"):
                limit = _max_k(retriever)
                with _TOP_K_LOCK:
                    previous = retriever.similarity_top_k  # type: ignore[union-attr]
                    retriever.similarity_top_k = k if limit is None else min(k, limit)  # type: ignore[union-attr]
                    try:
                        nodes = retriever.retrieve(QueryBundle(query_str=query))
                    finally:
                        retriever.similarity_top_k = previous  # type: ignore[union-attr]
            else:
                nodes = retriever.retrieve(QueryBundle(query_str=query))
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

    def __repr__(self) -> str:
        return f"LlamaIndexRetrieverAdapter({type(self.retriever).__name__})"
