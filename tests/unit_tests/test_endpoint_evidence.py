"""The server-against-local report (issue 26's evidence) from synthetic evaluation rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from research.endpoint_evidence import endpoint_evidence, format_evidence, main


def _row(i: int, f1: float, fired: bool, retrievals: int, answer: str, s: float) -> dict:
    trace = [{"position": 0, "query": "q", "passage_ids": ["a"]}] + [
        {"position": 3, "query": f"q{i}", "passage_ids": ["b"]}] * (retrievals - 1)
    return {"id": f"q{i}", "answer": answer, "prediction": answer, "metrics": {"f1": f1, "retrievals": retrievals},
            "segments": [{"output_start": 0, "passage_ids": ["a"], "fired": fired}], "trace": trace,
            "amortized_s": s, "wall_time_s": s}


def _write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_report_counts_agreement_f1_and_speed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    local = [_row(1, 1.0, True, 2, "x", 2.0), _row(2, 0.0, False, 1, "y", 2.0), _row(3, 0.5, True, 2, "z", 2.0)]
    server = [_row(1, 1.0, True, 2, "x", 1.0), _row(2, 1.0, True, 2, "w", 1.0), _row(3, 0.5, True, 3, "z", 1.0)]
    _write(tmp_path / "b1/hotpotqa/m/flare.jsonl", local)
    _write(tmp_path / "b1/hotpotqa/m-endpoint/flare.jsonl", server)
    _write(tmp_path / "b8/hotpotqa/m/flare.jsonl", local[:1])  # no server rows at batch 8: left out
    [r] = endpoint_evidence(tmp_path, "hotpotqa", "m", ["flare", "sr-rag"], [1, 8])
    assert (r["questions"], r["same_answer"], r["same_first_check"], r["same_retrievals"], r["same_decisions"]) == (3, 2, 2, 1, 1)
    assert r["f1_difference"] == pytest.approx(100 / 3) and r["retrievals_server"] == pytest.approx(7 / 3)
    table = format_evidence([r])
    assert "| 1 | flare | 3 | 50.0 | 83.3 | +33.3" in table and "| 2/3 | 2/3 | 1/3 | 1/3 |" in table and "0.50x" in table
    once = [dict(r, segments=[]) for r in local]  # a method that never checks: no first check to compare
    _write(tmp_path / "b1/hotpotqa/m/sr-rag.jsonl", once)
    _write(tmp_path / "b1/hotpotqa/m-endpoint/sr-rag.jsonl", once)
    [_, sr] = endpoint_evidence(tmp_path, "hotpotqa", "m", ["flare", "sr-rag"], [1])
    assert sr["same_first_check"] is None and "| - |" in format_evidence([sr])
    assert main(["--dir", str(tmp_path), "--model", "m", "--methods", "flare"]) == 0
    assert "flare" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["--dir", str(tmp_path / "missing")])
    assert exc.value.code == 2
