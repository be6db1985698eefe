"""Folder corpora cut into passages (active_rag.retrieval.chunking): bounded chunks that break between paragraphs, else
sentences, overlap by whole sentences, and say which file and which chunk they are; the CLI's --chunk-tokens and
--chunk-overlap flags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import active_rag
from active_rag import BM25Index, Passage, chunk_passages, chunk_text
from active_rag.retrieval.chunking import count_tokens
from active_rag.cli.commands import main
from active_rag.errors import InvalidOptionError

SENTENCES = [f"Rule {i} of the handbook says that request number {i} goes to desk {i}." for i in range(40)]


def _handbook(sections: int = 40) -> str:
    """A Markdown handbook: a heading and a two-sentence paragraph per section."""
    return "\n\n".join(f"## Section {i}\n\nVacation rule {i}: ask desk {i} early. Policy {i} covers the "
                       f"team of building {i}." for i in range(sections))


def test_chunks_are_bounded_slices_that_cover_the_text() -> None:
    text = "\n\n".join(" ".join(SENTENCES[i:i + 5]) for i in range(0, 40, 5))  # 8 paragraphs of 5 sentences
    chunks = chunk_text(text, chunk_tokens=60, overlap=20)
    assert len(chunks) > 1
    assert all(count_tokens(c) <= 60 for c in chunks)
    assert all(c in text for c in chunks)  # slices of the document: spacing and line breaks as they were
    for sentence in SENTENCES:
        assert any(sentence in c for c in chunks), sentence  # nothing lost, no sentence cut


def test_a_paragraph_that_does_not_fit_a_half_full_chunk_starts_the_next() -> None:
    first = " ".join(SENTENCES[:3])  # 3 x 16 tokens
    second = " ".join(SENTENCES[3:6])
    assert chunk_text(f"{first}\n\n{second}", chunk_tokens=60, overlap=0) == [first, second]


def test_consecutive_chunks_share_whole_sentences() -> None:
    text = " ".join(SENTENCES[:12])
    chunks = chunk_text(text, chunk_tokens=50, overlap=20)
    assert len(chunks) >= 3
    for before, after in zip(chunks, chunks[1:], strict=False):
        last = next(s for s in reversed(SENTENCES) if before.endswith(s))
        assert after.startswith(last)  # the last sentence of a chunk opens the next one
    assert chunk_text(text, chunk_tokens=50, overlap=0)[1].startswith(SENTENCES[3])  # no overlap asked: none


def test_a_sentence_longer_than_a_chunk_is_cut_between_words() -> None:
    words = [f"word{i}" for i in range(100)]
    chunks = chunk_text(" ".join(words), chunk_tokens=30, overlap=0)
    assert [len(c.split()) for c in chunks] == [30, 30, 30, 10]
    assert " ".join(chunks).split() == words


def test_a_heading_goes_with_the_paragraph_after_it() -> None:
    chunks = chunk_text(_handbook(4), chunk_tokens=30, overlap=0)
    assert len(chunks) == 4 and all(c.startswith(f"## Section {i}\n\n") for i, c in enumerate(chunks))


def test_a_custom_token_counter_bounds_the_chunks() -> None:
    chars = len  # e.g. a tokenizer's count; here characters
    chunks = chunk_text(" ".join(SENTENCES[:10]), chunk_tokens=200, overlap=0, counter=chars)
    assert len(chunks) > 1 and all(len(c) <= 200 for c in chunks)


@pytest.mark.parametrize("size, overlap, needle", [(-1, 0, "chunk_tokens must be at least 0"),
                                                   (50, 50, "overlap must be smaller than chunk_tokens"),
                                                   (50, -2, "overlap must be at least 0")])
def test_bad_sizes_are_one_line_errors(size: int, overlap: int, needle: str) -> None:
    with pytest.raises(InvalidOptionError, match=needle):
        chunk_text("text", chunk_tokens=size, overlap=overlap)


def test_passages_say_which_file_and_which_chunk() -> None:
    doc = Passage(id="guide/handbook.md", title="handbook", text=_handbook(), metadata={"path": "/x/handbook.md"})
    small = Passage(id="notes.txt", title="notes", text="One short note.")
    out = chunk_passages([doc, small], chunk_tokens=40, overlap=10)
    chunks = [p for p in out if p.metadata.get("source") == "guide/handbook.md"]
    n = len(chunks)
    assert n > 5 and out[-1] == small  # a document that fits in one chunk stays as it is
    for k, p in enumerate(chunks, 1):
        assert p.id == f"guide/handbook.md#{k}" and p.title == f"handbook ({k}/{n})"
        assert p.metadata == {"path": "/x/handbook.md", "source": "guide/handbook.md", "chunk": k, "chunks": n}
    assert chunk_passages([doc], chunk_tokens=0, overlap=0) == [doc]


def test_chunking_is_public() -> None:
    assert {"chunk_text", "chunk_passages"} <= set(active_rag.__all__)


def _folder(root: Path) -> Path:
    folder = root / "docs"
    folder.mkdir()
    (folder / "handbook.md").write_text(_handbook(), encoding="utf-8")
    (folder / "notes.txt").write_text("The cafeteria opens at noon.", encoding="utf-8")
    return folder


def test_a_folder_corpus_is_cut_into_passages(tmp_path: Path) -> None:
    index = BM25Index.from_directory(_folder(tmp_path))
    assert len(index) > 2
    (hit,) = index.retrieve("building 37 team policy", k=1)
    assert hit.id.startswith("handbook.md#") and "building 37" in hit.text
    assert hit.metadata["source"] == "handbook.md" and hit.metadata["path"].endswith("handbook.md")
    assert len(BM25Index.from_path(tmp_path / "docs", chunk_tokens=0)) == 2  # one passage a file


def test_cli_index_cuts_a_folder_with_the_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path)
    assert main(["index", str(folder), str(tmp_path / "idx")]) == 0
    default = int(capsys.readouterr().out.split()[1])
    assert main(["index", str(folder), str(tmp_path / "idx2"), "--chunk-tokens", "300", "--chunk-overlap", "0"]) == 0
    fewer = int(capsys.readouterr().out.split()[1])
    assert main(["index", str(folder), str(tmp_path / "idx3"), "--chunk-tokens", "0"]) == 0
    assert capsys.readouterr().out.startswith("Indexed 2 passages")
    assert default > fewer > 2
    saved = [json.loads(line)["id"] for line in (tmp_path / "idx" / "passages.jsonl").read_text().splitlines()]
    assert "handbook.md#1" in saved and "notes.txt" in saved


@pytest.mark.parametrize("flags, needle", [
    (["--chunk-tokens", "40", "--chunk-overlap", "40"], "--chunk-overlap must be smaller than --chunk-tokens"),
    (["--chunk-tokens", "-3"], "--chunk-tokens must be at least 0"),
])
def test_cli_bad_chunk_flags_exit_2_in_one_line(flags: list[str], needle: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["index", str(_folder(tmp_path)), str(tmp_path / "idx"), *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err
    assert not (tmp_path / "idx").exists()


def test_cli_chunk_flags_on_a_corpus_that_is_not_a_folder_exit_2(corpus: Path, tiny_dir: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ask", "Who?", "--corpus", str(corpus), "--chunk-tokens", "64", "--model", str(tiny_dir)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a JSONL corpus's lines are its passages" in err and "Drop --chunk-tokens" in err


def test_cli_ask_on_a_folder_cites_chunks(tmp_path: Path, tiny_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["ask", "Which desk handles vacation rule 12?", "--corpus", str(_folder(tmp_path)), "--model",
                 str(tiny_dir), "--method", "sr-rag", "--top-k", "2", "--max-new-tokens", "4", "--json"])
    assert code == 0
    passages = json.loads(capsys.readouterr().out)["passages"]
    assert passages and all(p["id"].startswith("handbook.md#") for p in passages)
    assert any("rule 12:" in p["text"] for p in passages)
