"""A LangChain app on the user's own store: the adapter builds the name index linked retrieval reads from the
documents a Chroma (or in-memory) store holds, once, so a question costs the retriever calls the method needs, not one
per name; a retriever that lists no documents is said once, with the call that attaches an index; ``documents`` are
the final prompt's. Chroma runs in process with a deterministic fake embedding (never its downloading default)."""

from __future__ import annotations

import logging
import uuid
import warnings
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.retrievers import BaseRetriever

import active_rag
from active_rag.answer.links import follow_links
from active_rag.retrieval import held_index
from langchain_active_rag import ActiveRAG, attach_name_index
from langchain_active_rag._convert import document_id
from langchain_active_rag.adapter import adapt

QUESTION = "Which team owns the platform that Acme sells to banks?"
#: a company's notes as a loader gives them: ``source`` metadata, no title; each names another's subject
ROWS = [
    ("acme", "acme.md", "Acme sells Orion and Vega to banks."),
    ("orion", "orion.md", "Orion is our analytics platform. The Platform Team owns it; Vega bills for it."),
    ("vega", "vega.md", "Vega is the billing service. It invoices banks for Orion."),
    ("team", "team.md", "The Platform Team builds Orion. Kepler leads it."),
    ("kepler", "kepler.md", "Kepler is the engineer who leads the Platform Team."),
]
LINKED = {"preset": "sr-rag-linked", "top_k": 2, "max_new_tokens": 4}


def _documents() -> list[Document]:
    return [Document(id=i, page_content=text, metadata={"source": source}) for i, source, text in ROWS]


@pytest.fixture
def chroma() -> Any:
    """A Chroma store over the rows, in process, embedded by a deterministic fake (no model download)."""
    pytest.importorskip("chromadb")
    from langchain_chroma import Chroma

    from active_rag.retrieval.embeddings import ephemeral_chroma_client

    store = Chroma(collection_name=f"store-{uuid.uuid4().hex[:8]}", embedding_function=DeterministicFakeEmbedding(size=16),
                   client=ephemeral_chroma_client())
    store.add_documents(_documents(), ids=[i for i, _, _ in ROWS])
    yield store
    store.delete_collection()


class Calls(BaseCallbackHandler):
    """Counts the retriever runs LangChain reports."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    def on_retriever_start(self, serialized: Any, query: str, **kwargs: Any) -> None:
        self.queries.append(query)


class Remote(BaseRetriever):
    """A retriever over a service that does not list its documents: the query's first word, found in the text."""

    queries: list[str] = []

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                k: int | None = None) -> list[Document]:
        self.queries.append(query)
        words = [w.strip("?,.").lower() for w in query.split()]
        return [d for d in _documents() if any(w in d.page_content.lower() for w in words[:1])][: k or 3]


