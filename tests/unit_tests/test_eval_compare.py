"""Rows of separate runs compared against two baselines (issue 28's evidence table)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from active_rag.evaluation.compare import compare_rows, format_comparison, main, with_evidence


def _row(qid: str, f1: float, *, passages: list[str], gold: list[str], position: int = 0, evidence: float | None = None) -> dict:
    metrics = {"em": f1, "f1": f1, "precision": f1, "recall": f1, "retrievals": 1, "retrieved": 1.0, "generated_tokens": 5,
               "checks": 0, "fired": 0, "gold_hits": 1}
    if evidence is not None:
        metrics.update(evidence_recall=evidence, final_passages=len(passages), new_evidence_hits=1, active_retrievals=1,
                       active_new_evidence_hits=1)
    return {"id": qid, "metrics": metrics, "wall_time_s": 1.0, "retrieval_time_s": 0.1, "amortized_s": 0.5,
            "gold_passage_ids": gold, "trace": [{"position": position, "passage_ids": passages}]}


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_single_round_rows_get_their_evidence_from_the_trace() -> None:
    row = with_evidence(_row("a", 1.0, passages=["g1", "x", "g2"], gold=["g1", "g2"]))
    assert row["metrics"]["evidence_recall"] == 1.0 and row["metrics"]["final_passages"] == 3
    assert with_evidence(_row("a", 1.0, passages=["g1"], gold=["g1", "g2"]))["metrics"]["evidence_recall"] == 0.0
    # a retrieval during generation: what the answer's prompt held is not derivable from the trace
    assert "evidence_recall" not in with_evidence(_row("a", 1.0, passages=["g1", "g2"], gold=["g1", "g2"], position=4))["metrics"]


def test_compare_pairs_every_file_with_each_baseline(tmp_path: Path) -> None:
    gold = ["g1", "g2"]
    files = {
        "k3": _write(tmp_path / "k3.jsonl", [_row(q, 0.0, passages=["g1", "x", "y"], gold=gold) for q in "abcd"]),
        "k6": _write(tmp_path / "k6.jsonl", [_row(q, s, passages=["g1", "g2"], gold=gold) for q, s in zip("abcd", [1, 0, 0, 0])]),
        "active": _write(tmp_path / "a.jsonl", [_row(q, s, passages=["g1", "g2"], gold=gold, position=0, evidence=1.0)
                                                for q, s in zip("abc", [1, 1, 0])]),  # question d not answered
    }
    summary, diffs = compare_rows(files, ["k3", "k6"], "hotpotqa")
    by = {(d.method, d.baseline): d for d in diffs}
    assert by[("active", "k3")].n == 3 and by[("active", "k3")].difference == pytest.approx(2 / 3)
    assert by[("active", "k6")].difference == pytest.approx(1 / 3) and by[("active", "k6")].wins == 1
    assert summary["k3"]["evidence_recall"] == 0.0 and summary["k6"]["evidence_recall"] == 1.0
    table = format_comparison(summary, diffs, ["k3", "k6"], "hotpotqa")
    line = next(l for l in table.splitlines() if l.startswith("| active |"))
    assert "| 3 | 66.7 | +66.7" in line and "+33.3" in line and "(n=3)" in line
    # the score where every gold passage was in the final prompt: k6 held them for all four (one right)
    assert summary["k6"]["score_all_gold"] == pytest.approx(0.25) and summary["k3"]["score_all_gold"] is None
    assert "F1 when all gold" in table.splitlines()[0]
    assert line.split(" | ")[9:11] == ["100.0", "66.7"]  # active: 2 of its 3 questions, all with the gold passages
    assert line.split(" | ")[6:8] == ["-", "-"]  # rows without their cost: no retriever calls, no prompt tokens


def test_compare_reports_the_cost_of_a_question(tmp_path: Path) -> None:
    """Retriever calls and prompt tokens read (from the prefix cache and prefilled) per question, from the rows."""
    def costed(qid: str, calls: int, cached: int, prefilled: int) -> dict:
        return {**_row(qid, 1.0, passages=["g1"], gold=["g1"]), "retriever_calls": calls,
                "prompt_tokens": {"cached": cached, "prefilled": prefilled}}

    files = {"linked": _write(tmp_path / "l.jsonl", [costed("a", 5, 100, 900), costed("b", 3, 0, 600)])}
    summary, diffs = compare_rows(files, [], "hotpotqa")
    assert summary["linked"]["retriever_calls_per_question"] == 4.0
    assert summary["linked"]["prompt_tokens_per_question"] == 800.0
    table = format_comparison(summary, diffs, [], "hotpotqa")
    head, _, line = table.splitlines()
    assert head.split(" | ")[4:6] == ["Calls/q", "Prompt tok/q"] and line.split(" | ")[4:6] == ["4.00", "800"]


def test_compare_cli_names_a_bad_label_or_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = _write(tmp_path / "r.jsonl", [_row("a", 1.0, passages=["g1"], gold=["g1"])])
    with pytest.raises(SystemExit) as err:
        main(["--dataset", "hotpotqa", f"one={rows}", "--baseline", "two"])
    assert err.value.code == 2 and "'two' is not one of the labels" in capsys.readouterr().err
    with pytest.raises(SystemExit) as err:
        main(["--dataset", "hotpotqa", f"one={tmp_path / 'missing.jsonl'}"])
    assert err.value.code == 2 and "No rows at" in capsys.readouterr().err
    assert main(["--dataset", "hotpotqa", f"one={rows}"]) == 0
    assert "| one | 1 | 100.0 |" in capsys.readouterr().out


def test_evidence_is_derived_only_for_a_single_round_method(tmp_path: Path) -> None:
    gold = ["g1", "g2"]
    mixed = [_row("a", 1.0, passages=["g1", "g2"], gold=gold), _row("b", 0.0, passages=["g1"], gold=gold, position=5)]
    files = {"mixed": _write(tmp_path / "m.jsonl", mixed)}
    summary, _ = compare_rows(files, [], "hotpotqa")
    assert summary["mixed"].get("evidence_recall") is None  # not the mean of the one derivable row


def test_compare_by_choice_adds_a_table_per_group_of_questions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--by choice``: one more table for the questions sr-rag-choose compares and one for those it links."""
    questions = {"a": "Who is older, Annie Morton or Terry Richardson?", "b": "Who directed the film that starred Annie Morton?"}

    def asked(qid: str, f1: float) -> dict:
        return {**_row(qid, f1, passages=["g1"], gold=["g1"]), "question": questions[qid]}

    base = _write(tmp_path / "b.jsonl", [asked("a", 0.0), asked("b", 0.0)])
    mine = _write(tmp_path / "m.jsonl", [asked("a", 1.0), asked("b", 0.0)])
    assert main(["--dataset", "hotpotqa", f"base={base}", f"mine={mine}", "--baseline", "base", "--by", "choice"]) == 0
    out = capsys.readouterr().out
    compare, links = out.split("choice = compare")[1].split("choice = links")
    assert "| mine | 1 | 100.0 | +100.0" in compare and "| mine | 1 | 0.0 | +0.0" in links


