"""``active-rag eval --ray`` on a local Ray with the tiny model saved to a folder: the Ray run writes the same
rows as the local runner, resumes a local run, survives a killed actor with every question exactly once, and
bad setups (no Ray, an unreachable RAY_ADDRESS) stop with one line and no rows."""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from active_rag.evaluation.cli import register
from active_rag.evaluation.runner import EvalConfig, run_eval

HAS_RAY = importlib.util.find_spec("ray") is not None
N_QUESTIONS = 16
MAX_NEW = 12


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ray-data")
    people = ["Kasper Schmeichel", "Peter Schmeichel", "Scott Derrickson", "Ed Wood"]
    questions = []
    for i in range(N_QUESTIONS):
        a, b = people[i % 4], people[(i + 1) % 4]
        questions.append({
            "question_id": f"q{i:02d}", "question_text": f"Question {i}: how are {a} and {b} related?",
            "answers_objects": [{"spans": [b]}],
            "contexts": [{"id": "0", "title": a, "paragraph_text": f"{a} text.", "is_supporting": True}],
        })
    _write_jsonl(root / "hotpotqa/questions_dev.jsonl", questions)
    _write_jsonl(root / "hotpotqa/corpus.jsonl", [
        {"id": f"p{i}", "title": p, "text": f"{p} is a person; {people[(i + 1) % 4]} is another."} for i, p in enumerate(people)
    ])
    return root


def _config(data_dir: Path, model: Path, out: Path, **kw: Any) -> EvalConfig:
    # float32 weights: the rows of actors (each with its own prefix-cache history) are compared token for token
    # with a serial run's, and a bfloat16 prefill split differently by the cache may flip a random model's near-tie
    return EvalConfig(dataset="hotpotqa", data_dir=data_dir, model=str(model), out_dir=out, index_cache=out / "indexes",
                      max_new_tokens=MAX_NEW, methods=["sr-rag"], plots=False, weights="float32", **kw)


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="active-rag")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


# ---------------------------------------------------------------------------------- bad setups (no Ray started)


def test_ray_not_installed_one_line_exit_2(data_dir: Path, tiny_dir: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    out = tmp_path / "out"
    code = _cli(["eval", "--dataset", "hotpotqa", "--data-dir", str(data_dir), "--model", str(tiny_dir), "--out", str(out),
                 "--methods", "sr-rag", "--ray", "--no-progress", "--no-plots"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "pip install 'active-rag[ray]'" in err[0]
    assert not out.exists()


def test_num_workers_needs_ray(data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = _cli(["eval", "--dataset", "hotpotqa", "--data-dir", str(data_dir), "--out", str(tmp_path / "out"),
                 "--num-workers", "2"])
    assert code == 2 and "add --ray" in capsys.readouterr().err


@pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (pip install 'active-rag[ray]')")
def test_unreachable_ray_address_one_line_exit_2(data_dir: Path, tiny_dir: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import ray

    if ray.is_initialized():  # pragma: no cover - another module left Ray running
        pytest.skip("Ray is already initialised in this process")
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    out = tmp_path / "out"
    code = _cli(["eval", "--dataset", "hotpotqa", "--data-dir", str(data_dir), "--model", str(tiny_dir), "--out", str(out),
                 "--methods", "sr-rag", "--ray", "--no-progress", "--no-plots"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert f"RAY_ADDRESS='127.0.0.1:{port}'" in err[0] and "unset RAY_ADDRESS" in err[0]
    assert not out.exists() and not ray.is_initialized()


# ---------------------------------------------------------------------------------- on a local Ray


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.mark.slow
def test_ray_run_resumes_local_rows_and_survives_a_killed_actor(local_ray: Any, data_dir: Path, tiny_dir: Path,
                                                                 tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from active_rag.evaluation import distributed

    ray = local_ray
    # A local run of the first 4 questions; the Ray run resumes it.
    local = run_eval(_config(data_dir, tiny_dir, tmp_path / "out", limit=4), progress=False)
    path = local.files["sr-rag"]
    first_lines = path.read_text(encoding="utf-8")
    assert len(_jsonl(path)) == 4

    # Kill one actor when the first task comes back, with tasks in flight and queued.
    waits = {"n": 0, "killed": None}
    real_wait = ray.wait

    def wait_then_kill(refs: list[Any], **kw: Any) -> Any:
        result = real_wait(refs, **kw)
        waits["n"] += 1
        if waits["n"] == 1:  # tasks are still queued: whatever the victim finished, it is fed more
            names = sorted(a["name"] if isinstance(a, dict) else a for a in ray.util.list_named_actors())
            victim = next(n for n in names if n.startswith("active-rag-eval-"))
            ray.kill(ray.get_actor(victim))
            waits["killed"] = victim
        return result

    monkeypatch.setattr(ray, "wait", wait_then_kill)
    reports: list[Any] = []
    real_run = distributed.run_eval_ray

    def keep_report(*args: Any, **kw: Any) -> Any:
        reports.append(real_run(*args, **kw))
        return reports[-1]

    monkeypatch.setattr(distributed, "run_eval_ray", keep_report)
    code = _cli(["eval", "--dataset", "hotpotqa", "--data-dir", str(data_dir), "--model", str(tiny_dir),
                 "--out", str(tmp_path / "out"), "--index-cache", str(tmp_path / "out" / "indexes"), "--methods", "sr-rag",
                 "--max-new-tokens", str(MAX_NEW), "--ray", "--num-workers", "2", "--batch-size", "2", "--no-progress",
                 "--no-plots", "--weights", "float32"])
    assert code == 0 and "| sr-rag |" in capsys.readouterr().out
    [report] = reports
    stats = report.ray
    assert waits["killed"] is not None
    assert stats.workers == 2 and stats.actors_lost == 1 and stats.tasks_requeued >= 1 and stats.replacements == 1
    assert stats.rows_written == N_QUESTIONS - 4

    rows = _jsonl(path)
    ids = [r["id"] for r in rows]
    assert sorted(ids) == [f"q{i:02d}" for i in range(N_QUESTIONS)]  # every question exactly once
    assert path.read_text(encoding="utf-8").startswith(first_lines)  # the local rows are kept as they were
    assert report.summary["sr-rag"]["n"] == N_QUESTIONS
    assert json.loads((report.out_dir / "summary.json").read_text())["methods"]["sr-rag"]["n"] == N_QUESTIONS

    # Same method logic: the rows the actors wrote equal a local run's on the same questions.
    reference = run_eval(_config(data_dir, tiny_dir, tmp_path / "ref"), progress=False)
    by_id = {r["id"]: r for r in reference.rows["sr-rag"]}
    for r in rows:
        assert r["prediction"] == by_id[r["id"]]["prediction"]
        assert r["trace"][0]["query"] == by_id[r["id"]]["trace"][0]["query"]
        assert r["engine_key"] == by_id[r["id"]]["engine_key"]

    assert ray.is_initialized()  # the caller's Ray is left running
