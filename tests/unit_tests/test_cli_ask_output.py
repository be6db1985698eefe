"""What ``active-rag ask`` prints (the demo, ``make demo``): every retrieval with its position, trigger token,
score, threshold, query and passages (title and id) in the human-readable output, not only with ``--json``;
and no cap on retrievals unless ``--max-retrievals`` is given, as in the Python API and ``eval``. The model is
the tiny one saved to a folder (``tiny_dir``, tests/conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from active_rag.cli.commands import main


QUESTION = "Who is Kasper Schmeichel?"
TITLES = {"a": "Kasper Schmeichel", "b": "Peter Schmeichel", "c": "Ed Wood"}


def ask(capsys: pytest.CaptureFixture[str], tiny_dir: Path, corpus: Path, *options: str) -> str:
    assert main(["ask", QUESTION, "--model", str(tiny_dir), "--corpus", str(corpus), *options]) == 0
    return capsys.readouterr().out


def retrieval_line(r: dict[str, Any]) -> str:
    """The first line ``ask`` prints for a retrieval of ``--json``'s trace."""
    token = "(before generation)" if r["token"] is None else repr(r["token"])
    score = "-" if r["score"] is None else f"{r['score']:.3f}"
    threshold = "-" if r["threshold"] is None else f"{r['threshold']:g}"
    return f"[retrieval @ token {r['position']}] trigger={r['trigger']} token={token} score={score} threshold={threshold}"


def check_printed(out: str, retrievals: list[dict[str, Any]]) -> None:
    """Each retrieval of the trace is printed, in order, with its query and its passages' titles and ids."""
    assert f"Retrievals: {len(retrievals)}" in out
    report = out[out.index(f"Retrievals: {len(retrievals)}"):]
    at = 0
    for r in retrievals:
        at = report.index(retrieval_line(r), at)
        block_end = report.find("[retrieval @ token", at + 1)
        block = report[at: block_end if block_end >= 0 else len(report)]
        assert f"      query: {r['query']}" in block
        for pid in r["passage_ids"]:
            assert f"      - {TITLES[pid]}  [{pid}]" in block
        if len(r["passage_ids"]) < r["top_k"]:  # BM25 finds only passages sharing a word with the query
            assert f"the retriever returned {len(r['passage_ids'])} of the {r['top_k']} passages asked for" in block
    assert any(r["passage_ids"] for r in retrievals), "some retrieval of this corpus finds passages"


def test_ask_prints_each_dragin_retrieval_with_token_score_and_threshold(tiny_dir: Path, corpus: Path, capsys) -> None:
    options = ("--method", "dragin", "--theta", "0", "--max-new-tokens", "24", "--top-k", "2")
    trace = json.loads(ask(capsys, tiny_dir, corpus, *options, "--json"))["retrievals"]
    assert trace and all(r["token"] is not None and r["score"] is not None and r["threshold"] == 0 for r in trace)
    out = ask(capsys, tiny_dir, corpus, *options)
    check_printed(out, trace)
    assert "threshold=0" in out and "score=" in out and "token='" in out


def test_ask_prints_retrievals_without_a_threshold_as_dashes(tiny_dir: Path, corpus: Path, capsys) -> None:
    options = ("--method", "fl-rag", "--max-new-tokens", "20", "--top-k", "2")
    trace = json.loads(ask(capsys, tiny_dir, corpus, *options, "--json"))["retrievals"]
    out = ask(capsys, tiny_dir, corpus, *options)
    check_printed(out, trace)
    # the retrieval with the input comes before any token; fixed-length has no score or threshold
    assert "[retrieval @ token 0] trigger=fixed-length token=(before generation) score=- threshold=-" in out


def test_ask_streams_each_retrieval_as_it_happens(tiny_dir: Path, corpus: Path, capsys) -> None:
    out = ask(capsys, tiny_dir, corpus, "--method", "dragin", "--theta", "0", "--max-new-tokens", "24", "--top-k", "2",
              "--stream")
    streamed, report = out.split("Retrievals: ", 1)
    lines = [line.strip() for line in streamed.splitlines() if line.strip().startswith("[retrieval @ token")]
    assert lines and all(" score=" in line and " threshold=0" in line for line in lines)
    assert report.startswith(f"{len(lines)} (above)")  # printed while generating, not again in the summary
    assert "[retrieval @ token" not in report


def test_ask_has_no_retrieval_cap_unless_asked(tiny_dir: Path, corpus: Path, capsys) -> None:
    options = ("--method", "fl-rag", "--max-new-tokens", "120", "--top-k", "1", "--json")
    uncapped = json.loads(ask(capsys, tiny_dir, corpus, *options))
    assert len(uncapped["retrievals"]) > 5  # the input, then every 16 tokens: no cap of 5 (the old default)
    capped = json.loads(ask(capsys, tiny_dir, corpus, *options, "--max-retrievals", "2"))
    # the cap counts the retrievals during generation; the one with the input comes first
    assert len(capped["retrievals"]) <= 3 < len(uncapped["retrievals"])
