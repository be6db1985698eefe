"""Retrieval: the BM25 index over a local corpus (:mod:`active_rag.retrieval.bm25`), the chunker of folder
corpora (:mod:`~active_rag.retrieval.chunking`), the name index (:mod:`~active_rag.retrieval.name_index`),
merging and fetching rankings (:mod:`~active_rag.retrieval.rankings`) and MiniLM sentence embeddings
(:mod:`~active_rag.retrieval.embeddings`).

``from active_rag.retrieval import BM25Index, demo_corpus_path, read_jsonl_passages``: the index and the bundled
demo data of :mod:`active_rag.retrieval.bm25`, imported from here lazily, so importing a module of this package does
not import ``bm25s``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    'BM25Index': 'bm25',
    'demo_corpus_path': 'bm25',
    'demo_questions_path': 'bm25',
    'read_jsonl_passages': 'bm25',
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


if TYPE_CHECKING:  # pragma: no cover
    from .bm25 import BM25Index, demo_corpus_path, demo_questions_path, read_jsonl_passages
