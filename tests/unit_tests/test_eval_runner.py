"""``active-rag eval`` end to end on in-test fixtures with the tiny random model: files, metrics, resume,
RetrievalQA with a router, threshold sweeps, the eval prompt template, and the CLI layer."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from active_rag import ActiveLM, Passage, RouteDecision
from active_rag.errors import InvalidOptionError
from active_rag.evaluation import runner as runner_mod
from active_rag.evaluation.cli import register
from active_rag.evaluation.prompts import build_eval_prompt
from active_rag.evaluation.runner import (
    EvalConfig,
    build_methods,
    eval_prompt_template,
    load_corpus_index,
    run_eval,
)

MAX_NEW = 12


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _hotpot(qid: str, question: str, answer: str, gold: list[str], other: str) -> dict[str, Any]:
    contexts = [{"id": str(i), "title": t, "paragraph_text": f"{t} text.", "is_supporting": True} for i, t in enumerate(gold)]
    contexts.append({"id": str(len(gold)), "title": other, "paragraph_text": f"{other} text.", "is_supporting": False})
    return {"question_id": qid, "question_text": question, "answers_objects": [{"spans": [answer]}], "contexts": contexts}


@pytest.fixture()
def hotpot_dir(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    _write_jsonl(root / "hotpotqa/questions_dev.jsonl", [
        _hotpot("q1", "Who is the father of Kasper Schmeichel?", "Peter Schmeichel", ["Kasper Schmeichel", "Peter Schmeichel"], "Ed Wood"),
        _hotpot("q2", "Were Scott Derrickson and Ed Wood of the same nationality?", "yes", ["Scott Derrickson", "Ed Wood"], "Kasper Schmeichel"),
        _hotpot("q3", "What was Peter Schmeichel voted in 1992?", "World's Best Goalkeeper", ["Peter Schmeichel"], "Scott Derrickson"),
    ])
    _write_jsonl(root / "hotpotqa/corpus.jsonl", [
        {"id": "p1", "title": "Kasper Schmeichel", "text": "Kasper Schmeichel is a Danish footballer, son of Peter Schmeichel."},
        {"id": "p2", "title": "Peter Schmeichel", "text": "Peter Schmeichel was voted the IFFHS World's Best Goalkeeper in 1992."},
        {"id": "p3", "title": "Scott Derrickson", "text": "Scott Derrickson is an American director."},
        {"id": "p4", "title": "Ed Wood", "text": "Ed Wood was an American filmmaker."},
        {"id": "p5", "title": "Hamlet", "text": "Hamlet is a tragedy written by William Shakespeare."},
    ])
    return root


@pytest.fixture()
def rqa_dir(tmp_path: Path) -> Path:
    root = tmp_path / "data"

    def ctx(n: int, topic: str) -> list[dict[str, Any]]:
        return [{"rank": i + 1, "title": f"{topic} {i}", "text": f"About {topic}, passage {i}."} for i in range(n)]

    _write_jsonl(root / "retrievalqa/questions_dev.jsonl", [
        {"question_id": "r1", "data_source": "triviaqa", "question": "Who composed Jenufa?", "ground_truth": ["Leos Jancek"],
         "param_knowledge_answerable": 0, "contexts": ctx(7, "Janacek")},
        {"question_id": "r2", "data_source": "freshqa", "question": "Who is the current UN secretary general?",
         "ground_truth": ["Antonio Guterres"], "param_knowledge_answerable": 0, "contexts": ctx(3, "UN")},
    ])
    _write_jsonl(root / "retrievalqa/corpus.jsonl", [{"id": "x", "title": "t", "text": "unused"}])
    return root


def _config(data_dir: Path, tmp_path: Path, **kw: Any) -> EvalConfig:
    return EvalConfig(dataset=kw.pop("dataset", "hotpotqa"), data_dir=data_dir, out_dir=tmp_path / "out",
                      index_cache=tmp_path / "indexes", max_new_tokens=MAX_NEW, **kw)


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# ------------------------------------------------------------------------------------------------ prompts


@pytest.mark.parametrize("dataset", ["hotpotqa", "2wikimultihopqa", "strategyqa", "retrievalqa"])
def test_eval_template_renders_build_eval_prompt(dataset: str) -> None:
    template = eval_prompt_template(dataset)
    passages = [
        Passage(id="a", title="Ed Wood", text="Edward Davis Wood Jr.\nwas an  American {filmmaker}."),
        Passage(id="b", title="", text="No title here."),
        *[Passage(id=f"c{i}", title=f"T{i}", text=f"Text {i}.") for i in range(5)],
    ]
    question = "Who is {the} father of Kasper Schmeichel?"
    assert template.render(question) == build_eval_prompt(dataset, question)
    for docs in (passages[:1], passages[:3], passages):
        assert template.render(question, docs) == build_eval_prompt(dataset, question, docs)
    before, q, after = template.render_parts(question, passages[:2])
    assert q == question and before + q + after == build_eval_prompt(dataset, question, passages[:2])


# ------------------------------------------------------------------------------------------------ methods


def test_build_methods_ablation_grid_sweep_router(tmp_path: Path) -> None:
    cfg = _config(tmp_path, tmp_path, methods=None)
    assert [m.name for m in build_methods(cfg)][:2] == ["wo-rag", "sr-rag"]
    cfg = _config(tmp_path, tmp_path, triggers=["rind", "low-confidence"], queries=["attention", "input"], grid=True)
    assert [m.name for m in build_methods(cfg)] == ["rind+attention", "rind+input", "low-confidence+attention", "low-confidence+input"]
    cfg = _config(tmp_path, tmp_path, triggers=["dragin"], queries=["masked-sentence", "last-tokens"])
    assert [m.name for m in build_methods(cfg)] == ["rind+masked-sentence", "rind+last-tokens"]
    # the initial retrieval and the context policy are in the name: their rows never share a file with the plain ones
    cfg = _config(tmp_path, tmp_path, triggers=["rind"], queries=["next-hop"], initial_retrieval=True, context="rerank:keep=4")
    assert [(m.name, m.initial_retrieval, m.context) for m in build_methods(cfg)] == [
        ("rind+next-hop@ir@context=rerank:keep=4", True, "rerank:keep=4")]
    cfg = _config(tmp_path, tmp_path, methods=["dragin", "flare"], initial_retrieval=True, context="accumulate")
    assert [m.name for m in build_methods(cfg)] == ["dragin@ir@context=accumulate", "flare@context=accumulate"]
    with pytest.raises(InvalidOptionError, match="keep must be an integer"):
        build_methods(_config(tmp_path, tmp_path, methods=["sr-rag"], context="rerank:keep=x"))
    cfg = _config(tmp_path, tmp_path, methods=["wo-rag", "dragin", "flare"], sweep=("theta", [0.5, 1.0]))
    assert [m.name for m in build_methods(cfg)] == ["wo-rag", "dragin@theta=0.5", "dragin@theta=1", "flare@theta=0.5", "flare@theta=1"]
    cfg = _config(tmp_path, tmp_path, dataset="retrievalqa")
    assert [m.name for m in build_methods(cfg)] == ["wo-rag", "sr-rag+ta-are"]
    cfg = _config(tmp_path, tmp_path, dataset="retrievalqa", ta_are_demos="similar")  # rows of their own
    assert [m.name for m in build_methods(cfg)] == ["wo-rag", "sr-rag+ta-are-similar"]
    with pytest.raises(ValueError):
        build_methods(_config(tmp_path, tmp_path, methods=["wo-rag"], sweep=("theta", [1.0])))
    # the answer check's theta: only the presets with a check are swept, each row file named with it
    cfg = _config(tmp_path, tmp_path, methods=["sr-rag", "look-again-choose"], sweep=("check_theta", [0, 1]))
    assert [(m.name, m.check_theta) for m in build_methods(cfg)] == [
        ("sr-rag", None), ("look-again-choose@check_theta=0", 0.0), ("look-again-choose@check_theta=1", 1.0)]
    with pytest.raises(ValueError, match="check_theta is the answer check's"):
        build_methods(_config(tmp_path, tmp_path, methods=["sr-rag"], sweep=("check_theta", [1.0])))
    with pytest.raises(ValueError):
        build_methods(_config(tmp_path, tmp_path, triggers=["rind", "never"], queries=["a", "b", "c"]))


# ------------------------------------------------------------------------------------------------ end to end


@pytest.mark.slow
def test_eval_end_to_end_files_metrics_and_resume(tiny_lm: ActiveLM, hotpot_dir: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _config(hotpot_dir, tmp_path, methods=["wo-rag", "sr-rag", "dragin"])
    report = run_eval(cfg, lm=tiny_lm, progress=False)
    out = tmp_path / "out" / "hotpotqa" / "tiny-llama"
    assert report.out_dir == out
    for name in ("wo-rag", "sr-rag", "dragin"):
        rows = _jsonl(out / f"{name}.jsonl")
        assert [r["id"] for r in rows] == ["q1", "q2", "q3"]
        for r in rows:
            assert {"id", "question", "prediction", "answer", "gold", "metrics", "trace", "decisions", "wall_time_s"} <= set(r)
            assert {"em", "f1", "precision", "recall", "retrievals", "generated_tokens"} <= set(r["metrics"])
            assert r["metrics"]["generated_tokens"] >= 1
            assert r["wall_time_s"] > 0
            # The engine appended "So the answer is" when the random model did not write it.
            assert "so the answer is" in r["prediction"].lower()
    sr = _jsonl(out / "sr-rag.jsonl")
    assert all(r["metrics"]["retrievals"] == 1 and len(r["trace"]) == 1 for r in sr)
    assert all(r["trace"][0]["query"] == r["question"] for r in sr)
    assert all(r["metrics"]["gold_recall"] is not None for r in sr)
    assert all(r["metrics"]["retrievals"] == 0 for r in _jsonl(out / "wo-rag.jsonl"))
    for name in ("results.md", "summary.json", "methods.png"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["methods"]) == {"wo-rag", "sr-rag", "dragin"}
    for m in summary["methods"].values():
        assert {"em", "f1", "precision", "recall", "retrievals_per_question", "generated_tokens",
                "wall_time_per_question_s", "n"} <= set(m)
        assert m["n"] == 3
    assert summary["methods"]["sr-rag"]["retrievals_per_question"] == 1
    assert summary["methods"]["sr-rag"]["gold_hit_rate"] is not None
    assert "| sr-rag |" in report.markdown and (out / "results.md").read_text() == report.markdown
    # sr-rag ran, so every other method is compared with it, question by question, on EM and F1
    assert "## Paired differences against sr-rag" in report.markdown
    assert [(d["method"], d["metric"], d["n"]) for d in summary["paired"]] == [
        ("wo-rag", "em", 3), ("dragin", "em", 3), ("wo-rag", "f1", 3), ("dragin", "f1", 3)]
    # HotpotQA's records (IRCoT's format) carry no question type: its questions are grouped by form instead
    # (yes/no, A or B, other), and a breakdown appears only when they fall into two groups or more
    forms = {t["question_type"] for t in summary["by_type"]}
    assert forms <= {"yes/no", "A or B", "other"}
    assert (len(forms) >= 2) == ("## By question type" in report.markdown)
    assert report.index["loaded_from_cache"] is False

    # Resume: finished questions are not rerun (the retriever is never called again, the files keep 3 rows);
    # the index comes from the cache.
    calls: list[str] = []
    original = runner_mod._TimedRetriever.retrieve

    def spy(self: Any, query: str, k: int) -> list[Passage]:
        calls.append(query)
        return original(self, query, k)

    monkeypatch.setattr(runner_mod._TimedRetriever, "retrieve", spy)
    again = run_eval(_config(hotpot_dir, tmp_path, methods=["wo-rag", "sr-rag", "dragin"]), lm=tiny_lm, progress=False)
    assert calls == []
    assert again.index["loaded_from_cache"] is True
    assert len(_jsonl(out / "sr-rag.jsonl")) == 3
    assert again.summary["sr-rag"] == report.summary["sr-rag"]

    # Drop one finished row and add a torn line: only that question is rerun.
    rows = _jsonl(out / "sr-rag.jsonl")
    (out / "sr-rag.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:2]) + '{"id": "q3", "trunc', encoding="utf-8")
    with pytest.warns(UserWarning, match="dropped 1 row"):
        run_eval(_config(hotpot_dir, tmp_path, methods=["sr-rag"]), lm=tiny_lm, progress=False)
    assert calls == ["What was Peter Schmeichel voted in 1992?"]
    assert [r["id"] for r in _jsonl(out / "sr-rag.jsonl")] == ["q1", "q2", "q3"]

    # --no-resume reruns everything; other settings (max_new_tokens) do not reuse rows.
    calls.clear()
    run_eval(_config(hotpot_dir, tmp_path, methods=["sr-rag"], resume=False), lm=tiny_lm, progress=False)
    assert len(calls) == 3 and len(_jsonl(out / "sr-rag.jsonl")) == 3
    calls.clear()
    cfg = _config(hotpot_dir, tmp_path, methods=["sr-rag"])
    cfg.max_new_tokens = MAX_NEW + 1
    with pytest.warns(UserWarning, match="other settings"):
        run_eval(cfg, lm=tiny_lm, progress=False)
    assert len(calls) == 3


@pytest.mark.slow
def test_eval_sweep_one_row_per_theta(tiny_lm: ActiveLM, hotpot_dir: Path, tmp_path: Path) -> None:
    cfg = _config(hotpot_dir, tmp_path, methods=["dragin"], sweep=("theta", [0.0, 1e9]), limit=2)
    report = run_eval(cfg, lm=tiny_lm, progress=False)
    assert [(r["method"], r["value"]) for r in report.sweep] == [("dragin", 0.0), ("dragin", 1e9)]
    assert all({"em", "f1", "retrievals_per_question", "trigger_fire_rate", "n"} <= set(r) for r in report.sweep)
    # theta = 0 fires on the first content word of every segment (up to max_retrievals); 1e9 never fires.
    assert report.sweep[0]["retrievals_per_question"] > 0
    assert report.sweep[1]["retrievals_per_question"] == 0
    rows = _jsonl(report.files["dragin@theta=1e+09"])
    assert all(r["decisions"]["checks"] >= 1 and r["decisions"]["fired"] == 0 for r in rows)
    summary = json.loads(report.files["summary"].read_text())
    assert len(summary["sweep"]) == 2
    # results.md and summary.json say which threshold each method ran with, and where it came from
    assert summary["thresholds"]["dragin@theta=1e+09"] == [{"theta": 1e9, "source": "user", "n": 2}]
    assert "Thresholds: dragin@theta=0 theta 0 (user); dragin@theta=1e+09 theta 1e+09 (user)" in report.markdown
    assert report.files["sweep_plot"].is_file()


def test_eval_sweeps_the_answer_checks_theta(tiny_lm: ActiveLM, hotpot_dir: Path, tmp_path: Path) -> None:
    cfg = _config(hotpot_dir, tmp_path, methods=["look-again-grounded"], sweep=("check_theta", [0.0, 1.0]), limit=2)
    report = run_eval(cfg, lm=tiny_lm, progress=False)
    never, always = (_jsonl(report.files[f"look-again-grounded@check_theta={t}"]) for t in (0, 1))
    assert [r["answer_check"]["theta"] for r in never + always] == [0.0, 0.0, 1.0, 1.0]
    assert never[0]["engine_key"] != always[0]["engine_key"]
    # theta 1 looks again after every answer with a span; theta 0 only where the answer has none
    assert all(r["answer_check"]["fired"] == (r["answer_check"]["draft"]["tokens"] == 0) for r in never)
    assert all(r["answer_check"]["fired"] for r in always if r["answer_check"]["draft"]["tokens"] > 0
               and r["answer_check"]["draft"]["answer"].lower() not in ("yes", "no"))


def test_eval_ablation_trigger_query(tiny_lm: ActiveLM, hotpot_dir: Path, tmp_path: Path) -> None:
    cfg = _config(hotpot_dir, tmp_path, triggers=["fixed-length"], queries=["input"], limit=1)
    cfg.max_new_tokens = 20  # one full 16-token window, then a retrieval with the question
    report = run_eval(cfg, lm=tiny_lm, progress=False)
    assert list(report.summary) == ["fixed-length+input"]
    row = report.rows["fixed-length+input"][0]
    assert row["metrics"]["retrievals"] >= 1
    assert all(t["query"] == row["question"] for t in row["trace"])


def test_eval_retrievalqa_router(tiny_lm: ActiveLM, rqa_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from active_rag.components.routing import TaAreRouter

    seen_system: list[str | None] = []

    def decide(self: Any, question: str) -> RouteDecision:
        seen_system.append(self.model.system_prompt)
        return RouteDecision(retrieve="Jenufa" in question, router="ta-are", raw_output="[Yes]." if "Jenufa" in question else "[No].")

    monkeypatch.setattr(TaAreRouter, "decide", decide)
    cfg = _config(rqa_dir, tmp_path, dataset="retrievalqa")
    report = run_eval(cfg, lm=tiny_lm, progress=False)
    assert list(report.summary) == ["wo-rag", "sr-rag+ta-are"]
    assert seen_system == ["You are a helpful assistant to answer questions."] * 2
    assert tiny_lm.system_prompt is None  # restored
    rows = {r["id"]: r for r in report.rows["sr-rag+ta-are"]}
    # Routed to retrieval: the question's own first 5 contexts, whatever the query; routed away: none.
    assert rows["r1"]["trace"][0]["passage_ids"] == [f"r1#{i}" for i in range(1, 6)]
    assert rows["r1"]["route"]["retrieve"] is True and rows["r1"]["route_authors_reading"] is True
    assert rows["r2"]["trace"] == [] and rows["r2"]["route"]["retrieve"] is False
    s = report.summary["sr-rag+ta-are"]
    assert {"match", "match_folded", "retrieval_accuracy", "decision_precision", "decision_recall", "decision_f1"} <= set(s)
    assert s["retrieval_accuracy"] == 0.5 and s["decision_precision"] == 1.0
    assert report.summary["wo-rag"]["retrieval_accuracy"] == 0.0
    # RetrievalQA prompts carry no CoT answer phrase: the engine appends nothing.
    assert all("so the answer is" not in r["prediction"].lower() for r in report.rows["wo-rag"])
    # RetrievalQA's questions are grouped by source, in the slice's order, for every method
    assert [(t.method, t.question_type, t.n) for t in report.by_type] == [
        ("wo-rag", "triviaqa", 1), ("wo-rag", "freshqa", 1), ("sr-rag+ta-are", "triviaqa", 1), ("sr-rag+ta-are", "freshqa", 1)]
    assert "## By question type" in report.markdown and "| triviaqa (1) | freshqa (1) |" in report.markdown
    assert json.loads(report.files["summary"].read_text())["by_type"][0]["metric"] == "match"


def test_index_cache_key_follows_the_corpus(hotpot_dir: Path, tmp_path: Path) -> None:
    index, folder, loaded = load_corpus_index("hotpotqa", hotpot_dir, tmp_path / "idx")
    assert not loaded and folder.name.startswith("hotpotqa-") and len(index) == 5
    again, folder2, loaded2 = load_corpus_index("hotpotqa", hotpot_dir, tmp_path / "idx")
    assert loaded2 and folder2 == folder
    assert [p.id for p in again.retrieve("Danish footballer", 2)] == [p.id for p in index.retrieve("Danish footballer", 2)]
    with open(hotpot_dir / "hotpotqa/corpus.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"id": "p6", "title": "New", "text": "A new passage."}) + "\n")
    grown, folder3, loaded3 = load_corpus_index("hotpotqa", hotpot_dir, tmp_path / "idx")
    assert not loaded3 and folder3 != folder and len(grown) == 6


# ------------------------------------------------------------------------------------------------ CLI


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="active-rag")
    register(parser.add_subparsers(dest="command"))
    return parser


def test_register_adds_eval_and_bench(capsys: pytest.CaptureFixture[str]) -> None:
    parser = _parser()
    args = parser.parse_args(["eval", "--dataset", "hotpotqa", "--methods", "dragin,flare", "--sweep", "theta=0.5,1,1.5",
                              "--no-resume", "--limit", "5"])
    assert callable(args.func)
    assert args.methods == ["dragin", "flare"] and args.sweep == ("theta", [0.5, 1.0, 1.5])
    assert args.resume is False and args.limit == 5 and args.model == "qwen2.5-coder-0.5b" and args.top_k == 3
    args = parser.parse_args(["bench", "--tokens", "64,256"])
    assert callable(args.func) and args.tokens == [64, 256] and args.model == "smollm2"
    for command in ("eval", "bench"):
        with pytest.raises(SystemExit) as exc:
            parser.parse_args([command, "--help"])
        assert exc.value.code == 0
        assert "--model" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        parser.parse_args(["eval", "--dataset", "hotpotqa", "--sweep", "theta"])


def test_cli_eval_runs(tiny_lm: ActiveLM, hotpot_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(ActiveLM, "load", classmethod(lambda cls, name=None, **kw: tiny_lm))
    args = _parser().parse_args(["eval", "--dataset", "hotpotqa", "--data-dir", str(hotpot_dir), "--methods", "wo-rag",
                                 "--out", str(tmp_path / "cli"), "--max-new-tokens", "8", "--limit", "2",
                                 "--index-cache", str(tmp_path / "idx"), "--no-progress"])
    assert args.func(args) == 0
    printed = capsys.readouterr().out
    assert "| wo-rag |" in printed
    assert (tmp_path / "cli/hotpotqa/tiny-llama/wo-rag.jsonl").is_file()


@pytest.mark.slow
def test_a_calibration_cached_between_runs_is_named_and_keeps_the_paper_rows(
        tiny_lm: ActiveLM, hotpot_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`eval --methods dragin` uses a calibration cached since the last run (theta="auto"): results.md says so,
    and the rows answered at the profile's theta are set aside, not deleted, so switching back resumes."""
    from active_rag.components.thresholds import Calibration, save_calibration
    from active_rag.components.prompt_layout import resolve_prompt_mode
    from active_rag.components.triggers import RindTrigger

    monkeypatch.setenv("ACTIVE_RAG_CACHE", str(tmp_path / "cache"))
    cfg = _config(hotpot_dir, tmp_path, methods=["dragin"], limit=2)
    paper = run_eval(cfg, lm=tiny_lm, progress=False)
    assert paper.thresholds["dragin"] == [{"theta": 1.2, "source": "profile:hotpotqa", "n": 2}]
    assert "Thresholds: dragin theta 1.2 (profile:hotpotqa)" in paper.markdown

    mode = resolve_prompt_mode("auto", tiny_lm.name)
    save_calibration(Calibration(model=tiny_lm.name, trigger="rind", theta=1e9, target_retrievals_per_question=0.0,
                                 fire_fraction=0.0, questions=2, checks=2, profile="hotpotqa", prompt_mode=mode),
                     RindTrigger())
    with pytest.warns(UserWarning, match="other settings"):
        calibrated = run_eval(cfg, lm=tiny_lm, progress=False)
    assert calibrated.thresholds["dragin"] == [{"theta": 1e9, "source": calibrated.rows["dragin"][0]["threshold_source"],
                                                 "n": 2}]
    assert calibrated.rows["dragin"][0]["threshold_source"].startswith("calibrated:")
    assert "Thresholds: dragin theta 1e+09 (calibrated)" in calibrated.markdown
    assert calibrated.summary["dragin"]["retrievals_per_question"] == 0

    (tmp_path / "cache" / "calibration.json").unlink()
    with pytest.warns(UserWarning) as caught:
        again = run_eval(cfg, lm=tiny_lm, progress=False)
    messages = " ".join(str(w.message) for w in caught)
    assert "resumed 2 row(s) set aside earlier" in messages and "other-settings" in messages
    assert [r["wall_time_s"] for r in again.rows["dragin"]] == [r["wall_time_s"] for r in paper.rows["dragin"]]


