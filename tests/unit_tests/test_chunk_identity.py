"""Every chunk of a folder document after its first starts with a line naming the document (its file name and its
header's Name/Title), in the passage text that BM25, an embedding model and the reader see, and that the trace
records; ``metadata["prefix"]`` says which line it is."""

from __future__ import annotations

from pathlib import Path

import pytest

from active_rag import ActiveRAG
from active_rag.retrieval.bm25 import BM25Index
from active_rag.retrieval.chunking import chunk_passages
from active_rag.types import Passage

FILLER = ("Installation works with any recent interpreter. The documentation explains every option in detail. "
          "Contributions are welcome through the issue tracker and pull requests. ")


def _page(name: str, summary: str, licence: str) -> str:
    """A package page whose licence line is far from its header, as in a long README."""
    return (f"# {name} 1.0\n\nName: {name}\nSummary: {summary}\n\n" + FILLER * 4 + "\n\n## Legal\n\n"
            f"Released under the {licence} licence.\n\n" + FILLER * 4)


def _docs() -> list[Passage]:
    pages = [("tenacity", "Retry code until it succeeds", "Apache"), ("orjson", "Fast JSON library", "MIT"),
             ("regex", "Alternative regular expression module", "CNRI")]
    return [Passage(id=f"{n}.md", title=n, text=_page(n, s, lic)) for n, s, lic in pages]


def test_chunks_after_the_first_start_with_the_identity_line() -> None:
    (doc,) = _docs()[:1]
    plain = chunk_passages([doc], chunk_tokens=64, overlap=0)
    named = chunk_passages([doc], chunk_tokens=64, overlap=0, identity=lambda p: f"{p.id} — Name: tenacity")
    assert len(named) == len(plain) > 2 and named[0] == plain[0]
    for before, after in zip(plain[1:], named[1:]):
        assert after.text == f"tenacity.md — Name: tenacity\n{before.text}"
        assert after.metadata["prefix"] == "tenacity.md — Name: tenacity"
        assert after.text[len(after.metadata["prefix"]) + 1:] == before.text  # the cut from the file, unchanged


def test_a_folder_chunk_names_its_file_and_header(tmp_path: Path) -> None:
    for doc in _docs():
        (tmp_path / doc.id).write_text(doc.text, encoding="utf-8")
    (tmp_path / "guide.md").write_text("# Setting up the build server\n\n" + FILLER * 8, encoding="utf-8")
    index = BM25Index.from_directory(tmp_path, chunk_tokens=64, chunk_overlap=0)
    later = [p for p in index.passages if p.metadata.get("chunk", 1) > 1]
    assert later and all(p.text.startswith(p.metadata["prefix"] + "\n") for p in later)
    assert {p.metadata["prefix"] for p in later if p.metadata["source"] == "tenacity.md"} == {"tenacity.md — Name: tenacity"}
    assert {p.metadata["prefix"] for p in later if p.metadata["source"] == "guide.md"} == {
        "guide.md — Setting up the build server"}


def test_a_text_only_retriever_finds_the_licence_chunk_of_the_named_package() -> None:
    """A store that keeps only the passage text (a LangChain Document, a vector store) is given the text alone:
    without the identity line the licence chunk of tenacity shares no word with the question but 'licence'."""
    chunks = chunk_passages(_docs(), chunk_tokens=64, overlap=0, identity=lambda p: f"{p.id} — Name: {p.title}")
    text_only = BM25Index.from_passages([Passage(id=p.id, text=p.text, metadata=p.metadata) for p in chunks])
    (hit,) = text_only.retrieve("Which licence is the tenacity package released under?", k=1)
    assert hit.metadata["source"] == "tenacity.md" and "Apache licence" in hit.text


def test_the_trace_records_the_identity_line_the_model_read(tmp_path: Path, tiny_lm) -> None:  # type: ignore[no-untyped-def]
    for doc in _docs():
        (tmp_path / doc.id).write_text(doc.text, encoding="utf-8")
    index = BM25Index.from_directory(tmp_path, chunk_tokens=64, chunk_overlap=0)
    rag = ActiveRAG.from_preset("sr-rag", tiny_lm, index, max_new_tokens=2, top_k=2)
    result = rag.run("Which licence is the tenacity package released under?")
    seen = [p for r in result.retrievals for p in r.passages]
    assert any(p.metadata.get("source") == "tenacity.md" and "Apache" in p.text for p in seen)
    for p in seen:
        if p.metadata.get("prefix"):
            assert p.text.startswith(p.metadata["prefix"] + "\n")
    texts = [p["text"] for p in result.to_dict()["passages"]]  # the JSON trace: the texts the prompt held
    assert any(t.startswith("tenacity.md — Name: tenacity\n") for t in texts)


@pytest.mark.parametrize("text, expected", [
    ("# tenacity 9.2.1\n\nName: tenacity  \nVersion: 9.2.1  \nSummary: Retry code\n\nTenacity is ...",
     ("tenacity 9.2.1", {"Name": "tenacity", "Version": "9.2.1", "Summary": "Retry code"})),
    ("Name: plain\nAuthor: Someone\n\nBody", ("", {"Name": "plain", "Author": "Someone"})),
    ("Just prose: with a colon in its first line.", ("", {})),
])
def test_document_header(text: str, expected: tuple[str, dict[str, str]]) -> None:
    from active_rag.retrieval.chunking import document_header

    assert document_header(text) == expected
