"""LangChain and LlamaIndex retrievers get the same links as the engine (:mod:`active_rag.retrieval.name_index`): the adapters
build the name index from the documents the retriever holds, even when they carry no ``title`` metadata."""

from __future__ import annotations

import warnings

import pytest

from active_rag import Passage
from active_rag.answer.links import follow_links
from active_rag.retrieval.bm25 import BM25Index

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

from langchain_core.documents import Document  # noqa: E402

QUESTION = "Which team owns the platform that Acme sells to banks?"
#: a company's files as a LangChain loader gives them: ``source`` metadata, no ``title``
ROWS = [
    ("products-1", "products.md", "# Products\nAcme sells Orion and Vega to banks."),
    ("orion-1", "orion.md", "Orion is our analytics platform, built in 2019."),
    ("orion-2", "orion.md", "It runs on Kubernetes. The Platform Team owns it."),
    ("vega-1", "vega.md", "Vega (billing) is the service that invoices customers."),
    ("teams-1", "teams.md", "The Platform Team builds tools. Despite its size, it is busy."),
]


def _documents() -> list[Document]:
    return [Document(id=i, page_content=text, metadata={"source": source}) for i, source, text in ROWS]


def _engine_links(read_id: str) -> tuple[list[str], dict[str, str]]:
    passages = [Passage(id=i, text=text, metadata={"source": source}) for i, source, text in ROWS]
    index = BM25Index.from_passages(passages)
    read = [p for p in passages if p.id == read_id]
    links = follow_links(index, read, QUESTION, 2, held={read_id})
    return links.names, links.articles


def _adapter_links(retriever: object, read_id: str) -> tuple[list[str], dict[str, str]]:
    read = [p for p in retriever.retrieve(QUESTION, 5) if p.id == read_id]  # type: ignore[attr-defined]
    assert read, "the read passage is one the retriever returns"
    links = follow_links(retriever, read, QUESTION, 2, held={read_id})
    return links.names, links.articles


def test_the_engine_links_a_users_files_by_their_text() -> None:
    names, articles = _engine_links("products-1")
    # Acme is the question's, Products the read passage's own; of Orion's two chunks the one that shares the
    # question's words ("platform", "team", "owns"), and Vega's own passage
    assert names == ["Orion", "Vega"] and articles == {"orion-2": "Orion", "vega-1": "Vega"}


def test_a_langchain_retriever_without_titles_gets_the_engines_links() -> None:
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.vectorstores import InMemoryVectorStore

    from langchain_active_rag import BM25sRetriever
    from langchain_active_rag.adapter import adapt

    expected = _engine_links("products-1")
    store = InMemoryVectorStore.from_documents(_documents(), DeterministicFakeEmbedding(size=16))
    vector = adapt(store.as_retriever(search_kwargs={"k": 5}))
    assert vector.name_index is not None
    assert _adapter_links(vector, "products-1") == expected
    bm25 = adapt(BM25sRetriever.from_documents(_documents(), k=5))
    assert _adapter_links(bm25, "products-1") == expected
    # the index is built once per retriever, not once per adapter (the chain makes one adapter a call)
    assert adapt(vector.retriever).name_index is vector.name_index


def test_a_langchain_retriever_that_lists_no_documents_is_asked_per_name() -> None:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.retrievers import BaseRetriever

    from langchain_active_rag.adapter import adapt

    class Remote(BaseRetriever):
        queries: list[str] = []

        def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                    k: int | None = None) -> list[Document]:
            self.queries.append(query)
            return [d for d in _documents() if query.split()[0] in d.page_content][: k or 3]

    remote = adapt(Remote())
    assert remote.name_index is None
    read = [p for p in remote.retrieve("Acme", 3) if p.id == "products-1"]
    with pytest.warns(UserWarning, match="no name index"):
        links = follow_links(remote, read, QUESTION, 2, held={"products-1"})
    assert links.articles == {"orion-1": "Orion", "vega-1": "Vega"}  # found by their text, one call per name
    assert remote.retriever.queries[1:] == ["Orion", "Vega"]  # type: ignore[attr-defined]


def test_a_llamaindex_retriever_gets_the_engines_links() -> None:
    from llama_index.core import VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.schema import TextNode
    from llama_index.retrievers.bm25 import BM25Retriever

    from llamaindex_active_rag.retriever import LlamaIndexRetrieverAdapter

    expected = _engine_links("products-1")
    nodes = [TextNode(id_=i, text=text, metadata={"file_path": source}) for i, source, text in ROWS]
    vector = VectorStoreIndex(nodes, embed_model=MockEmbedding(embed_dim=8)).as_retriever(similarity_top_k=5)
    assert _adapter_links(LlamaIndexRetrieverAdapter(vector), "products-1") == expected
    bm25 = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=5)
    assert _adapter_links(LlamaIndexRetrieverAdapter(bm25), "products-1") == expected
    # a factory k -> retriever (the README's LlamaIndex example): the nodes of the retriever it builds, indexed once
    built: list[int] = []

    def factory(k: int) -> BM25Retriever:
        built.append(k)
        return BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=k)

    adapter = LlamaIndexRetrieverAdapter(factory)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "asked once per name" warning
        assert _adapter_links(adapter, "products-1") == expected
    assert adapter.name_index is LlamaIndexRetrieverAdapter(factory).name_index and built.count(1) == 1
    engine = BM25Index.from_passages([Passage(id=i, text=t, metadata={"source": s}) for i, s, t in ROWS])
    assert LlamaIndexRetrieverAdapter(engine).name_index is engine.name_index