def test_ta_are_date_is_pinned_recorded_and_part_of_the_resume_key(tiny_lm: ActiveLM, rqa_dir: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 25: rows never depend on the day they ran; another date is another setting, answered again."""
    import datetime as dt

    from active_rag.evaluation.config import EVAL_TODAY
    from active_rag.components.routing import TaAreRouter

    prompts: list[str] = []

    def decide(self: Any, question: str) -> RouteDecision:
        prompts.append(self.prompt(question))
        return RouteDecision(retrieve=False, router="ta-are", raw_output="[No].")

    monkeypatch.setattr(TaAreRouter, "decide", decide)

    class Tomorrow(dt.date):
        @classmethod
        def today(cls) -> dt.date:
            return dt.date(2031, 1, 2)

    monkeypatch.setattr(dt, "date", Tomorrow)  # the machine's clock must not reach the prompt
    first = run_eval(_config(rqa_dir, tmp_path, dataset="retrievalqa", methods=["sr-rag"]), lm=tiny_lm, progress=False)
    rows = first.rows["sr-rag+ta-are"]
    assert all(f"Today is {EVAL_TODAY}." in p for p in prompts) and all(r["today"] == EVAL_TODAY for r in rows)
    prompts.clear()
    again = run_eval(_config(rqa_dir, tmp_path, dataset="retrievalqa", methods=["sr-rag"]), lm=tiny_lm, progress=False)
    assert prompts == [] and [r["engine_key"] for r in again.rows["sr-rag+ta-are"]] == [r["engine_key"] for r in rows]
    with pytest.warns(UserWarning, match="other settings"):  # the pinned date's rows are set aside, not lost
        other = run_eval(_config(rqa_dir, tmp_path, dataset="retrievalqa", methods=["sr-rag"], today="2024-03-01"),
                         lm=tiny_lm, progress=False)
    assert prompts and all("Today is 2024-03-01." in p for p in prompts)  # answered again, not resumed
    assert {r["today"] for r in other.rows["sr-rag+ta-are"]} == {"2024-03-01"}
    assert other.rows["sr-rag+ta-are"][0]["engine_key"] != rows[0]["engine_key"]
    with pytest.raises(InvalidOptionError, match="today"):
        _config(rqa_dir, tmp_path, dataset="retrievalqa", today="notadate")


def test_the_eval_bar_is_drawn_on_a_terminal_only(tiny_lm: ActiveLM, hotpot_dir: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A log file or a pipe (the suite's captured stderr is neither a terminal) gets no bar, even with progress on."""
    run_eval(_config(hotpot_dir, tmp_path, methods=["wo-rag"], limit=2), lm=tiny_lm, progress=True)
    err = capsys.readouterr().err
    assert "q/s" not in err and "wo-rag:" not in err
