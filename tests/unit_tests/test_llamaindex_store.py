"""A LlamaIndex app on the user's own store: the adapter builds the name index linked retrieval reads from the nodes a
``VectorStoreIndex`` (its docstore, or a Chroma store's collection) holds, once, so a question costs the retriever
calls the method needs; ``source_nodes`` are the final prompt's nodes, in its order, the linked ones included; nodes
read from files are called by their file names. A ``MockEmbedding`` stands in for an embedding model."""

from __future__ import annotations

import logging
import uuid
import warnings
from typing import Any

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core import StorageContext, VectorStoreIndex  # noqa: E402
from llama_index.core.base.base_retriever import BaseRetriever  # noqa: E402
from llama_index.core.embeddings import MockEmbedding  # noqa: E402
from llama_index.core.instrumentation import get_dispatcher  # noqa: E402
from llama_index.core.instrumentation.event_handlers import BaseEventHandler  # noqa: E402
from llama_index.core.instrumentation.events.retrieval import RetrievalStartEvent  # noqa: E402
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode  # noqa: E402

from active_rag import ActiveLM  # noqa: E402
from active_rag.retrieval import held_index  # noqa: E402
from llamaindex_active_rag import (  # noqa: E402
    ActiveRAGQueryEngine,
    LlamaIndexRetrieverAdapter,
    attach_name_index,
    node_title,
    passage_from_node,
)

QUESTION = "Which team owns the platform that Acme sells to banks?"
#: a company's notes as SimpleDirectoryReader reads them: file_name / file_path metadata, no title
ROWS = [
    ("acme", "acme.md", "Acme sells Orion and Vega to banks."),
    ("orion", "orion.md", "Orion is our analytics platform. The Platform Team owns it; Vega bills for it."),
    ("vega", "vega.md", "Vega is the billing service. It invoices banks for Orion."),
    ("team", "team.md", "The Platform Team builds Orion. Kepler leads it."),
    ("kepler", "kepler.md", "Kepler is the engineer who leads the Platform Team."),
]
LINKED = {"preset": "sr-rag-linked", "top_k": 2, "max_new_tokens": 4}


def _nodes() -> list[TextNode]:
    return [TextNode(id_=i, text=text, metadata={"file_name": name, "file_path": f"/home/me/notes/{name}"})
            for i, name, text in ROWS]


class Retrievals(BaseEventHandler):
    """Counts the retriever calls LlamaIndex instrumentation reports."""

    queries: list[str] = []

    @classmethod
    def class_name(cls) -> str:
        return "Retrievals"

    def handle(self, event: Any, **kwargs: Any) -> None:
        if isinstance(event, RetrievalStartEvent):
            self.queries.append(str(event.str_or_query_bundle))


@pytest.fixture
def retrievals() -> Any:
    handler = Retrievals(queries=[])
    root = get_dispatcher()
    root.add_event_handler(handler)
    yield handler
    root.event_handlers.remove(handler)


class Remote(BaseRetriever):
    """A retriever over a service that does not list its nodes: nodes whose text holds the query's first word."""

    def __init__(self) -> None:
        super().__init__()
        self.queries: list[str] = []

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self.queries.append(query_bundle.query_str)
        word = query_bundle.query_str.split()[0].strip("?,.").lower()
        return [NodeWithScore(node=n, score=1.0) for n in _nodes() if word in n.text.lower()][:3]


def _check_linked_answer(response: Any, retrievals: Retrievals) -> None:
    """The look followed names from the index (no call per name) and ``source_nodes`` are the final prompt's."""
    look = response.metadata["retrievals"][-1]
    assert look["linked_names"]  # the first passages name other notes' subjects, and the look followed them
    calls = sum(r["retriever_calls"] for r in response.metadata["retrievals"])
    assert len(retrievals.queries) == calls <= 2 and retrievals.queries[0] == QUESTION
    ids = [n.node.node_id for n in response.source_nodes]
    assert ids == look["held_ids"] and len(ids) > 2  # the question's passages and the linked ones
    assert all(isinstance(n, NodeWithScore) for n in response.source_nodes)
    texts = {i: text for i, _, text in ROWS}
    # the store's nodes as they are (not rebuilt from the engine's passages, which would add a "title")
    assert all(n.node.get_content() == texts[n.node.node_id] and "title" not in n.node.metadata for n in response.source_nodes)
    assert all(node_title(n).endswith(".md") for n in response.source_nodes)


def test_a_vector_store_index_links_from_its_docstore(tiny_lm: ActiveLM, retrievals: Retrievals) -> None:
    index = VectorStoreIndex(_nodes(), embed_model=MockEmbedding(embed_dim=8))
    engine = ActiveRAGQueryEngine(tiny_lm, index.as_retriever(similarity_top_k=2), **LINKED)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "asked once per name" warning
        response = engine.query(QUESTION)
    _check_linked_answer(response, retrievals)
    # the trace names each passage by its file, not its id
    assert all(t.endswith(".md") for r in response.metadata["retrievals"] for t in r["titles"])


