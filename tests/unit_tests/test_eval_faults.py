"""Fault injection on ``active-rag eval``: a run killed with SIGKILL at random points, resumed each time, ends with
exactly one clean run's rows; an endpoint that goes down for some questions and comes back leaves failures that a
resume answers."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from active_rag.evaluation.cli import main

from tests.unit_tests.endpoint_fakes import Script, _Handler

ROOT = Path(__file__).resolve().parents[2]
LOCK = ".active-rag-eval.lock"
N_QUESTIONS = 40

# A process that imports the evaluation once, then forks one eval run per "run OUT|LOG" line (the run's pid on
# stdout) and reaps one per "wait PID" line (its exit status on stdout): each run is a process of its own, killed
# with SIGKILL, without paying the imports again. The runs use a fake engine (no model): every question takes a few
# milliseconds and its row carries some padding, so that kills land while rows are being read and written.
ZYGOTE = """
import contextlib, os, sys, time, traceback
sys.path.insert(0, {root!r})
from pathlib import Path
from active_rag.evaluation import runner
from active_rag.evaluation.config import build_methods
from active_rag.types import ActiveRAGResult


class Rag:
    method = "sr-rag"

    def run(self, question):
        time.sleep(0.01)
        return ActiveRAGResult(question=question, answer="So the answer is " + question.split()[-1].rstrip("?") + ".",
                               method="sr-rag")


class FakeWorker(runner.EvalWorker):
    def __init__(self, config, lm=None, specs=None, data_dir=None):
        self.config, self.specs, self.data_dir = config, {{s.name: s for s in specs}}, data_dir
        self.lm, self.model_name, self.weights, self.index_info = None, "fake-model", "float32", {{}}
        self.shared, self.router, self.system, self._engines, self._by_id = None, None, None, {{}}, None

    def system_prompt(self):
        return contextlib.nullcontext()

    def engine_key(self, name):
        return "fake-key"

    def unsettled_key(self, name):
        return {{}}

    def run(self, name, example):
        row = runner._run_one(Rag(), None, example)
        row.update(method=name, engine_key="fake-key", weights="float32", padding="x" * 3000)
        return row


runner.EvalWorker = FakeWorker


def config(out):
    return runner.EvalConfig(dataset="hotpotqa", data_dir=Path({data!r}), out_dir=Path(out), methods=["sr-rag"],
                             plots=False, index_cache=Path(out) / "idx")


build_methods(config("unused"))  # the engine's imports, once
for line in sys.stdin:
    command, _, arg = line.strip().partition(" ")
    if command == "run":
        out, log = arg.split("|")
        pid = os.fork()
        if pid == 0:
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            code = 0
            try:
                report = runner.run_eval(config(out), progress=False)
                print("done", report.summary["sr-rag"]["n"])
            except BaseException:
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        print(pid, flush=True)
    elif command == "wait":
        print(os.waitpid(int(arg), 0)[1], flush=True)
