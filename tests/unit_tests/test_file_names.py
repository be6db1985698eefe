"""Traces and sources name files, not ids (issue 66 item 3): a LangChain Document from a loader (``metadata["source"]``)
and a LlamaIndex node from ``SimpleDirectoryReader`` (``file_name``, ``file_path``) without a title are shown by their
file's name, in the trace's ``titles``, the answer's documents and ``source_nodes``; the README's LlamaIndex example
runs on such nodes (no ``KeyError: 'title'``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from active_rag import ActiveLM

QUESTION = "Which port does the cache server listen on?"
FILES = {
    "cache.md": "The cache server listens on port 6380. It keeps keys for an hour.",
    "ops/deploy.md": "Deploy with the release script. It restarts the cache server.",
    "search.txt": "The search service reads from the cache server.",
}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "my_docs"
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text + "\n")
    return root


# -- LangChain ----------------------------------------------------------------------------------------------------


def test_a_passage_without_a_title_is_shown_by_its_file() -> None:
    from active_rag import Passage

    def shown(title: str = "", **metadata: object) -> str:
        return Passage(id="3f2a-uuid", text="text", title=title, metadata=dict(metadata)).shown_title

    assert shown(source="/home/me/my_docs/ops/deploy.md") == "deploy.md"  # a LangChain loader's Document
    assert shown("Cache server", source="/home/me/my_docs/cache.md") == "Cache server"  # a title wins
    assert shown(file_path="/x/y/notes.txt") == "notes.txt"
    assert shown(file_name="a.md", file_path="/x/b.md") == "a.md"  # SimpleDirectoryReader's
    assert shown(path="C:\\docs\\guide.rst") == "guide.rst"
    assert shown(source="") == "" and shown() == ""  # nothing to name it by: the id names it


def test_a_langchain_document_keeps_its_title_for_the_methods() -> None:
    """Only what is shown changes: the passage's title, which the name index reads, stays the Document's own."""
    pytest.importorskip("langchain_core")
    from langchain_core.documents import Document

    from langchain_active_rag._convert import document_to_passage

    passage = document_to_passage(Document(page_content="text", metadata={"source": "/a/cache.md"}))
    assert (passage.title, passage.shown_title) == ("", "cache.md")


def test_the_langchain_trace_and_documents_name_files(tiny_lm: ActiveLM, folder: Path) -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.documents import Document
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.vectorstores import InMemoryVectorStore

    from langchain_active_rag import ActiveRAG

    docs = [Document(page_content=f.read_text(), metadata={"source": str(f)}) for f in sorted(folder.rglob("*.*"))]
    store = InMemoryVectorStore.from_documents(docs, DeterministicFakeEmbedding(size=16))
    rag = ActiveRAG(model=tiny_lm, retriever=store.as_retriever(), preset="sr-rag", top_k=2, max_new_tokens=4)
    out = rag.invoke(QUESTION)
    names = {Path(n).name for n in FILES}
    titles = [t for r in out["trace"] for t in r["titles"]]
    assert titles and set(titles) <= names, titles
    # the documents are the retriever's own, as it returned them: named by their loader's source
    assert out["documents"] and {Path(d.metadata["source"]).name for d in out["documents"]} <= names


# -- LlamaIndex ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("preset", ["sr-rag", "sr-rag-choose", "look-again-choose"])
def test_simple_directory_reader_nodes_answer_and_name_their_files(tiny_lm: ActiveLM, folder: Path,
                                                                   preset: str) -> None:
    pytest.importorskip("llama_index.retrievers.bm25")
    from llama_index.core import SimpleDirectoryReader
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.retrievers.bm25 import BM25Retriever

    from llamaindex_active_rag import ActiveRAGQueryEngine, node_title

    documents = SimpleDirectoryReader(str(folder), recursive=True).load_data()
    nodes = SentenceSplitter(chunk_size=256, chunk_overlap=32).get_nodes_from_documents(documents)
    assert all("title" not in n.metadata for n in nodes)  # what the KeyError: 'title' came from
    engine = ActiveRAGQueryEngine(tiny_lm, lambda k: BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=k),
                                  preset=preset, top_k=2, max_new_tokens=4)
    response = engine.query(QUESTION)
    names = {Path(n).name for n in FILES}
    assert response.source_nodes and {node_title(n) for n in response.source_nodes} <= names
    titles = [t for r in response.metadata["retrievals"] for t in r["titles"]]
    assert titles and set(titles) <= names, titles
