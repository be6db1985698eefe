"""The offline sweep of the answer check's theta and rule (issue 28) on hand-made rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from active_rag.types import Passage
from research.answer_check_sweep import against, main, sweep


def _conf(answer: str, min_prob: float, mean: float | None) -> dict:
    return {"answer": answer, "min_prob": min_prob, "mean_logprob": mean, "token": answer.split()[0] if answer else None,
            "tokens": len(answer.split())}


def _row(i: int, gold: str, draft: dict, second: dict | None, theta: float = 1.0) -> dict:
    return {"id": f"q{i}", "gold": [gold], "metrics": {"f1": 0.0},
            "answer_check": {"name": "answer-check", "theta": theta, "select": "min", "fired": True,
                             "draft": draft, "second": second, "kept": "draft"}}


ROWS = [
    # sure draft, right: no theta below 0.95 looks again
    _row(0, "Paris", _conf("Paris", 0.95, -0.05), _conf("Lyon", 0.99, -0.01)),
    # unsure wrong draft; the second is right and surer by both measures
    _row(1, "Terry Richardson", _conf("Annie Morton", 0.3, -0.9), _conf("Terry Richardson", 0.6, -0.4)),
    # mean prefers the second (wrong), min prefers the draft (right)
    _row(2, "Smith", _conf("Smith", 0.4, -0.5), _conf("Jones", 0.3, -0.2)),
    # no second answer (the retrieval found nothing new): the draft stands under every rule
    _row(3, "Oslo", _conf("Oslo", 0.2, -1.0), None),
]


def _cell(result: dict, theta: float, select: str, avoid_echo: bool = False) -> dict:
    return next(g for g in result["grid"] if (g["theta"], g["select"], g["avoid_echo"]) == (theta, select, avoid_echo))


def test_the_sweep_recomputes_what_each_rule_keeps() -> None:
    result = sweep(ROWS, "hotpotqa", thetas=(1.0, 0.5), rules=("mean", "min", "second"))
    assert result["n"] == 4
    assert result["draft"] == pytest.approx(75.0) and result["second"] == pytest.approx(50.0)
    assert result["oracle"] == pytest.approx(100.0)
    # theta 1: rows 0-2 look again (row 3 has nothing to look at)
    assert _cell(result, 1.0, "min") == {"theta": 1.0, "select": "min", "avoid_echo": False,
                                                "score": pytest.approx(75.0), "looked": 3}
    assert _cell(result, 1.0, "mean")["score"] == pytest.approx(50.0)  # keeps Lyon, Terry Richardson, Jones
    assert _cell(result, 1.0, "second")["score"] == pytest.approx(50.0)
    # theta 0.5: only rows 1 and 2 look again; min keeps Terry Richardson and Smith
    assert _cell(result, 0.5, "min") == {"theta": 0.5, "select": "min", "avoid_echo": False,
                                                "score": pytest.approx(100.0), "looked": 2}
    assert _cell(result, 0.5, "mean")["score"] == pytest.approx(75.0)


def test_the_sweep_avoids_an_answer_that_repeats_the_question() -> None:
    row = _row(0, "Terry Richardson", _conf("Annie Morton", 0.9, -0.1), _conf("Terry Richardson", 0.5, -0.7))
    row["question"] = "Who directed the film that starred Annie Morton?"
    result = sweep([row], "hotpotqa", thetas=(1.0,), rules=("min",))
    assert _cell(result, 1.0, "min", avoid_echo=True)["score"] == 100.0
    assert _cell(result, 1.0, "min", avoid_echo=False)["score"] == 0.0


def test_strategyqa_scores_accuracy() -> None:
    rows = [_row(0, "yes", _conf("no", 0.4, -0.9), _conf("yes", 0.8, -0.2))]
    result = sweep(rows, "strategyqa", thetas=(1.0,), rules=("min",))
    assert result["draft"] == 0.0 and result["grid"][0]["score"] == 100.0


def test_rows_of_another_theta_or_method_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="theta 1"):
        sweep([_row(0, "x", _conf("x", 0.9, -0.1), None, theta=0.5)], "hotpotqa")
    path = tmp_path / "sr-rag.jsonl"
    path.write_text(json.dumps({"id": "q0", "gold": ["x"], "metrics": {}}) + "\n")
    assert main(["--dataset", "hotpotqa", str(path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    good = tmp_path / "look-again.jsonl"
    good.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    assert main(["--dataset", "hotpotqa", "--limit", "2", str(good)]) == 0
    assert capsys.readouterr().out.startswith("2 questions; F1: draft 50.0, second 50.0, better of the two 100.0")


def test_the_grounded_rule_reads_each_prompts_passages_and_needs_the_corpus(tmp_path: Path) -> None:
    # the draft is surer but no passage of its prompt holds it; the second answer's prompt holds its answer
    row = _row(0, "Terry Richardson", _conf("Glen Smith", 0.9, -0.1), _conf("Terry Richardson", 0.5, -0.7))
    row["segments"] = [{"output_start": 0, "passage_ids": ["a"], "fired": True}]
    row["trace"] = [{"held_ids": ["a"]}, {"held_ids": ["a", "c"]}]
    corpus = {"a": Passage(id="a", title="Annie Morton", text="Annie Morton starred in Glow."),
              "c": Passage(id="c", title="Glow", text="Glow was directed by Terry Richardson.")}
    result = sweep([row], "hotpotqa", thetas=(1.0,), rules=("min", "grounded"), corpus=corpus)
    assert _cell(result, 1.0, "grounded")["score"] == 100.0 and _cell(result, 1.0, "min")["score"] == 0.0
    assert {g["select"] for g in sweep([row], "hotpotqa", thetas=(1.0,), rules=("min", "grounded"))["grid"]} == {"min"}
    data = tmp_path / "data" / "hotpotqa"
    data.mkdir(parents=True)
    (data / "corpus.jsonl").write_text("\n".join(json.dumps({"id": p.id, "title": p.title, "text": p.text})
                                                 for p in corpus.values()) + "\n")
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(row) + "\n")
    assert main([str(rows), "--dataset", "hotpotqa", "--data-dir", str(tmp_path / "data")]) == 0


def test_each_rule_pairs_with_a_baselines_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the baseline (retrieving once) got rows 1 and 2 right; "min" keeps Lyon, Terry Richardson, Smith, Oslo
    base = [{"id": f"q{i}", "metrics": {"f1": f1}} for i, f1 in enumerate((0.0, 1.0, 1.0, 0.0))]
    diffs = {d.method: d for d in against(ROWS, {"once": base}, "hotpotqa")}
    by_min = diffs["keep by min"]
    assert by_min.difference == pytest.approx(0.25) and (by_min.wins, by_min.losses) == (1, 0)
    assert diffs["draft"].difference == pytest.approx(0.25) and (diffs["draft"].wins, diffs["draft"].losses) == (2, 1)
    assert diffs["keep by second"].difference == pytest.approx(0.0) and diffs["keep by second"].losses == 1
    assert "keep by grounded" not in diffs  # no corpus: the grounded rules are left out
    assert all(d.baseline == "once" and d.n == 4 for d in diffs.values())
    rows, once = tmp_path / "look-again.jsonl", tmp_path / "once.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    once.write_text("".join(json.dumps(r) + "\n" for r in base))
    assert main([str(rows), "--dataset", "hotpotqa", "--against", f"once={once}", "--data-dir", str(tmp_path)]) == 0
    assert "| keep by min | once | +25.0 [" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        main([str(rows), "--dataset", "hotpotqa", "--against", str(once)])  # no label
    assert exit_.value.code == 2
