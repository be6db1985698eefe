"""A saved BM25 index is checked against the checksums its manifest records: a changed, shuffled, truncated or
missing file is refused in one line naming the file and the fix, never read into other retrievals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from active_rag.cli.commands import main
from active_rag.errors import CorpusError
from active_rag.retrieval.bm25 import BM25Index
from active_rag.types import Passage

DOCS = [
    Passage(id="hamlet", title="Hamlet", text="Hamlet is a tragedy written by William Shakespeare around 1600."),
    Passage(id="rome", title="Rome", text="Rome is the capital city of Italy, on the river Tiber."),
    Passage(id="paris", title="Paris", text="Paris is the capital of France and its largest city."),
    Passage(id="tiber", title="Tiber", text="The Tiber is the third-longest river in Italy."),
    Passage(id="macbeth", title="Macbeth", text="Macbeth is a tragedy by Shakespeare about a Scottish general."),
]
MANIFEST = "active_rag_index.json"


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    out = tmp_path / "idx"
    BM25Index.from_passages(DOCS).save(out)
    return out


def _one_line_error(path: Path) -> str:
    with pytest.raises(CorpusError) as info:
        BM25Index.load(path)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_the_manifest_records_every_file_with_its_sha256(saved: Path) -> None:
    files = json.loads((saved / MANIFEST).read_text())["files"]
    assert set(files) == {f.name for f in saved.iterdir() if f.name != MANIFEST}
    assert "data.csc.index.npy" in files and "passages.jsonl" in files
    assert all(len(v["sha256"]) == 64 and v["bytes"] == (saved / name).stat().st_size for name, v in files.items())


def test_changed_bytes_in_the_bm25_matrix_are_refused(saved: Path) -> None:
    data = saved / "data.csc.index.npy"
    raw = bytearray(data.read_bytes())
    raw[-4:] = b"\x00\x00\x80\x7f"  # the last score becomes +inf: np.load still reads the file
    data.write_bytes(bytes(raw))
    message = _one_line_error(saved)
    assert "data.csc.index.npy" in message and "does not match the sha256" in message and "active-rag index" in message


def test_shuffled_passages_are_refused(saved: Path) -> None:
    passages = saved / "passages.jsonl"
    lines = passages.read_text().splitlines(keepends=True)
    passages.write_text("".join(reversed(lines)))  # same size, same ids: only the order changed
    message = _one_line_error(saved)
    assert "passages.jsonl" in message and "rebuild" in message


def test_a_zero_byte_file_is_one_line_not_a_traceback(saved: Path) -> None:
    (saved / "data.csc.index.npy").write_bytes(b"")
    message = _one_line_error(saved)
    assert "data.csc.index.npy" in message and "0 bytes" in message


def test_a_missing_file_is_named(saved: Path) -> None:
    (saved / "indices.csc.index.npy").unlink()
    message = _one_line_error(saved)
    assert "lacks indices.csc.index.npy" in message and "active-rag index" in message


def test_an_index_saved_without_checksums_still_loads_unchecked(saved: Path) -> None:
    manifest = json.loads((saved / MANIFEST).read_text())
    del manifest["files"], manifest["skipped"]  # as written before checksums were
    (saved / MANIFEST).write_text(json.dumps(manifest))
    index = BM25Index.load(saved)
    assert [p.id for p in index.retrieve("capital of Italy", k=1)] == ["rome"] and index.skipped == []
    (saved / "data.csc.index.npy").write_bytes(b"")  # unchecked, but a damaged file is still one line
    message = _one_line_error(saved)
    assert "EOFError" in message and "active-rag index" in message


def test_cli_refuses_a_damaged_index_with_exit_2_in_one_line(saved: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(saved, copy)
    (copy / "data.csc.index.npy").write_bytes(b"")
    assert main(["index", str(copy), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "data.csc.index.npy" in err
    assert main(["index", str(saved), str(tmp_path / "out2")]) == 0  # the intact one reads


def test_cli_ask_refuses_a_damaged_index_before_the_model(saved: Path, tiny_dir: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    passages = saved / "passages.jsonl"
    passages.write_text("".join(reversed(passages.read_text().splitlines(keepends=True))))
    assert main(["ask", "Who wrote Hamlet?", "--corpus", str(saved), "--model", str(tiny_dir)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "passages.jsonl" in err and "does not match" in err


def test_a_changed_names_file_is_built_again_from_the_passages(saved: Path) -> None:
    names = saved / "names.json"
    original = json.loads(names.read_text())
    tampered = {**original, "names": {k: v for k, v in original["names"].items() if k != "hamlet"}}
    assert tampered != original
    names.write_text(json.dumps(tampered))  # valid, of the current version, but not what was saved
    assert BM25Index.load(saved).name_index.to_json() == original