def test_compare_by_type_groups_rows_by_the_datasets_question_type(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--by type``: the row's ``type``, else the type the dataset's question file gives its id."""
    data = tmp_path / "data"
    (data / "pydocs" / "docs").mkdir(parents=True)
    (data / "pydocs" / "questions_dev.jsonl").write_text(
        json.dumps({"question_id": "b", "type": "python", "question_text": "Minimum Python of x?", "answers": ["3.10"],
                    "supporting_files": ["x.md"]}) + "\n", encoding="utf-8")
    base = _write(tmp_path / "b.jsonl", [{**_row("a", 0.0, passages=[], gold=[]), "type": "author"},
                                         _row("b", 0.0, passages=[], gold=[])])
    mine = _write(tmp_path / "m.jsonl", [{**_row("a", 1.0, passages=[], gold=[]), "type": "author"},
                                         _row("b", 0.0, passages=[], gold=[])])
    assert main(["--dataset", "pydocs", f"base={base}", f"mine={mine}", "--baseline", "base", "--by", "type",
                 "--data-dir", str(data)]) == 0
    out = capsys.readouterr().out
    author, python = out.split("type = author")[1].split("type = python")
    assert "| mine | 1 | 100.0 | +100.0" in author and "| mine | 1 | 0.0 | +0.0" in python


def test_the_cli_reads_every_column_on_the_questions_all_files_answered(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    gold = ["g1"]
    base = _write(tmp_path / "base.jsonl", [_row(q, 0.0, passages=["g1"], gold=gold) for q in "ab"])
    more = _write(tmp_path / "more.jsonl", [_row(q, 1.0 if q != "c" else 0.0, passages=["g1"], gold=gold) for q in "abc"])
    assert main(["--dataset", "hotpotqa", "--baseline", "base", f"base={base}", f"more={more}"]) == 0
    out, err = capsys.readouterr()
    assert "| more | 2 | 100.0 |" in out and "2 question(s) answered in every file" in err
    assert main(["--dataset", "hotpotqa", "--baseline", "base", "--all-rows", f"base={base}", f"more={more}"]) == 0
    assert "| more | 3 | 66.7 |" in capsys.readouterr().out


def test_settle_adds_a_column_of_the_rows_settled_by_the_answer_rules(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """``--settle LABEL``: LABEL's rows as the dates and versions rules settle them, the versions read from the options'
    own passages in the folder (no model call); a bad label exits 2."""
    data = tmp_path / "data"
    docs = data / "pydocs" / "docs"
    docs.mkdir(parents=True)
    (docs / "typer.md").write_text("# typer 0.12\n\nName: typer\nRequires-Python: >=3.11\n", encoding="utf-8")
    (docs / "Pygments.md").write_text("# Pygments 2.1\n\nName: Pygments\nRequires-Python: >=3.8\n", encoding="utf-8")
    (data / "pydocs" / "questions_dev.jsonl").write_text("", encoding="utf-8")
    question = "Which requires a newer minimum Python version, typer or Pygments?"
    row = {**_row("a", 0.0, passages=["typer.md", "Pygments.md"], gold=[]), "question": question, "gold": ["typer"],
           "prediction": "Pygments is newer. So the answer is Pygments.", "answer": "Pygments",
           "final_passage_ids": ["typer.md", "Pygments.md"]}
    base = _write(tmp_path / "b.jsonl", [row])
    assert main(["--dataset", "pydocs", f"base={base}", "--settle", "base", "--baseline", "base+rules",
                 "--data-dir", str(data)]) == 0
    out = capsys.readouterr().out
    assert "| base+rules | 1 | 100.0 |" in out and "| base | 1 | 0.0 | -100.0" in out
    with pytest.raises(SystemExit) as exit_info:
        main(["--dataset", "pydocs", f"base={base}", "--settle", "other", "--data-dir", str(data)])
    assert exit_info.value.code == 2
