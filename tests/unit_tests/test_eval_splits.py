"""``active-rag eval`` beyond the shared dev slices: HotpotQA's ``--split dev-b``, any ``--data-dir`` (a union corpus:
rows keyed apart), ``--hide-titles`` (every passage titled ``doc-<n>.txt``, gold still found by its real title),
the cost of a question in the rows and tables, the breakdown by question form, and how often a question offers
options (``options_coverage``). On in-test fixtures with the tiny random model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from active_rag import ActiveLM
from active_rag.errors import InvalidOptionError
from active_rag.evaluation.datasets import load_dataset, questions_path
from active_rag.evaluation.method_engines import SHARED_CORPUS_PASSAGES, _engine_key, build_engine, load_corpus_index
from active_rag.evaluation.runner import EvalConfig, run_eval
from research.options_coverage import gold_option_match, main as coverage_main, options_coverage
from tests.unit_tests.test_eval_runner import _hotpot, _jsonl, _parser, _write_jsonl

CORPUS = [
    {"id": "p1", "title": "Tesla", "text": "Tesla was founded in 2003 by engineers in California."},
    {"id": "p2", "title": "Ford", "text": "Ford was founded in 1903 by Henry Ford in Michigan."},
    {"id": "p3", "title": "Seine", "text": "The Seine is a river that flows through Paris."},
    {"id": "p4", "title": "Loire", "text": "The Loire is the longest river in France."},
    {"id": "p5", "title": "Hamlet", "text": "Hamlet is a tragedy written by William Shakespeare."},
]


@pytest.fixture()
def data_dir(tmp_path: Path) -> Path:
    """dev: one bridge question; dev-b: a choice question, a yes/no one and one that names two options it does not
    offer (an amount is asked for)."""
    root = tmp_path / "data"
    _write_jsonl(root / "hotpotqa/questions_dev.jsonl", [
        _hotpot("d1", "Who wrote the tragedy Hamlet?", "William Shakespeare", ["Hamlet"], "Ford")])
    _write_jsonl(root / "hotpotqa/questions_dev_b.jsonl", [
        _hotpot("b1", "Which was founded first, Tesla or Ford?", "Ford", ["Tesla", "Ford"], "Hamlet"),
        _hotpot("b2", "Are the Seine and the Loire both rivers?", "yes", ["Seine", "Loire"], "Tesla"),
        _hotpot("b3", "How much did Tesla or Ford pay Henry Ford?", "nothing", ["Ford"], "Seine"),
    ])
    _write_jsonl(root / "hotpotqa/corpus.jsonl", CORPUS)
    return root


def _config(data_dir: Path, tmp_path: Path, **kw: Any) -> EvalConfig:
    return EvalConfig(dataset="hotpotqa", data_dir=data_dir, out_dir=tmp_path / "out", index_cache=tmp_path / "indexes",
                      max_new_tokens=10, plots=False, **kw)


def test_the_dev_b_split_reads_its_own_question_file(data_dir: Path) -> None:
    assert questions_path("hotpotqa", data_dir, split="dev-b").name == "questions_dev_b.jsonl"
    examples = load_dataset("hotpotqa", data_dir, split="dev-b")
    assert [e.id for e in examples] == ["b1", "b2", "b3"] and examples[0].gold_passage_ids == ["p1", "p2"]
    assert [e.id for e in load_dataset("hotpotqa", data_dir)] == ["d1"]  # dev stays the default
    with pytest.raises(InvalidOptionError, match="2wikimultihopqa has no split 'dev-b': use one of dev"):
        load_dataset("2wikimultihopqa", data_dir, split="dev-b")


def test_eval_dev_b_writes_its_rows_apart_with_their_cost_and_a_breakdown_by_form(
        tiny_lm: ActiveLM, data_dir: Path, tmp_path: Path) -> None:
    report = run_eval(_config(data_dir, tmp_path, methods=["wo-rag", "sr-rag"], split="dev-b"), lm=tiny_lm, progress=False)
    out = tmp_path / "out" / "hotpotqa-dev-b" / "tiny-llama"
    assert report.out_dir == out and not (tmp_path / "out" / "hotpotqa").exists()
    rows = _jsonl(out / "sr-rag.jsonl")
    assert [r["id"] for r in rows] == ["b1", "b2", "b3"]
    for r in rows:  # the engine's count, the same as each retrieval's in the trace
        assert r["retriever_calls"] == sum(t["retriever_calls"] for t in r["trace"]) == 1
        assert r["prompt_tokens"]["read"] == r["prompt_tokens"]["cached"] + r["prompt_tokens"]["prefilled"] > 0
    assert all(r["retriever_calls"] == 0 for r in _jsonl(out / "wo-rag.jsonl"))
    assert report.summary["sr-rag"]["retriever_calls_per_question"] == 1.0
    assert report.summary["sr-rag"]["prompt_tokens_per_question"] == pytest.approx(
        sum(r["prompt_tokens"]["read"] for r in rows) / 3)
    markdown = (out / "results.md").read_text()
    assert markdown.startswith("# hotpotqa-dev-b / tiny-llama (3 questions)")
    assert "| Calls/q | Prompt tok/q |" in markdown
    # the slice carries no bridge/comparison label: its questions are grouped by form
    assert "| Method | A or B (1) | yes/no (1) | other (1) |" in markdown
    assert {(t.question_type, t.n) for t in report.by_type if t.method == "sr-rag"} == {("A or B", 1), ("yes/no", 1), ("other", 1)}


def test_cli_split_and_hide_titles_flags(tiny_lm: ActiveLM, data_dir: Path, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(ActiveLM, "load", classmethod(lambda cls, name=None, **kw: tiny_lm))
    common = ["eval", "--dataset", "hotpotqa", "--data-dir", str(data_dir), "--methods", "sr-rag", "--out",
              str(tmp_path / "cli"), "--max-new-tokens", "6", "--index-cache", str(tmp_path / "idx"), "--no-progress",
              "--no-plots"]
    args = _parser().parse_args([*common, "--split", "dev-b", "--hide-titles", "--limit", "1"])
    assert args.func(args) == 0
    row = _jsonl(tmp_path / "cli/hotpotqa-dev-b/tiny-llama/sr-rag.jsonl")[0]
    assert all(title.startswith("doc-") for title in row["trace"][0]["titles"])
    assert "titles hidden" in capsys.readouterr().out
    args = _parser().parse_args([*common, "--split", "dev-c"])
    assert args.func(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "hotpotqa has no split 'dev-c': use one of dev, dev-b" in err
    args = _parser().parse_args([*common[:2], "retrievalqa", *common[3:], "--hide-titles"])
    assert args.func(args) == 2 and "drop --hide-titles" in capsys.readouterr().err


def test_hidden_titles_are_indexed_and_shown_but_gold_is_found_by_the_real_title(
        tiny_lm: ActiveLM, data_dir: Path, tmp_path: Path) -> None:
    index, folder, _ = load_corpus_index("hotpotqa", data_dir, tmp_path / "idx", hide_titles=True)
    assert [p.title for p in index.passages] == [f"doc-{n}.txt" for n in range(5)]
    assert folder.name.startswith("hotpotqa-notitles-")
    plain, plain_folder, _ = load_corpus_index("hotpotqa", data_dir, tmp_path / "idx")
    assert plain_folder != folder and plain.passages[0].title == "Tesla"
    # a passage is found by its text and shown with the hidden title; a word of its real title alone finds nothing
    assert [(p.id, p.title) for p in index.retrieve("longest river in France", 1)] == [("p4", "doc-3.txt")]
    assert index.retrieve("Shakespeare tragedy", 1)[0].title == "doc-4.txt"
    _write_jsonl(data_dir / "hotpotqa/corpus.jsonl", [*CORPUS, {"id": "p6", "title": "Othello", "text": "A play."}])
    assert [p.id for p in load_corpus_index("hotpotqa", data_dir, tmp_path / "idx3")[0].retrieve("Othello", 1)] == ["p6"]
    assert load_corpus_index("hotpotqa", data_dir, tmp_path / "idx3", hide_titles=True)[0].retrieve("Othello", 1) == []
    _write_jsonl(data_dir / "hotpotqa/corpus.jsonl", CORPUS)
    report = run_eval(_config(data_dir, tmp_path, methods=["sr-rag"], split="dev-b", hide_titles=True), lm=tiny_lm,
                      progress=False)
    rows = report.rows["sr-rag"]
    assert rows[0]["gold_passage_ids"] == ["p1", "p2"]  # resolved by the real titles
    assert all(t.startswith("doc-") for r in rows for t in r["trace"][0]["titles"])
    assert all(r["metrics"]["gold_recall"] is not None for r in rows)
    assert "titles hidden (doc-<n>.txt)" in report.markdown


def test_rows_over_another_corpus_or_hidden_titles_are_keyed_apart(tiny_lm: ActiveLM, data_dir: Path, tmp_path: Path) -> None:
    """A union corpus's rows in the same output folder never resume the shared corpus's; the shared corpora's rows
    keep the keys they were written with."""
    from active_rag.evaluation.config import build_methods

    config = _config(data_dir, tmp_path, methods=["sr-rag"])
    spec = build_methods(config)[0]
    rag = build_engine(spec, tiny_lm, load_corpus_index("hotpotqa", data_dir, tmp_path / "idx")[0], config)
    shared = SHARED_CORPUS_PASSAGES["hotpotqa"]
    assert _engine_key(rag, config, "m", shared) == _engine_key(rag, config, "m")  # as before corpora were told apart
    assert _engine_key(rag, config, "m", 20_200) != _engine_key(rag, config, "m", shared)
    hidden = _config(data_dir, tmp_path, methods=["sr-rag"], hide_titles=True)
    assert _engine_key(rag, hidden, "m", shared) != _engine_key(rag, config, "m", shared)
    # end to end: the same questions over a bigger corpus, into the same folder, are answered again
    first = run_eval(_config(data_dir, tmp_path, methods=["sr-rag"]), lm=tiny_lm, progress=False)
    union = tmp_path / "union"
    _write_jsonl(union / "hotpotqa/questions_dev.jsonl", [json.loads(line) for line in
                                                          (data_dir / "hotpotqa/questions_dev.jsonl").read_text().splitlines()])
    _write_jsonl(union / "hotpotqa/corpus.jsonl", [*CORPUS, {"id": "x1", "title": "Othello", "text": "Othello is a play."}])
    with pytest.warns(UserWarning, match="other settings"):
        second = run_eval(_config(union, tmp_path, methods=["sr-rag"]), lm=tiny_lm, progress=False)
    assert first.rows["sr-rag"][0]["engine_key"] != second.rows["sr-rag"][0]["engine_key"]
    assert "corpus: 6 passages" in second.markdown


def test_options_coverage_counts_questions_with_options_and_gold_among_them(data_dir: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    coverage = options_coverage(load_dataset("hotpotqa", data_dir, split="dev-b"))
    # b1 offers Tesla or Ford (gold Ford); b2 has no "or"; b3 asks "how much": no options
    assert coverage.to_dict() == {"questions": 3, "with_options": 1, "gold_exact": 1, "gold_named": 1}
    assert gold_option_match("Adeline Virginia Woolf", ("Emma Bull", "Virginia Woolf")) == "named"
    assert gold_option_match("The Ford", ("Tesla", "Ford")) == "exact"
    assert gold_option_match("musician", ("William Blake Herron", "John Carpenter")) is None
    assert coverage_main(["--dataset", "hotpotqa", "--split", "dev-b", "--data-dir", str(data_dir)]) == 0
    assert capsys.readouterr().out == ("hotpotqa dev-b: 3 questions, 1 offer options; the gold answer is an option on "
                                       "1 (exact) / 1 (names it)\n")
    with pytest.raises(SystemExit) as exit_:
        coverage_main(["--dataset", "strategyqa", "--split", "dev-b", "--data-dir", str(data_dir)])
    assert exit_.value.code == 2 and "strategyqa has no split 'dev-b'" in capsys.readouterr().err


def test_focus_rows_from_before_comparison_looks_were_read_in_full_answer_only_those_questions_again(
        tiny_lm: ActiveLM, data_dir: Path, tmp_path: Path) -> None:
    """Rows of ``focus`` written before comparison looks were read in full (``focus:compare=0``'s key) resume under
    ``focus``: a row whose look was not sent to compare is carried over, a comparison look's question is answered
    again, and the rows it replaces are set aside."""
    from active_rag.components.context import FocusContext

    with pytest.MonkeyPatch.context() as mp:  # focus as it was: comparison looks focused like any other
        defaults = FocusContext.__init__.__defaults__
        mp.setattr(FocusContext.__init__, "__defaults__", (*defaults[:-1], 0))
        old = run_eval(_config(data_dir, tmp_path, methods=["look-again-choose"], split="dev-b", context="focus"),
                       lm=tiny_lm, progress=False)
    out = old.out_dir
    written = _jsonl(out / "look-again-choose@context=focus.jsonl")
    looks = {r["id"]: next((t.get("choice") for t in r["trace"] if t.get("choice")), None) for r in written}
    assert looks["b1"] == "compare" and any(way != "compare" for way in looks.values())
    run_eval(_config(data_dir, tmp_path, methods=["look-again-choose"], split="dev-b", context="focus"),
             lm=tiny_lm, progress=False)
    rows = {r["id"]: r for r in _jsonl(out / "look-again-choose@context=focus.jsonl")}
    for qid, way in looks.items():
        old_row = next(r for r in written if r["id"] == qid)
        assert ("settled_from" in rows[qid]) == (way != "compare"), qid
        assert rows[qid]["engine_key"] != old_row["engine_key"]
    aside = [json.loads(line) for p in (out / "other-settings").rglob("*.jsonl") for line in p.read_text().splitlines()]
    assert len(aside) == len(written)  # nothing lost
