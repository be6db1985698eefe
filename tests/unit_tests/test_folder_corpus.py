"""A folder corpus is read whatever a user's folder holds: UTF-16/32 text with or without a BOM is decoded, ``.rst``
and suffix-less text files are read, and every file that is not read (binary, unreadable, another suffix, hidden)
is counted and named in one warning, in ``index.skipped`` and in ``active-rag index --json``; nothing is a
traceback."""

from __future__ import annotations

import io
import json
import os
import warnings
from pathlib import Path

import pytest

from active_rag.cli.commands import main
from active_rag.retrieval.bm25 import BM25Index

TEXT = "Kasper Schmeichel is a Danish goalkeeper; his father Peter was voted the world's best goalkeeper in 1992."


def _build(folder: Path) -> tuple[BM25Index, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        index = BM25Index.from_directory(folder)
    return index, [str(w.message) for w in caught]


@pytest.mark.parametrize("encoding, bom", [
    ("utf-16-le", b""), ("utf-16-be", b""), ("utf-16-le", b"\xff\xfe"), ("utf-16-be", b"\xfe\xff"),
    ("utf-32-le", b""), ("utf-32-be", b""), ("utf-32-le", b"\xff\xfe\x00\x00"),
])
def test_utf16_and_utf32_text_is_decoded_with_or_without_bom(tmp_path: Path, encoding: str, bom: bytes) -> None:
    (tmp_path / "keeper.txt").write_bytes(bom + TEXT.encode(encoding))
    (tmp_path / "other.md").write_text("Rome is the capital of Italy.", encoding="utf-8")
    index, _ = _build(tmp_path)
    (hit,) = index.retrieve("Schmeichel goalkeeper", k=1)
    assert hit.text == TEXT and "\x00" not in hit.text
    assert hit.metadata["encoding"].startswith(encoding[:6]) and index.skipped == []


def test_sniffing_tells_text_from_binary() -> None:
    from active_rag.retrieval.folder import sniff_encoding

    assert sniff_encoding(TEXT.encode("utf-8")) == "utf-8"
    assert sniff_encoding(TEXT.encode("utf-16-le")) == "utf-16-le"
    assert sniff_encoding(bytes(range(256)) * 8) is None  # NUL bytes in no text pattern
    assert sniff_encoding(b"\x01\x00\x02\x00\x03\x00\x04\x00" * 64) is None  # the pattern, but control characters


def test_binary_files_are_skipped_and_counted(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text(TEXT, encoding="utf-8")
    (tmp_path / "dump.txt").write_bytes(b"header\x00\x00\x00\x07data\x00more text\x00\x01\x02")  # valid UTF-8, NULs
    (tmp_path / "blob").write_bytes(bytes(range(256)) * 4)
    index, messages = _build(tmp_path)
    assert [p.id for p in index.passages] == ["notes.txt"]
    assert {s.path: s.reason for s in index.skipped} == {
        "blob": "binary (NUL bytes, not UTF-16/32 text)", "dump.txt": "binary (NUL bytes, not UTF-16/32 text)"}
    (message,) = messages
    assert "\n" not in message and "skipped 2 file(s)" in message and "dump.txt (binary" in message


def test_rst_and_suffixless_text_are_read_other_files_counted(tmp_path: Path) -> None:
    (tmp_path / "guide.rst").write_text("Installing\n==========\n\nRun pip install tenacity to install it.",
                                        encoding="utf-8")
    (tmp_path / "README").write_text("The project answers questions about goalkeepers.", encoding="utf-8")
    (tmp_path / "setup.py").write_text("print('not a document')", encoding="utf-8")
    (tmp_path / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (tmp_path / ".hidden.md").write_text("a hidden note")
    (tmp_path / "empty.md").write_text("  \n")
    index, messages = _build(tmp_path)
    assert sorted(p.id for p in index.passages) == ["README", "guide.rst"]
    assert index.retrieve("pip install", k=1)[0].id == "guide.rst"
    skipped = {s.path: s.reason for s in index.skipped}
    assert set(skipped) == {".git/", ".hidden.md", "empty.md", "logo.png", "setup.py"}
    assert skipped["setup.py"].startswith(".py files are not read") and skipped[".git/"] == "hidden folder"
    (message,) = messages
    assert "\n" not in message and "skipped 5 file(s)" in message


def test_an_unreadable_file_is_skipped_and_named_even_as_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "notes.txt").write_text(TEXT, encoding="utf-8")
    secret = tmp_path / "secret.md"
    secret.write_text("Payroll figures.", encoding="utf-8")
    real_open = io.open

    def refusing_open(file, *args, **kwargs):  # type: ignore[no-untyped-def]
        if os.fspath(file) == str(secret):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(io, "open", refusing_open)
    index, messages = _build(tmp_path)
    assert [p.id for p in index.passages] == ["notes.txt"]
    assert [(s.path, s.reason) for s in index.skipped] == [("secret.md", "unreadable (Permission denied)")]
    assert "secret.md (unreadable (Permission denied))" in messages[0]


def test_an_unreadable_subfolder_is_skipped_and_named_even_as_root(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "notes.txt").write_text(TEXT, encoding="utf-8")
    (tmp_path / "private").mkdir()
    (tmp_path / "private" / "plan.md").write_text("The plan.", encoding="utf-8")
    real_scandir = os.scandir

    def refusing_scandir(path="."):  # type: ignore[no-untyped-def]
        if os.fspath(path).endswith("private"):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", refusing_scandir)
    index, _ = _build(tmp_path)
    assert [(s.path, s.reason) for s in index.skipped] == [("private/", "unreadable folder (Permission denied)")]


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads files whatever their mode")
def test_chmod_000_file_and_folder_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text(TEXT, encoding="utf-8")
    (tmp_path / "locked.txt").write_text("locked", encoding="utf-8")
    (tmp_path / "closed").mkdir()
    (tmp_path / "closed" / "inside.md").write_text("inside", encoding="utf-8")
    os.chmod(tmp_path / "locked.txt", 0)
    os.chmod(tmp_path / "closed", 0)
    try:
        index, _ = _build(tmp_path)
    finally:
        os.chmod(tmp_path / "locked.txt", 0o644)
        os.chmod(tmp_path / "closed", 0o755)
    assert {s.path for s in index.skipped} == {"locked.txt", "closed/"}


def test_cli_index_reports_what_it_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "notes.txt").write_text(TEXT, encoding="utf-8")
    (folder / "data.csv").write_text("a,b\n1,2\n", encoding="utf-8")
    (folder / "secret.md").write_text("Payroll figures.", encoding="utf-8")
    real_open = io.open

    def refusing_open(file, *args, **kwargs):  # type: ignore[no-untyped-def]
        if os.fspath(file).endswith("secret.md"):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(io, "open", refusing_open)
    assert main(["index", str(folder), str(tmp_path / "idx"), "--json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["passages"] == 1
    assert [s["path"] for s in report["skipped"]] == ["data.csv", "secret.md"]
    assert captured.err.count("\n") == 1 and captured.err.startswith("warning: ") and "skipped 2" in captured.err
    assert [s.path for s in BM25Index.load(tmp_path / "idx").skipped] == ["data.csv", "secret.md"]  # in the manifest
    assert main(["index", str(folder), str(tmp_path / "idx2")]) == 0
    assert "(2 skipped: see the warning)" in capsys.readouterr().out


def test_a_text_file_that_is_not_utf8_is_one_line_from_the_cli(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "cafe.txt").write_bytes("café au lait".encode("latin-1"))
    (tmp_path / "README").write_bytes("Ærø island".encode("latin-1"))  # suffix-less: skipped, not refused
    assert main(["index", str(tmp_path), str(tmp_path.parent / "idx")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cafe.txt" in err and "is not UTF-8 text (byte 0xe9 at offset 3)" in err
