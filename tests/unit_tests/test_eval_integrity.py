"""``active-rag eval`` results can be trusted: a failed question is a failure (never a score of 0, retried on
resume, counted, exit 1), one run writes a folder at a time, each question is on disk once, a questions file
with a duplicate id, a blank question or bytes that are not UTF-8 is refused naming file and line, and an
``--out`` that cannot be written is refused before the model loads."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from active_rag import ActiveLM
from active_rag.errors import CorpusError, EndpointUnreachableError
from active_rag.evaluation.cli import main, register
from active_rag.evaluation.datasets import load_dataset
from active_rag.evaluation.runner import EvalConfig, run_eval
from active_rag.engine import ActiveRAG

from tests.unit_tests.endpoint_fakes import free_port

LOCK = ".active-rag-eval.lock"


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _hotpot(qid: str, question: str, answer: str) -> dict[str, Any]:
    return {"question_id": qid, "question_text": question, "answers_objects": [{"spans": [answer]}],
            "contexts": [{"id": "0", "title": "Ed Wood", "paragraph_text": "Ed Wood text.", "is_supporting": True}]}


QUESTIONS = [
    _hotpot("q1", "Who is the father of Kasper Schmeichel?", "Peter Schmeichel"),
    _hotpot("q2", "Were Scott Derrickson and Ed Wood of the same nationality?", "yes"),
    _hotpot("q3", "What was Peter Schmeichel voted in 1992?", "World's Best Goalkeeper"),
]


def _data(root: Path, questions: list[dict[str, Any]] | None = None) -> Path:
    _write_jsonl(root / "hotpotqa/questions_dev.jsonl", QUESTIONS if questions is None else questions)
    _write_jsonl(root / "hotpotqa/corpus.jsonl", [
        {"id": "p1", "title": "Ed Wood", "text": "Ed Wood was an American filmmaker."},
        {"id": "p2", "title": "Peter Schmeichel", "text": "Peter Schmeichel was voted the World's Best Goalkeeper."},
    ])
    return root


def _config(data: Path, tmp_path: Path, **kw: Any) -> EvalConfig:
    return EvalConfig(dataset="hotpotqa", data_dir=data, out_dir=tmp_path / "out", index_cache=tmp_path / "idx",
                      max_new_tokens=6, methods=kw.pop("methods", ["sr-rag"]), plots=False, **kw)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture()
def down_for(monkeypatch: pytest.MonkeyPatch) -> tuple[set[str], list[str]]:
    """``(down, asked)``: questions whose text is in ``down`` fail with EndpointUnreachableError; ``asked`` records
    every question the engine ran."""
    down: set[str] = set()
    asked: list[str] = []
    original = ActiveRAG.run

    def run(self: ActiveRAG, question: str, *args: Any, **kwargs: Any) -> Any:
        asked.append(question)
        if question in down:
            raise EndpointUnreachableError("Nothing answers at http://127.0.0.1:9/v1 (connection refused).")
        return original(self, question, *args, **kwargs)

    monkeypatch.setattr(ActiveRAG, "run", run)
    return down, asked


# ------------------------------------------------------------------------------------------------ failures


def test_a_failed_question_is_a_failure_not_a_score_and_a_resume_answers_it(
        tiny_lm: ActiveLM, tmp_path: Path, down_for: tuple[set[str], list[str]]) -> None:
    down, asked = down_for
    data = _data(tmp_path / "data")
    down.add(QUESTIONS[1]["question_text"])
    report = run_eval(_config(data, tmp_path), lm=tiny_lm, progress=False)
    path = report.files["sr-rag"]
    assert [f["id"] for f in report.failures["sr-rag"]] == ["q2"] and report.failed == 1
    assert "EndpointUnreachableError" in report.failures["sr-rag"][0]["error"]
    assert report.summary["sr-rag"]["n"] == 2 and report.summary["sr-rag"]["errors"] == 1
    assert [r["id"] for r in report.rows["sr-rag"]] == ["q1", "q3"]  # the failure is not among the scored rows
    results = (path.parent / "results.md").read_text(encoding="utf-8")
    assert "| Errors |" in results and "## Failed questions" in results and "q2: EndpointUnreachableError" in results
    assert json.loads((path.parent / "summary.json").read_text())["failures"]["sr-rag"][0]["id"] == "q2"

    # --no-retry-failed keeps the failure as it is: nothing is asked again
    asked.clear()
    kept = run_eval(_config(data, tmp_path, retry_failed=False), lm=tiny_lm, progress=False)
    assert asked == [] and kept.failed == 1

    # the endpoint is back: a resume answers only the failed question, and the file holds each question once
    down.clear()
    asked.clear()
    again = run_eval(_config(data, tmp_path), lm=tiny_lm, progress=False)
    assert asked == [QUESTIONS[1]["question_text"]]
    assert again.failed == 0 and again.summary["sr-rag"]["n"] == 3 and again.summary["sr-rag"]["errors"] == 0
    rows = _lines(path)
    assert sorted(r["id"] for r in rows) == ["q1", "q2", "q3"] and not any(r.get("error") for r in rows)


@pytest.mark.slow
def test_cli_eval_against_a_dead_endpoint_exits_1_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _data(tmp_path / "data")
    code = main(["eval", "--dataset", "hotpotqa", "--data-dir", str(data), "--methods", "sr-rag", "--limit", "1",
                 "--endpoint", f"http://127.0.0.1:{free_port()}/v1", "--endpoint-model", "m", "--endpoint-timeout", "2",
                 "--out", str(tmp_path / "out"), "--index-cache", str(tmp_path / "idx"), "--no-plots", "--no-progress"])
    captured = capsys.readouterr()
    assert code == 1, captured.err
    assert "1 question(s) failed" in captured.err and "sr-rag q1" in captured.err
    assert "| Errors |" in captured.out


# ------------------------------------------------------------------------------------------------ one writer


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="active-rag")
    register(parser.add_subparsers(dest="command"))
    return parser


def _cli_args(data: Path, out: Path) -> list[str]:
    return ["eval", "--dataset", "hotpotqa", "--data-dir", str(data), "--methods", "sr-rag", "--out", str(out),
            "--max-new-tokens", "6", "--limit", "2", "--index-cache", str(out.parent / "idx"), "--no-progress", "--no-plots"]


def test_a_second_run_on_the_same_folder_is_refused_and_a_dead_runs_lock_is_taken_over(
        tiny_lm: ActiveLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from active_rag.evaluation.outlock import OutputLock

    monkeypatch.setattr(ActiveLM, "load", classmethod(lambda cls, name=None, **kw: tiny_lm))
    data, out = _data(tmp_path / "data"), tmp_path / "out"
    folder = out / "hotpotqa" / "tiny-llama"
    args = _parser().parse_args(_cli_args(data, out))
    with OutputLock(folder, {"note": "the first run"}):
        holder = json.loads((folder / LOCK).read_text())
        assert holder["pid"] == os.getpid() and holder["host"] and holder["settings"] == {"note": "the first run"}
        code = args.func(args)
        err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"pid {os.getpid()}" in err and "another eval run" in err and "--out" in err
    assert not (folder / "sr-rag.jsonl").exists()  # nothing written by the refused run
    assert not (folder / LOCK).exists()  # released by its holder

    # a live process named in a lock file (without its flock) still holds the folder
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (folder / LOCK).write_text(json.dumps({"pid": sleeper.pid, "host": os.uname().nodename}))
        assert args.func(args) == 2
        assert f"pid {sleeper.pid}" in capsys.readouterr().err
    finally:
        sleeper.kill()
        sleeper.wait()
    # ... and once it is dead, its lock is stale: taken over with a warning, then released
    with pytest.warns(UserWarning, match=f"took over the lock .*pid {sleeper.pid}"):
        assert args.func(args) == 0
    assert not (folder / LOCK).exists() and len(_lines(folder / "sr-rag.jsonl")) == 2


def test_rows_written_twice_are_kept_once_and_the_summary_is_read_from_disk(
        tiny_lm: ActiveLM, tmp_path: Path, down_for: tuple[set[str], list[str]]) -> None:
    _, asked = down_for
    data = _data(tmp_path / "data")
    first = run_eval(_config(data, tmp_path), lm=tiny_lm, progress=False)
    path = first.files["sr-rag"]
    rows = _lines(path)
    failed_q1 = {**rows[0], "error": "EndpointTimeoutError: no answer", "prediction": ""}
    # the same rows twice, and a failure written before the answer of q1: each question is kept once
    path.write_text("".join(json.dumps(r) + "\n" for r in [failed_q1, *rows, *rows]), encoding="utf-8")
    asked.clear()
    again = run_eval(_config(data, tmp_path), lm=tiny_lm, progress=False)
    assert asked == []
    on_disk = _lines(path)
    assert [r["id"] for r in on_disk] == ["q1", "q2", "q3"] and not any(r.get("error") for r in on_disk)
    assert again.summary["sr-rag"]["n"] == 3 and again.summary["sr-rag"] == first.summary["sr-rag"]


# ------------------------------------------------------------------------------------------------ question files


def test_a_duplicate_question_id_is_refused_naming_the_file_and_both_lines(tmp_path: Path) -> None:
    data = _data(tmp_path / "data", [QUESTIONS[0], QUESTIONS[1], {**QUESTIONS[2], "question_id": "q1"}])
    qfile = data / "hotpotqa/questions_dev.jsonl"
    with pytest.raises(CorpusError, match=rf"{qfile}, line 1 and line 3: question id 'q1' is used twice"):
        load_dataset("hotpotqa", data)
    assert len(load_dataset("hotpotqa", data, limit=2)) == 2  # the first two questions are fine


@pytest.mark.parametrize("blank", ["", "   \t "])
def test_a_blank_question_is_refused_naming_file_and_line(tmp_path: Path, blank: str) -> None:
    data = _data(tmp_path / "data", [QUESTIONS[0], {**QUESTIONS[1], "question_text": blank}])
    with pytest.raises(CorpusError, match=rf"{data / 'hotpotqa/questions_dev.jsonl'}, line 2: the question text is blank"):
        load_dataset("hotpotqa", data)


def test_a_questions_file_that_is_not_utf8_is_refused_naming_file_and_line(tmp_path: Path) -> None:
    data = _data(tmp_path / "data")
    qfile = data / "hotpotqa/questions_dev.jsonl"
    lines = qfile.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b"Derrickson", b"Derr\xe9ckson")  # latin-1, not UTF-8
    qfile.write_bytes(b"\n".join(lines))
    with pytest.raises(CorpusError, match=rf"{qfile}, line 2: not valid UTF-8"):
        load_dataset("hotpotqa", data)
    sqa = data / "strategyqa/strategyqa_dev_229.json"
    sqa.parent.mkdir(parents=True)
    sqa.write_bytes(b'[\n{"qid": "s1", "question": "Is it?", "answer": true},\n{"qid": "s2", "question": "Caf\xe9?", '
                    b'"answer": false}\n]\n')
    with pytest.raises(CorpusError, match=rf"{sqa}, line 3: not valid UTF-8"):
        load_dataset("strategyqa", data, resolve_gold_ids=False)


# ------------------------------------------------------------------------------------------------ --out


@pytest.mark.parametrize("where", ["file", "under-a-file", "proc"])
def test_an_out_that_cannot_be_written_is_refused_before_the_model_loads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], where: str) -> None:
    def no_load(cls: Any, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the model must not load")

    monkeypatch.setattr(ActiveLM, "load", classmethod(no_load))
    data = _data(tmp_path / "data")
    afile = tmp_path / "results.txt"
    afile.write_text("not a folder")
    out = {"file": afile, "under-a-file": afile / "sub", "proc": Path("/proc/active-rag-eval-out")}[where]
    args = _parser().parse_args(_cli_args(data, out))
    code = args.func(args)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert str(out) in err and "--out" in err and "pass a folder" in err