def test_a_chroma_vector_store_links_from_its_collection(tiny_lm: ActiveLM, retrievals: Retrievals) -> None:
    pytest.importorskip("chromadb")
    from llama_index.vector_stores.chroma import ChromaVectorStore

    from active_rag.retrieval.embeddings import ephemeral_chroma_client

    client = ephemeral_chroma_client()
    name = f"store-{uuid.uuid4().hex[:8]}"
    store = ChromaVectorStore(chroma_collection=client.create_collection(name))
    index = VectorStoreIndex(_nodes(), storage_context=StorageContext.from_defaults(vector_store=store),
                             embed_model=MockEmbedding(embed_dim=8))
    try:
        retriever = index.as_retriever(similarity_top_k=2)
        held = LlamaIndexRetrieverAdapter(retriever).name_index
        assert held is not None and [p.id for p in held.articles("Kepler")] == ["kepler"]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            response = ActiveRAGQueryEngine(tiny_lm, retriever, **LINKED).query(QUESTION)
        _check_linked_answer(response, retrievals)
    finally:
        client.delete_collection(name)


def test_nodes_read_from_files_are_called_by_their_file_names() -> None:
    by_name, by_path, bare = (TextNode(id_="n1", text="x", metadata={"file_name": "orion.md", "file_path": "/a/b.md"}),
                              TextNode(id_="n2", text="x", metadata={"file_path": "/home/me/notes/vega.md"}),
                              TextNode(id_="n3", text="x"))
    assert [passage_from_node(NodeWithScore(node=n)).title for n in (by_name, by_path, bare)] == ["orion.md", "vega.md", ""]
    assert [node_title(n) for n in (by_name, by_path, bare)] == ["orion.md", "vega.md", "n3"]
    titled = TextNode(id_="n4", text="x", metadata={"title": "Orion", "file_name": "orion.md"})
    passage = passage_from_node(NodeWithScore(node=titled))
    assert passage.title == node_title(titled) == "Orion" and passage.metadata == {"file_name": "orion.md"}


def test_a_retriever_that_lists_nothing_is_said_once_and_attach_fixes_it(tiny_lm: ActiveLM,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    remote = Remote()
    with caplog.at_level(logging.WARNING, logger="active_rag.retrieval"):
        assert LlamaIndexRetrieverAdapter(remote).name_index is None
        assert LlamaIndexRetrieverAdapter(remote).name_index is None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith("Remote does not list the documents it searches")
    assert "llamaindex_active_rag.attach_name_index(retriever, nodes)" in lines[0]

    nodes = _nodes()
    index = attach_name_index(remote, nodes)
    assert LlamaIndexRetrieverAdapter(remote).name_index is index
    response = ActiveRAGQueryEngine(tiny_lm, remote, **LINKED).query("Acme")
    look = response.metadata["retrievals"][-1]
    assert look["linked_names"] and remote.queries[0] == "Acme"
    assert len(remote.queries) == sum(r["retriever_calls"] for r in response.metadata["retrievals"]) <= 2
    # the linked nodes the retriever never returned are the user's own node objects
    assert [n.node.node_id for n in response.source_nodes] == look["held_ids"]
    assert all(any(n.node is orig for orig in nodes) for n in response.source_nodes if n.node.node_id in look["linked_articles"])


def test_a_large_store_is_left_alone(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(held_index, "MAX_HELD_PASSAGES", 4)
    retriever = VectorStoreIndex(_nodes(), embed_model=MockEmbedding(embed_dim=8)).as_retriever()
    with caplog.at_level(logging.WARNING, logger="active_rag.retrieval"):
        assert LlamaIndexRetrieverAdapter(retriever).name_index is None
        assert LlamaIndexRetrieverAdapter(retriever).name_index is None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "holds over 4 documents" in lines[0]


def test_the_workflow_reads_names_from_the_index_too(tiny_lm: ActiveLM) -> None:
    import asyncio

    from llamaindex_active_rag import ActiveRAGWorkflow, RetrievedEvent

    index = VectorStoreIndex(_nodes(), embed_model=MockEmbedding(embed_dim=8))
    engine = ActiveRAGQueryEngine(tiny_lm, index.as_retriever(similarity_top_k=2), **LINKED)

    async def go() -> tuple[Any, list[Any]]:
        handler = ActiveRAGWorkflow(engine).run(question=QUESTION)
        events = [ev async for ev in handler.stream_events()]
        return await handler, events

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "asked once per name" warning
        response, events = asyncio.run(go())
    look = response.metadata["retrievals"][-1]
    assert look["linked_names"]
    retrieved = [e for e in events if isinstance(e, RetrievedEvent)]
    assert len(retrieved) == sum(r["retriever_calls"] for r in response.metadata["retrievals"]) <= 2
    assert [n.node.node_id for n in response.source_nodes] == look["held_ids"]
