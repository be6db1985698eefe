"""Fixtures of the LangGraph tests: the tiny random model without a prefix cache (prompt-token counts compare runs
exactly) and a BM25 LangChain retriever over a small in-test corpus that records its queries."""

from __future__ import annotations

import pytest

pytest.importorskip("langgraph")

from langchain_core.documents import Document  # noqa: E402

from active_rag import ActiveLM  # noqa: E402
from langchain_active_rag import BM25sRetriever  # noqa: E402

TEXTS = [
    ("Kasper Schmeichel", "Kasper Schmeichel is a Danish professional footballer who plays as a goalkeeper."),
    ("Kasper Schmeichel", "He is the son of former Manchester United goalkeeper Peter Schmeichel."),
    ("Peter Schmeichel", "Peter Schmeichel was voted the IFFHS World's Best Goalkeeper in 1992 and 1993."),
    ("Scott Derrickson", "Scott Derrickson is an American director."),
    ("Ed Wood", "Ed Wood was an American filmmaker."),
]


class RecordingBM25(BM25sRetriever):
    """BM25 that records the queries it is called with."""

    queries: list[str] = []

    def _get_relevant_documents(self, query, *, run_manager, k=None, **kwargs):  # type: ignore[no-untyped-def]
        self.queries.append(query)
        return super()._get_relevant_documents(query, run_manager=run_manager, k=k, **kwargs)


@pytest.fixture(scope="module")
def graph_lm(tiny_model, tiny_tokenizer) -> ActiveLM:
    return ActiveLM(tiny_model, tiny_tokenizer, name="tiny-llama", prefix_cache=False)


@pytest.fixture
def bm25() -> RecordingBM25:
    docs = [Document(page_content=text, id=f"doc-{i}", metadata={"title": title}) for i, (title, text) in enumerate(TEXTS)]
    retriever = BM25sRetriever.from_documents(docs, k=3)
    return RecordingBM25(index=retriever.index, k=3, queries=[])


@pytest.fixture(autouse=True)
def _no_live_run_outlives_its_test():  # type: ignore[no-untyped-def]
    """Each test's abandoned runs (an interrupt never answered) are closed and their threads joined when it ends, so
    that no engine thread of this folder is alive in another test (tests/unit_tests/test_batching.py counts them)."""
    yield
    from langchain_active_rag.live_run import _close_everything

    _close_everything()
