"""research/pyref.py: the Python reference's topics as a documentation folder, with hand-written questions."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from research import pyref


def _questions(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.skipif(sys.version_info[:2] != pyref.PYTHON, reason="the questions were written from Python 3.11's topics")
def test_every_committed_question_is_answered_in_its_files() -> None:
    assert pyref.check_questions() == []
    rows = [json.loads(line) for line in pyref.QUESTIONS.read_text().splitlines()]
    assert len(rows) == 45 and len({r["question_id"] for r in rows}) == 45
    assert {r["type"] for r in rows} == {"fact", "version", "yes-no", "compare"}


def test_a_question_whose_answer_is_not_in_its_file_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pyref, "topics", lambda: {"assert": 'raise "AssertionError"', "pass": "nothing happens"})
    path = _questions(tmp_path / "q.jsonl", [
        {"question_id": "a", "type": "fact", "answers": ["AssertionError"], "supporting_files": ["assert.txt"]},
        {"question_id": "b", "type": "fact", "answers": ["ValueError"], "supporting_files": ["assert.txt"]},
        {"question_id": "c", "type": "yes-no", "answers": ["no"], "supporting_files": ["pass.txt"]},
        {"question_id": "d", "type": "fact", "answers": ["x"], "supporting_files": ["missing.txt"]},
    ])
    problems = pyref.check_questions(path)
    assert [p.split(":")[0] for p in problems] == ["b", "d"]


def test_the_folder_is_written_as_eval_reads_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pyref, "topics", lambda: {"pass": "The pass statement", "del": "The del statement"})
    questions = _questions(tmp_path / "q.jsonl", [{"question_id": "a", "type": "fact", "answers": ["x"],
                                                   "supporting_files": ["pass.txt"]}])
    out = tmp_path / "data"
    pyref.write_folder(out, questions)
    (out / "pydocs" / "docs" / "stale.txt").write_text("left from before")  # a folder it wrote: written again
    sha = pyref.write_folder(out, questions)
    assert sorted(p.name for p in (out / "pydocs" / "docs").iterdir()) == ["del.txt", "pass.txt"]
    assert (out / "pydocs" / "docs" / "pass.txt").read_text() == "The pass statement"
    assert (out / "pydocs" / "questions_dev.jsonl").read_text() == questions.read_text()
    assert (out / "pydocs" / "topics.sha256").read_text().strip() == sha and len(sha) == 64
    monkeypatch.setattr(pyref, "topics", lambda: {"pass": "The pass statement.", "del": "The del statement"})
    assert pyref.write_folder(tmp_path / "other", questions) != sha


def test_another_python_is_refused_with_exit_code_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(pyref, "PYTHON", (2, 7))
    assert pyref.main(["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--any-python" in err
    assert not (tmp_path / "pydocs").exists()


def test_a_folder_it_did_not_write_is_left_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--out ../shared/data`` must not replace pydocs' own files: exit 2, one line, nothing touched."""
    docs = tmp_path / "pydocs" / "docs"
    docs.mkdir(parents=True)
    (docs / "requests.md").write_text("# requests")
    (tmp_path / "pydocs" / "questions_dev.jsonl").write_text("{}\n")
    with pytest.raises(pyref.FolderInUse):
        pyref.write_folder(tmp_path)
    if sys.version_info[:2] == pyref.PYTHON:
        assert pyref.main(["--out", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "new or empty folder" in err
    assert [p.name for p in docs.iterdir()] == ["requests.md"]
    assert (tmp_path / "pydocs" / "questions_dev.jsonl").read_text() == "{}\n"
