"""``bench --suite batch|prefix`` and ``eval --batch-size`` on the tiny random model: structure of the
results, the same rows batched as serial, cache reuse visible in the rows. No timing assertions."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from active_rag import ActiveLM
from active_rag.evaluation.runner import EvalConfig, run_eval
from active_rag.evaluation.throughput import ThroughputConfig, run_throughput


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _hotpot(qid: str, question: str, answer: str, gold: list[str]) -> dict[str, Any]:
    contexts = [{"id": str(i), "title": t, "paragraph_text": f"{t} text.", "is_supporting": True} for i, t in enumerate(gold)]
    return {"question_id": qid, "question_text": question, "answers_objects": [{"spans": [answer]}], "contexts": contexts}


@pytest.fixture()
def data_dir(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    _write_jsonl(root / "hotpotqa/questions_dev.jsonl", [
        _hotpot("q1", "Who is the father of Kasper Schmeichel?", "Peter Schmeichel", ["Kasper Schmeichel"]),
        _hotpot("q2", "Were Scott Derrickson and Ed Wood of the same nationality?", "yes", ["Scott Derrickson", "Ed Wood"]),
        _hotpot("q3", "What was Peter Schmeichel voted in 1992?", "World's Best Goalkeeper", ["Peter Schmeichel"]),
        _hotpot("q4", "Who directed Ed Wood?", "Tim Burton", ["Ed Wood"]),
    ])
    _write_jsonl(root / "hotpotqa/corpus.jsonl", [
        {"id": "p1", "title": "Kasper Schmeichel", "text": "Kasper Schmeichel is a Danish footballer, son of Peter Schmeichel."},
        {"id": "p2", "title": "Peter Schmeichel", "text": "Peter Schmeichel was voted the IFFHS World's Best Goalkeeper in 1992."},
        {"id": "p3", "title": "Scott Derrickson", "text": "Scott Derrickson is an American director."},
        {"id": "p4", "title": "Ed Wood", "text": "Ed Wood was an American filmmaker."},
    ])
    return root


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


@pytest.mark.slow
def test_batch_suite_structure(tiny_lm: ActiveLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the scheduler's leader waits wait_s for the other sessions' steps: on a loaded machine 10 ms can pass before
    # they enqueue, and the questions then step alone; they still share forwards when it waits long enough
    assert tiny_lm.scheduler is not None
    monkeypatch.setattr(tiny_lm.scheduler, "wait_s", 2.0)
    config = ThroughputConfig(suite="batch", batch_sizes=[1, 3], tokens=6, out_dir=tmp_path / "b")
    result = run_throughput(config, lm=tiny_lm, progress=False)
    saved = json.loads((tmp_path / "b" / "bench-batch.json").read_text())
    assert [(r["method"], r["batch"]) for r in saved["rows"]] == [("dragin", 1), ("dragin", 3), ("flare", 1), ("flare", 3)]
    for row in saved["rows"]:
        assert row["tokens"] == 6 * row["batch"]
        assert _finite(row["loop_tok_s"]) and _finite(row["generate_tok_s"]) and _finite(row["loop_vs_generate"])
        assert row["prompt_tokens"] > 0
    three = [r for r in saved["rows"] if r["batch"] == 3]
    assert all(r["forward_calls"] < r["tokens"] for r in three)  # the three questions shared forward passes
    assert "| dragin | 3 |" in result["table"]


@pytest.mark.slow
def test_prefix_suite_reuses_the_shared_prompt(tiny_lm: ActiveLM, data_dir: Path, tmp_path: Path) -> None:
    config = ThroughputConfig(suite="prefix", prefix_methods=["wo-rag", "sr-rag"], questions=3, data_dir=data_dir,
                              prefix_batch=2, max_new_tokens=8, out_dir=tmp_path / "p")
    result = run_throughput(config, lm=tiny_lm, progress=False)
    rows = {r["method"]: r for r in result["rows"]}
    for row in rows.values():
        assert row["questions"] == 3
        assert row["prefilled_per_q_cache"] < row["prefilled_per_q_no_cache"]  # the exemplars are read once
        assert row["cached_per_q_cache"] > 0
        assert row["identical_answers"] == 1.0 and row["identical_answers_batch"] == 1.0
        assert _finite(row["speedup_cache"]) and _finite(row["speedup_cache_batch_vs_plain"])
    assert (tmp_path / "p" / "bench-prefix.md").read_text().startswith("| method |")


@pytest.mark.slow
def test_eval_batch_size_gives_the_serial_rows(tiny_lm: ActiveLM, data_dir: Path, tmp_path: Path) -> None:
    def rows(batch: int) -> dict[str, list[dict[str, Any]]]:
        config = EvalConfig(dataset="hotpotqa", data_dir=data_dir, out_dir=tmp_path / f"out{batch}", methods=["sr-rag", "dragin"],
                            index_cache=tmp_path / "idx", max_new_tokens=10, plots=False, batch_size=batch)
        report = run_eval(config, lm=tiny_lm, progress=False)
        return report.rows

    def key(row: dict[str, Any]) -> tuple[Any, ...]:
        # scores agree to float rounding (batched matrix products sum in another order), the rest exactly
        trace = [{**t, "score": None if t["score"] is None else round(t["score"], 4)} for t in row["trace"]]
        trace = [{k: v for k, v in t.items() if k != "reason"} for t in trace]
        return row["id"], row["prediction"], json.dumps(trace, sort_keys=True), row["retriever_calls"]

    serial, batched = rows(1), rows(3)
    for method in ("sr-rag", "dragin"):
        assert sorted(map(key, batched[method])) == sorted(map(key, serial[method]))
        assert all(set(r["prompt_tokens"]) == {"cached", "prefilled", "read"} for r in batched[method])


@pytest.mark.slow
def test_prefix_suite_resumes_from_its_pass_files(tiny_lm: ActiveLM, data_dir: Path, tmp_path: Path, monkeypatch) -> None:
    from active_rag.evaluation import throughput

    config = ThroughputConfig(suite="prefix", prefix_methods=["sr-rag"], questions=2, data_dir=data_dir,
                              prefix_batch=2, max_new_tokens=6, out_dir=tmp_path / "p")
    first = run_throughput(config, lm=tiny_lm, progress=False)
    passes = sorted(p.name for p in (tmp_path / "p" / "prefix-passes").iterdir())
    assert passes == ["cache-batch1--sr-rag.json", "cache-batch2--sr-rag.json", "nocache-batch1--sr-rag.json"]
    # a second run with the same questions reads every pass back instead of answering again
    monkeypatch.setattr(throughput, "_prefix_pass", lambda *a, **k: pytest.fail("answered again"))
    again = run_throughput(config, lm=tiny_lm, progress=False)
    assert again["rows"] == first["rows"]
    # other questions are a different run: the saved passes are not used
    with pytest.raises(pytest.fail.Exception, match="answered again"):
        run_throughput(ThroughputConfig(**{**config.__dict__, "questions": 3}), lm=tiny_lm, progress=False)


def test_trace_agreement_tells_rounding_from_another_decision() -> None:
    from active_rag.evaluation.throughput import trace_agreement

    step = {"position": 3, "token": "K", "score": 1.2345678, "query": "q", "passage_ids": ["a", "b"]}
    assert trace_agreement([step], [dict(step)]) == {"exact": True, "decisions": True, "max_score_gap": 0.0}
    rounded = trace_agreement([step], [{**step, "score": 1.2345679}])
    assert (rounded["exact"], rounded["decisions"]) == (False, True) and 0 < rounded["max_score_gap"] < 1e-6
    assert not trace_agreement([step], [{**step, "passage_ids": ["a", "c"]}])["decisions"]
    assert not trace_agreement([step], [{**step, "score": 1.5}])["decisions"]
    assert not trace_agreement([step], [step, step])["decisions"]
