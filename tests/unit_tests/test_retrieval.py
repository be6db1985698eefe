"""Tests of the default BM25 retriever (active_rag.retrieval) on tiny in-test corpora and the bundled demo corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from active_rag.errors import CorpusError
from active_rag.retrieval.bm25 import BM25Index, demo_corpus_path, demo_questions_path
from active_rag.types import Passage, Retriever

DOCS = [
    {"id": "paris", "title": "Paris", "text": "Paris is the capital and largest city of France.", "lang": "en"},
    {"id": "berlin", "title": "Berlin", "text": "Berlin is the capital of Germany and its largest city."},
    {"id": "hamlet", "title": "Hamlet", "text": "Hamlet is a tragedy written by William Shakespeare."},
    {"id": "python", "title": "Python", "text": "Python is a programming language created by Guido van Rossum."},
    {"id": "rome", "title": "Rome", "text": "Rome is the capital city of Italy."},
]


def write_jsonl(path: Path, rows: list[dict] | list[str]) -> Path:
    with open(path, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write((row if isinstance(row, str) else json.dumps(row)) + "\n")
    return path


@pytest.fixture()
def corpus_file(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "corpus.jsonl", DOCS)


@pytest.fixture()
def index(corpus_file: Path) -> BM25Index:
    return BM25Index.from_jsonl(corpus_file)


def test_from_jsonl_retrieves_best_first(index: BM25Index) -> None:
    assert isinstance(index, Retriever)
    assert len(index) == len(DOCS)
    hits = index.retrieve("Who wrote the tragedy Hamlet?", k=2)
    assert [p.id for p in hits] == ["hamlet"]  # no other passage shares a word with the query
    assert hits[0].title == "Hamlet"
    assert hits[0].text == DOCS[2]["text"]
    assert hits[0].score is not None and hits[0].score > 0
    hits = index.retrieve("capital city of Italy", k=2)
    assert hits[0].id == "rome" and hits[0].score >= hits[1].score  # type: ignore[operator]


def test_extra_keys_go_to_metadata(index: BM25Index) -> None:
    (hit,) = index.retrieve("capital of France", k=1)
    assert hit.id == "paris"
    assert hit.metadata == {"lang": "en"}


def test_stemming_matches_inflections(index: BM25Index) -> None:
    assert index.retrieve("programmed languages", k=1)[0].id == "python"


def test_blank_lines_are_skipped(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "c.jsonl", [json.dumps(DOCS[0]), "", "   ", json.dumps(DOCS[1])])
    assert len(BM25Index.from_jsonl(path)) == 2


@pytest.mark.parametrize(
    ("bad_line", "problem"),
    [
        ('{"id": "x", "title": "X", "text": ', "not valid JSON"),
        ('["x", "X", "text"]', "expected a JSON object"),
        ('{"id": "x", "title": "X"}', "missing key(s) 'text'"),
        ('{"id": "paris", "title": "P", "text": "duplicate"}', "duplicate id 'paris'"),
        ('{"id": "x", "title": "X", "text": "  "}', "non-empty string"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path: Path, bad_line: str, problem: str) -> None:
    path = write_jsonl(tmp_path / "broken_corpus.jsonl", [json.dumps(DOCS[0]), "", bad_line])
    with pytest.raises(CorpusError) as info:
        BM25Index.from_jsonl(path)
    message = str(info.value)
    assert "broken_corpus.jsonl" in message
    assert "line 3" in message
    assert problem in message


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(CorpusError, match="does not exist") as info:
        BM25Index.from_jsonl(missing)
    assert "nope.jsonl" in str(info.value)
    with pytest.raises(CorpusError, match="does not exist"):
        BM25Index.from_path(missing)


def test_corpus_error_is_a_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        BM25Index.from_jsonl(tmp_path / "nope.jsonl")


def test_empty_corpus(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match="no passages"):
        BM25Index.from_jsonl(write_jsonl(tmp_path / "empty.jsonl", [""]))
    with pytest.raises(CorpusError, match="empty"):
        BM25Index.from_passages([])


def test_from_directory(tmp_path: Path) -> None:
    (tmp_path / "notes" / "deep").mkdir(parents=True)
    notes = "# Shakespeare\nWilliam Shakespeare wrote Hamlet."
    (tmp_path / "notes" / "shakespeare.md").write_text(notes, encoding="utf-8")
    (tmp_path / "notes" / "deep" / "rome.txt").write_text("Rome is the capital of Italy.", encoding="utf-8")
    (tmp_path / "notes" / "ignored.csv").write_text("Hamlet,Shakespeare", encoding="utf-8")
    (tmp_path / "notes" / "empty.txt").write_text("  \n", encoding="utf-8")
    idx = BM25Index.from_directory(tmp_path / "notes")
    assert len(idx) == 2
    (hit,) = idx.retrieve("capital of Italy", k=1)
    assert hit.id == "deep/rome.txt"
    assert hit.title == "rome"
    assert hit.text == "Rome is the capital of Italy."
    assert BM25Index.from_path(tmp_path / "notes").retrieve("Hamlet", k=1)[0].id == "shakespeare.md"


def test_from_directory_without_text_files(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match="no non-empty .txt or .md files"):
        BM25Index.from_directory(tmp_path)
    with pytest.raises(CorpusError, match="does not exist"):
        BM25Index.from_directory(tmp_path / "missing")


def test_save_load_round_trip(index: BM25Index, tmp_path: Path) -> None:
    saved = tmp_path / "saved_index"
    index.save(saved)
    loaded = BM25Index.load(saved)
    assert len(loaded) == len(index)
    for query in ["capital city", "Who wrote Hamlet?", "Guido", "largest city of Germany", "zebra"]:
        assert loaded.retrieve(query, k=5) == index.retrieve(query, k=5)
        assert [p.score for p in loaded.retrieve(query, k=5)] == [p.score for p in index.retrieve(query, k=5)]
    assert loaded.retrieve("France", k=1)[0].metadata == {"lang": "en"}
    # from_path recognises a saved index directory.
    assert BM25Index.from_path(saved).retrieve("Hamlet", k=3) == index.retrieve("Hamlet", k=3)


def test_load_rejects_a_plain_directory(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match="not a saved BM25 index"):
        BM25Index.load(tmp_path)


def test_from_passages_without_stemming_or_stopwords() -> None:
    passages = [Passage(id=d["id"], title=d["title"], text=d["text"]) for d in DOCS]
    idx = BM25Index.from_passages(passages, stemmer=None, stopwords=None)
    assert idx.retrieve("Shakespeare", k=1)[0].id == "hamlet"
    with pytest.raises(CorpusError, match="Duplicate passage id"):
        BM25Index.from_passages(passages + passages[:1])
    with pytest.raises(CorpusError, match="empty text"):
        BM25Index.from_passages([*passages, Passage(id="blank", text=" ")])


def test_retrieval_is_deterministic(index: BM25Index) -> None:
    first = index.retrieve("capital city", k=5)
    assert all(index.retrieve("capital city", k=5) == first for _ in range(5))
    # Ties keep corpus order.
    tie = BM25Index.from_passages([Passage(id=i, text=t) for i, t in [("b", "same words"), ("a", "same words"),
                                                                     ("c", "other text")]])
    assert [p.id for p in tie.retrieve("same", k=3)] == ["b", "a"]
    # Passages with score 0 (no query word) are not returned: fewer than k, or none.
    assert index.retrieve("zebra", k=3) == []
    assert index.retrieve("the of and", k=5) == []
    assert all(p.score is not None and p.score > 0 for p in index.retrieve("capital Shakespeare", k=5))


def test_k_bounds(index: BM25Index) -> None:
    assert len(index.retrieve("capital", k=1)) == 1
    everything = index.retrieve("capital", k=100)  # k beyond the corpus: every passage that matches
    assert sorted(p.id for p in everything) == ["berlin", "paris", "rome"]
    with pytest.raises(ValueError, match="at least 1"):
        index.retrieve("capital", k=0)
    with pytest.raises(ValueError, match="at least 1"):
        index.retrieve("capital", k=-2)


@pytest.mark.parametrize("query", ["", "   \n"])
def test_empty_query(index: BM25Index, query: str) -> None:
    with pytest.raises(ValueError, match="query is empty"):
        index.retrieve(query, k=3)


def test_demo_corpus_retrieves_a_supporting_paragraph() -> None:
    idx = BM25Index.demo()
    assert idx is BM25Index.demo()  # built once per process
    assert len(idx) == 300
    questions = [json.loads(line) for line in demo_questions_path().read_text(encoding="utf-8").splitlines()]
    assert len(questions) == 30
    corpus_ids = {json.loads(line)["id"] for line in demo_corpus_path().read_text(encoding="utf-8").splitlines()}
    for q in questions:
        assert set(q["supporting_ids"]) <= corpus_ids
    q = next(q for q in questions if "Kasper Schmeichel" in q["question"])
    top3 = [p.id for p in idx.retrieve(q["question"], k=3)]
    assert set(top3) & set(q["supporting_ids"])
    # Every demo question finds at least one of its supporting paragraphs in the top 3.
    assert all(set(p.id for p in idx.retrieve(x["question"], k=3)) & set(x["supporting_ids"]) for x in questions)


def test_non_utf8_and_binary_corpus_lines_are_named(tmp_path: Path) -> None:
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"id": "a", "text": "ok"}\n{"id": "b", "text": "caf\xe9"}\n')
    with pytest.raises(CorpusError, match=r"latin.jsonl, line 2: not UTF-8 text \(byte 0xe9"):
        BM25Index.from_jsonl(latin)
    binary = tmp_path / "model.bin"
    binary.write_bytes(b"\x00\x01\x02GGUF\x00" * 10)
    with pytest.raises(CorpusError, match=r"model.bin, line 1: .*binary file"):
        BM25Index.from_path(binary)
    bom = write_jsonl(tmp_path / "bom.jsonl", [])
    bom.write_bytes("\ufeff".encode() + json.dumps(DOCS[0]).encode() + b"\n")
    assert len(BM25Index.from_jsonl(bom)) == 1  # a UTF-8 byte-order mark is not an error


def test_save_never_overwrites_or_writes_beside_other_files(index: BM25Index, tmp_path: Path) -> None:
    from active_rag.errors import IndexPathError

    out = tmp_path / "idx"
    index.save(out)
    small = BM25Index.from_passages([Passage(id="x", text="only one passage")])
    with pytest.raises(IndexPathError, match="already holds an index: pass --force"):
        small.save(out)
    assert len(BM25Index.load(out)) == len(DOCS)  # untouched
    small.save(out, overwrite=True)
    assert len(BM25Index.load(out)) == 1

    (out / "notes.txt").write_text("mine")
    with pytest.raises(IndexPathError, match="holds an index and other files"):
        index.save(out, overwrite=True)
    other = tmp_path / "other"
    other.mkdir()
    (other / "thesis.tex").write_text("mine")
    with pytest.raises(IndexPathError, match="not empty .*holds no index"):
        index.save(other, overwrite=True)
    assert sorted(f.name for f in other.iterdir()) == ["thesis.tex"]
    with pytest.raises(IndexPathError, match="is a file"):
        index.save(other / "thesis.tex")
    empty = tmp_path / "empty"
    empty.mkdir()
    index.save(empty)  # an empty folder is fine
    assert len(BM25Index.load(empty)) == len(DOCS)