def test_a_chroma_retriever_gets_its_name_index_from_the_store(chroma: Any) -> None:
    retriever = chroma.as_retriever(search_kwargs={"k": 5})
    adapter = adapt(retriever)
    index = adapter.name_index
    assert index is not None and sorted(p.id for p in index.passages) == sorted(i for i, _, _ in ROWS)
    assert [p.id for p in index.articles("Kepler")] == ["kepler"]
    assert adapt(retriever).name_index is index  # built once per retriever, not once per call's adapter
    calls = Calls()
    adapter = adapt(retriever, {"callbacks": [calls]})
    read = [p for p in adapter.retrieve(QUESTION, 5) if p.id == "acme"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "asked once per name" warning
        links = follow_links(adapter, read, QUESTION, 2, held={"acme"})
    assert links.names == ["Orion", "Vega"] and set(links.articles) == {"orion", "vega"}
    assert len(calls.queries) == 1  # the names came from the index: no retriever call per name


def test_a_question_on_chroma_costs_the_calls_the_method_needs(tiny_lm: Any, chroma: Any) -> None:
    rag = ActiveRAG(tiny_lm, chroma.as_retriever(), **LINKED)
    calls = Calls()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = rag.invoke(QUESTION, config={"callbacks": [calls]})
    look = out["trace"][-1]
    assert look["linked_names"]  # the first passages name other notes' subjects, and the look followed them
    assert len(calls.queries) == sum(r["retriever_calls"] for r in out["trace"]) <= 2
    assert calls.queries[0] == QUESTION
    # the documents the model read for its answer: the question's passages and the linked ones, as Chroma holds them
    assert [document_id(d) for d in out["documents"]] == look["held_ids"] and len(out["documents"]) > 2
    assert all(d.metadata["source"].endswith(".md") for d in out["documents"])


def test_the_store_is_read_once_and_a_large_one_is_left_alone(chroma: Any, monkeypatch: pytest.MonkeyPatch,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    reads: list[Any] = []
    get = chroma.get

    def counting_get(*args: Any, **kwargs: Any) -> Any:
        reads.append(kwargs.get("limit"))
        return get(*args, **kwargs)

    monkeypatch.setattr(chroma, "get", counting_get)
    retriever = chroma.as_retriever()
    for _ in range(3):
        assert adapt(retriever).name_index is not None
    assert reads == [held_index.MAX_HELD_PASSAGES + 1]  # one capped read
    monkeypatch.setattr(held_index, "MAX_HELD_PASSAGES", 4)
    large = chroma.as_retriever()
    with caplog.at_level(logging.WARNING, logger="active_rag.retrieval"):
        assert adapt(large).name_index is None and adapt(large).name_index is None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "holds over 4 documents" in lines[0] and "attach_name_index" in lines[0]
    assert reads[1:] == [5]  # not read again after it was found too large


def test_a_retriever_that_lists_nothing_is_said_once_and_attach_fixes_it(tiny_lm: Any,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    remote = Remote(queries=[])
    with caplog.at_level(logging.WARNING, logger="active_rag.retrieval"):
        assert adapt(remote).name_index is None and adapt(remote).name_index is None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith("Remote does not list the documents it searches")
    assert "langchain_active_rag.attach_name_index(retriever, documents)" in lines[0] and "\n" not in lines[0]

    documents = _documents()
    index = attach_name_index(remote, documents)
    assert adapt(remote).name_index is index
    read = [p for p in adapt(remote).retrieve("Acme", 3) if p.id == "acme"]
    remote.queries.clear()
    links = follow_links(adapt(remote), read, QUESTION, 2, held={"acme"})
    assert set(links.articles) == {"orion", "vega"} and remote.queries == []  # no call per name
    # a linked passage the retriever never returned is shown as the user's own Document
    out = ActiveRAG(tiny_lm, remote, **LINKED).invoke(QUESTION)
    linked = set(out["trace"][-1]["linked_articles"])
    assert linked and all(any(d is orig for orig in documents) for d in out["documents"] if d.id in linked)


def test_documents_are_the_final_prompts(tiny_lm: Any, lc_retriever: Any) -> None:
    """FL-RAG replaces its passages at each retrieval: the answer's last segment was written with the second
    retrieval's, and those are the output's documents, in the prompt's order (the stream's last chunk)."""
    rag = ActiveRAG(tiny_lm, lc_retriever, preset="fl-rag", max_new_tokens=20)
    out = rag.invoke(QUESTION)
    first, second = out["trace"]
    assert first["passage_ids"] != second["passage_ids"]
    assert [document_id(d) for d in out["documents"]] == second["held_ids"] == second["passage_ids"]
    engine = active_rag.ActiveRAG.from_preset("fl-rag", tiny_lm, adapt(lc_retriever), max_new_tokens=20)
    lc_retriever.queries.clear()
    assert [document_id(d) for d in out["documents"]] == engine.run(QUESTION).final_passage_ids
    lc_retriever.queries.clear()
    chunks = list(rag.stream(QUESTION))
    assert [c for c in chunks if "documents" in c] == [chunks[-1]]
    assert [document_id(d) for d in chunks[-1]["documents"]] == second["passage_ids"]