"""


def _write_data(root: Path) -> Path:
    qs = [{"question_id": f"q{i:02d}", "question_text": f"What is the word number {i} of word{i}?",
           "answers_objects": [{"spans": [f"word{i}"]}],
           "contexts": [{"id": "0", "title": "Words", "paragraph_text": "Words.", "is_supporting": True}]}
          for i in range(N_QUESTIONS)]
    (root / "hotpotqa").mkdir(parents=True)
    (root / "hotpotqa/questions_dev.jsonl").write_text("".join(json.dumps(q) + "\n" for q in qs), encoding="utf-8")
    (root / "hotpotqa/corpus.jsonl").write_text(json.dumps({"id": "p", "title": "Words", "text": "Words."}) + "\n",
                                                encoding="utf-8")
    return root


class _Zygote:
    """The forking process of :data:`ZYGOTE`."""

    def __init__(self, data: Path) -> None:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "default"}
        self.proc = subprocess.Popen([sys.executable, "-c", ZYGOTE.format(root=str(ROOT), data=str(data))], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def _ask(self, line: str) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        assert answer, "the forking process died"
        return int(answer)

    def start(self, out: Path, log: Path) -> int:
        return self._ask(f"run {out}|{log}")

    def wait(self, pid: int) -> int:
        return os.waitstatus_to_exitcode(self._ask(f"wait {pid}"))

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def _holder(folder: Path) -> int | None:
    """The pid the folder's lock file names (None while there is none, or while it is being written)."""
    try:
        return int(json.loads((folder / LOCK).read_text(encoding="utf-8"))["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _ended(log: Path) -> bool:
    """Whether the run writing ``log`` has ended (its last line printed)."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return False
    return "done " in text or "Traceback" in text


def _comparable(path: Path) -> dict[str, tuple[Any, ...]]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return {r["id"]: (r["prediction"], r["answer"], r["metrics"]["f1"], r.get("error")) for r in rows}


@pytest.mark.slow
def test_sigkill_at_random_points_then_resume_equals_one_clean_run(tmp_path: Path) -> None:
    data = _write_data(tmp_path / "data")
    zygote = _Zygote(data)
    try:
        clean_out, out = tmp_path / "clean", tmp_path / "killed"
        clean_log = tmp_path / "clean.log"
        assert zygote.wait(zygote.start(clean_out, clean_log)) == 0, clean_log.read_text(errors="replace")[-3000:]
        clean = _comparable(clean_out / "hotpotqa/fake-model/sr-rag.jsonl")
        assert len(clean) == N_QUESTIONS

        folder = out / "hotpotqa/fake-model"
        path = folder / "sr-rag.jsonl"
        rng = random.Random(1234)
        logs: list[Path] = []
        for attempt in range(20):
            logs.append(tmp_path / f"kill-{attempt}.log")
            pid = zygote.start(out, logs[-1])
            deadline = time.monotonic() + 30
            while _holder(folder) != pid and not _ended(logs[-1]) and time.monotonic() < deadline:
                time.sleep(0.001)  # until the run holds its folder: the kill lands while it reads or writes rows
            time.sleep(rng.uniform(0.0, 0.06))
            os.kill(pid, signal.SIGKILL)
            assert zygote.wait(pid) in (0, -signal.SIGKILL)
            if path.is_file() and rng.random() < 0.3:  # as a kill in the middle of a row's write() leaves it
                line = json.dumps({"id": "q00", "prediction": "cut off"})
                with open(path, "a", encoding="utf-8") as fh:
                    fh.write(line[: rng.randint(1, len(line) - 1)])
        with open(path, "a", encoding="utf-8") as fh:  # the final resume meets a torn last line too
            fh.write('{"id": "q01", "predic')
        logs.append(tmp_path / "final.log")
        assert zygote.wait(zygote.start(out, logs[-1])) == 0, logs[-1].read_text(errors="replace")[-3000:]
    finally:
        zygote.close()

    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n")
    ids = [json.loads(line)["id"] for line in text.splitlines()]  # every line is a whole row
    assert len(ids) == len(set(ids)) == N_QUESTIONS  # no duplicate, no lost question
    assert _comparable(path) == clean
    assert not (folder / LOCK).exists()
    stderr = "".join(log.read_text(errors="replace") for log in logs)
    assert "took over the lock" in stderr  # the locks the killed runs left were stale, and said so
    assert "malformed" in stderr  # the torn lines were dropped with a warning
    assert "Traceback" not in stderr


# ------------------------------------------------------------------------------------------------ endpoint


class _FlakyHandler(_Handler):
    """The fake server, answering 503 to any request whose prompt holds one of ``script.down`` (the questions the
    endpoint is down for)."""

    def _answer(self, body: dict[str, Any]) -> None:
        text = json.dumps(body)
        if any(word in text for word in getattr(self.script, "down", ())):
            self._send_json(503, {"error": {"message": "server overloaded"}})
            return
        super()._answer(body)


@contextmanager
def _flaky_endpoint(script: Script) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (_FlakyHandler,), {"script": script}))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.mark.slow
def test_an_endpoint_down_for_some_questions_fails_them_and_a_resume_answers_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    questions = ["Who founded Zorblatt?", "Where is Quenvira?", "When did Pallaxo open?", "Who runs Drimmon?"]
    rows = [{"question_id": f"q{i}", "question_text": q, "answers_objects": [{"spans": ["Paris"]}],
             "contexts": [{"id": "0", "title": "Paris", "paragraph_text": "Paris is in France.", "is_supporting": True}]}
            for i, q in enumerate(questions)]
    root = tmp_path / "data"
    (root / "hotpotqa").mkdir(parents=True)
    (root / "hotpotqa/questions_dev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (root / "hotpotqa/corpus.jsonl").write_text(json.dumps({"id": "p1", "title": "Paris", "text": "Paris is in France."})
                                                + "\n", encoding="utf-8")
    script = Script()
    script.down = {"Quenvira", "Drimmon"}  # type: ignore[attr-defined]
    argv = ["eval", "--dataset", "hotpotqa", "--data-dir", str(root), "--methods", "sr-rag", "--max-new-tokens", "8",
            "--endpoint-model", "m", "--endpoint-timeout", "5", "--out", str(tmp_path / "out"),
            "--index-cache", str(tmp_path / "idx"), "--no-plots", "--no-progress"]
    with _flaky_endpoint(script) as url:
        first = main([*argv, "--endpoint", url])
        err = capsys.readouterr().err
        assert first == 1, err
        assert "2 question(s) failed" in err and "sr-rag q1" in err
        path = tmp_path / "out/hotpotqa/m-endpoint/sr-rag.jsonl"
        summary = json.loads((path.parent / "summary.json").read_text())
        assert summary["methods"]["sr-rag"]["n"] == 2 and summary["methods"]["sr-rag"]["errors"] == 2
        assert [f["id"] for f in summary["failures"]["sr-rag"]] == ["q1", "q3"]

        script.down = set()  # type: ignore[attr-defined]  # the endpoint is back
        script.requests.clear()
        second = main([*argv, "--endpoint", url])
        assert second == 0, capsys.readouterr().err
    asked = " ".join(json.dumps(r) for r in script.requests)
    assert "Quenvira" in asked and "Drimmon" in asked and "Zorblatt" not in asked and "Pallaxo" not in asked
    final = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert sorted(r["id"] for r in final) == ["q0", "q1", "q2", "q3"] and not any(r.get("error") for r in final)
    summary = json.loads((path.parent / "summary.json").read_text())
    assert summary["methods"]["sr-rag"]["n"] == 4 and summary["methods"]["sr-rag"]["errors"] == 0
