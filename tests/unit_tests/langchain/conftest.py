"""Fixtures of the LangChain integration tests: LangChain retrievers over a small in-test corpus."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever

from langchain_active_rag import BM25sRetriever

TEXTS = [
    ("Kasper Schmeichel", "Kasper Schmeichel is a Danish professional footballer who plays as a goalkeeper."),
    ("Kasper Schmeichel", "He is the son of former Manchester United goalkeeper Peter Schmeichel."),
    ("Peter Schmeichel", "Peter Schmeichel was voted the IFFHS World's Best Goalkeeper in 1992 and 1993."),
    ("Scott Derrickson", "Scott Derrickson is an American director."),
    ("Ed Wood", "Ed Wood was an American filmmaker."),
]


class RecordingRetriever(BaseRetriever):
    """A LangChain retriever that returns the same Document objects every time and records its calls."""

    documents: list[Document]
    queries: list[str] = []
    ks: list[Any] = []

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        self.queries.append(query)
        self.ks.append(k)
        # rotate so successive retrievals return different documents
        n = len(self.queries) - 1
        docs = self.documents[n % len(self.documents) :] + self.documents[: n % len(self.documents)]
        return docs[: k or 3]


class FailingRetriever(BaseRetriever):
    """A retriever whose index is broken."""

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        raise ConnectionError("index server unreachable")


def make_documents() -> list[Document]:
    docs = []
    for i, (title, text) in enumerate(TEXTS):
        # half with Document.id, half with metadata["id"], one with neither (content hash)
        if i % 3 == 0:
            docs.append(Document(page_content=text, id=f"doc-{i}", metadata={"title": title}))
        elif i % 3 == 1:
            docs.append(Document(page_content=text, metadata={"title": title, "id": f"meta-{i}"}))
        else:
            docs.append(Document(page_content=text, metadata={"title": title}))
    return docs


@pytest.fixture
def lc_documents() -> list[Document]:
    return make_documents()


@pytest.fixture
def lc_retriever(lc_documents: list[Document]) -> RecordingRetriever:
    return RecordingRetriever(documents=lc_documents, queries=[], ks=[])


@pytest.fixture
def failing_retriever() -> FailingRetriever:
    return FailingRetriever()


@pytest.fixture(scope="session")
def bm25_retriever() -> BM25sRetriever:
    return BM25sRetriever.from_documents(make_documents(), k=3)
