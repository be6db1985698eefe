"""Bad input on the command line: exit code 2, exactly one line on stderr, never a traceback; names and
numbers are checked before the model loads; ``index`` never overwrites; an interrupted ``eval`` says how to
resume and its JSONL files are repaired before rows are appended."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from active_rag import ActiveLM
from active_rag.cli.commands import main


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.jsonl"
    rows = [{"id": "a", "title": "Kasper", "text": "Kasper Schmeichel is a Danish goalkeeper."},
            {"id": "b", "title": "Peter", "text": "Peter Schmeichel is the father of Kasper Schmeichel."}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def no_model_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the model is loaded: the error must come first."""

    def refuse(cls: type, *a: Any, **kw: Any) -> None:
        raise AssertionError("the model was loaded before the bad option was reported")

    monkeypatch.setattr(ActiveLM, "load", classmethod(refuse))


def one_line_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run the CLI; assert exit code 2, nothing on stdout and exactly one line on stderr; return that line."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse errors
        code = exc.code  # type: ignore[assignment]
    captured = capsys.readouterr()
    assert code == 2, captured
    assert "Traceback" not in captured.err
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


# the model-loading options, checked before the model loads
_MODEL_OPTION_CASES = [
    (["--device", "nope"], "device must be one of"),
    (["--device", "cuda:7"], "cuda"),
    (["--dtype", "nope"], "dtype must be one of"),
    (["--dtype", "int8"], "dtype must be one of"),
    (["--prefix-cache-mb", "nan"], "--prefix-cache-mb must be a finite number"),
    (["--prefix-cache-mb", "-1"], "--prefix-cache-mb must be at least 0"),
    (["--prefix-cache-mb", "lots"], "expected a number"),
]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--theta", "nan"], "--theta must be a finite number, got nan"),
        (["--theta", "-1"], "--theta must be at least 0, got -1"),
        (["--method", "flare", "--theta", "1.5"], "low-confidence theta must be between 0 and 1, got 1.5"),
        (["--method", "fl-rag", "--theta", "0.5"], "trigger 'fixed-length' has none"),
        (["--max-retrievals", "-1"], "--max-retrievals must be at least 0, got -1"),
        (["--router", "ta-are", "--today", "notadate"], "--today must be a date written YYYY-MM-DD"),
        (["--today", "2024-03-01"], "--today is the date TA-ARE tells the model: add --router ta-are"),
        (["--top-k", "0"], "--top-k must be between 1 and 100, got 0"),
        (["--top-k", "1000"], "--top-k must be between 1 and 100, got 1000"),
        (["--top-k", "abc"], "argument --top-k: invalid int value: 'abc'"),
        (["--max-new-tokens", "0"], "--max-new-tokens must be at least 1, got 0"),
        (["--method", "nope"], "Unknown method 'nope'. Valid methods: dragin"),
        (["--trigger", "nope", "--query", "input"], "Unknown trigger 'nope'"),
        (["--trigger", "rind", "--query", "nope"], "Unknown query formulator 'nope'"),
        (["--router", "nope"], "Unknown router 'nope'"),
        *_MODEL_OPTION_CASES,
    ],
)
def test_ask_options_fail_in_one_line_before_the_model_loads(
    options: list[str], message: str, corpus: Path, no_model_load: None, capsys: pytest.CaptureFixture[str]
) -> None:
    line = one_line_error(["ask", "Who is Kasper's father?", "--corpus", str(corpus), *options], capsys)
    assert message in line


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"id": "a", "text": "fine"}\n{"id": "b", "text": "caf\xe9"}\n', r"bad.jsonl, line 2: not UTF-8 text"),
        (b"\x7fELF\x02\x01\x01\x00\x00\x00" * 20, r"bad.jsonl, line 1: holds NUL bytes, so .* is a binary file"),
    ],
)
def test_a_corpus_that_is_not_utf8_jsonl(content: bytes, message: str, tmp_path: Path, no_model_load: None,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(content)
    import re

    assert re.search(message, one_line_error(["ask", "q", "--corpus", str(bad)], capsys))
    assert re.search(message, one_line_error(["index", str(bad), str(tmp_path / "out")], capsys))


def test_a_question_that_is_not_utf8(corpus: Path, no_model_load: None, capsys: pytest.CaptureFixture[str]) -> None:
    # what Python makes of the shell argument b"caf\xe9" (Latin-1) on a UTF-8 system: a surrogate escape
    line = one_line_error(["ask", "caf\udce9?", "--corpus", str(corpus)], capsys)
    assert "The question is not valid text: character 4" in line


def test_a_model_folder_with_a_broken_config(tiny_dir: Path, corpus: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken-model"
    shutil.copytree(tiny_dir, broken)
    (broken / "config.json").write_text('{"model_type": "llama", "hidden_size": ')
    line = one_line_error(["ask", "q", "--corpus", str(corpus), "--model", str(broken)], capsys)
    assert line.startswith("error: Cannot load the model") and "config.json" in line


def test_index_refuses_to_overwrite_or_to_write_beside_other_files(corpus: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from active_rag.retrieval.bm25 import BM25Index

    out = tmp_path / "idx"
    assert main(["index", str(corpus), str(out)]) == 0
    capsys.readouterr()
    small = tmp_path / "small.jsonl"
    small.write_text('{"id": "x", "text": "one passage"}\n')
    assert "already holds an index: pass --force" in one_line_error(["index", str(small), str(out)], capsys)
    assert len(BM25Index.load(out)) == 2  # untouched
    assert main(["index", str(small), str(out), "--force"]) == 0
    assert len(BM25Index.load(out)) == 1

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("precious")
    assert "is not empty (thesis.tex) and holds no index" in one_line_error(
        ["index", str(corpus), str(mine), "--force"], capsys)
    assert [f.name for f in mine.iterdir()] == ["thesis.tex"]
    assert "is a file, not a folder" in one_line_error(["index", str(corpus), str(mine / "thesis.tex")], capsys)
    assert "Cannot write the index" in one_line_error(["index", str(corpus), str(mine / "thesis.tex" / "sub")], capsys)


# ------------------------------------------------------------------------------------------------ eval


def _eval_argv(tmp_path: Path, *extra: str) -> list[str]:
    return ["eval", "--dataset", "hotpotqa", "--data-dir", str(tmp_path / "data"), "--out", str(tmp_path / "out"),
            "--index-cache", str(tmp_path / "idx"), "--no-progress", "--no-plots", *extra]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--top-k", "0"], "--top-k must be between 1 and 100, got 0"),
        (["--max-retrievals", "-1"], "--max-retrievals must be at least 0"),
        (["--max-new-tokens", "0"], "--max-new-tokens must be at least 1"),
        (["--limit", "0"], "--limit must be at least 1"),
        (["--sweep", "theta=nan"], "sweep values must be finite numbers"),
        (["--methods", "dragin", "--sweep", "theta=-1"], "rind theta must be at least 0, got -1"),
        (["--methods", "nope"], "Unknown method 'nope'"),
        (["--methods", "wo-rag,dragin", "--baseline", "sr-rag"], "Unknown baseline method (it must be one of the run's methods) 'sr-rag'"),
    ],
)
def test_eval_options_fail_in_one_line_before_the_model_loads(
    options: list[str], message: str, tmp_path: Path, no_model_load: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert message in one_line_error(_eval_argv(tmp_path, *options), capsys)


def _hotpot(root: Path) -> Path:
    """Four questions in the layout of the DRAGIN data folder (questions_dev.jsonl + corpus.jsonl)."""
    (root / "hotpotqa").mkdir(parents=True)
    questions = [{"question_id": f"h{i}", "question_text": f"Question {i} about Kasper?",
                  "answers_objects": [{"spans": ["Peter"]}],
                  "contexts": [{"id": "0", "title": "Kasper", "paragraph_text": "Kasper text.", "is_supporting": True}]}
                 for i in range(3)]
    (root / "hotpotqa/questions_dev.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    corpus = {"id": "k", "title": "Kasper", "text": "A goalkeeper."}
    (root / "hotpotqa/corpus.jsonl").write_text(json.dumps(corpus) + "\n")
    return root


def test_sigint_during_eval_exits_130_and_says_how_to_resume(
    tiny_lm: ActiveLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from active_rag.evaluation import runner

    _hotpot(tmp_path / "data")
    monkeypatch.setattr(ActiveLM, "load", classmethod(lambda cls, name=None, **kw: tiny_lm))
    real = runner._run_one
    calls = {"n": 0}

    def interrupt_on_second(*a: Any, **kw: Any) -> dict[str, Any]:
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(runner, "_run_one", interrupt_on_second)
    argv = _eval_argv(tmp_path, "--methods", "wo-rag", "--model", "tiny-llama", "--max-new-tokens", "2")
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert err.strip() == "interrupted: 1 rows saved, rerun the same command to resume"
    path = tmp_path / "out/hotpotqa/tiny-llama/wo-rag.jsonl"
    assert len(path.read_text().splitlines()) == 1

    monkeypatch.setattr(runner, "_run_one", real)
    assert main(argv) == 0  # resumes: only the last two questions run
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted(r["id"] for r in rows) == ["h0", "h1", "h2"]


def test_read_rows_repairs_the_tail_before_anything_is_appended(tmp_path: Path) -> None:
    from active_rag.evaluation.runner import _read_rows

    path = tmp_path / "m.jsonl"
    rows = [{"id": "q1", "engine_key": "k", "em": 1}, {"id": "q2", "engine_key": "k", "em": 0}]
    # a valid last row without its newline: kept, and the newline is added
    path.write_text(json.dumps(rows[0]) + "\n" + json.dumps(rows[1]))
    assert sorted(_read_rows(path, "k")) == ["q1", "q2"]
    assert path.read_text().endswith("}\n") and len(path.read_text().splitlines()) == 2
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"id": "q3", "engine_key": "k"}) + "\n")
    assert sorted(_read_rows(path, "k")) == ["q1", "q2", "q3"]

    # a row cut off mid-write, inside a multi-byte character: dropped with a warning naming the line
    path.write_bytes((json.dumps(rows[0]) + "\n").encode() + '{"id": "q2", "answer": "Jan\u00e1'.encode()[:-1])
    with pytest.warns(UserWarning, match=r"dropped 1 row\(s\) .*malformed line\(s\) 2"):
        assert list(_read_rows(path, "k")) == ["q1"]
    assert path.read_text() == json.dumps(rows[0]) + "\n"


def test_rows_from_other_settings_are_set_aside_and_come_back(tmp_path: Path) -> None:
    """A run with other settings (say a threshold calibrated since) must not delete the rows already paid for:
    they move to other-settings/ and a run with the old settings resumes from them."""
    from active_rag.evaluation.runner import _read_rows

    path = tmp_path / "dragin.jsonl"
    old = [{"id": "q1", "engine_key": "paper", "em": 1}, {"id": "q2", "engine_key": "paper", "em": 0}]
    path.write_text("".join(json.dumps(r) + "\n" for r in old + [{"id": "q1", "engine_key": "cal", "em": 0}]))
    with pytest.warns(UserWarning, match=r"2 row\(s\) were made with other settings.*other-settings"):
        assert list(_read_rows(path, "cal")) == ["q1"]
    assert [json.loads(line)["engine_key"] for line in path.read_text().splitlines()] == ["cal"]
    aside = tmp_path / "other-settings" / "dragin.paper.jsonl"
    assert [json.loads(line) for line in aside.read_text().splitlines()] == old

    # the calibrated run goes on (q2 answered), then the paper's settings come back: nothing is answered twice
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"id": "q2", "engine_key": "cal", "em": 1}) + "\n")
    with pytest.warns(UserWarning) as caught:
        assert _read_rows(path, "paper") == {r["id"]: r for r in old}
    messages = " ".join(str(w.message) for w in caught)
    assert "resumed 2 row(s)" in messages and "dragin.cal.jsonl" in messages
    assert not aside.exists()
    assert len((tmp_path / "other-settings" / "dragin.cal.jsonl").read_text().splitlines()) == 2
    assert [json.loads(line)["engine_key"] for line in path.read_text().splitlines()] == ["paper", "paper"]


def test_router_options_are_validated_in_the_python_api(tiny_lm: ActiveLM) -> None:
    import datetime as dt

    from active_rag.errors import InvalidOptionError
    from active_rag.components.routing import TaAreRouter, make_router

    with pytest.raises(InvalidOptionError, match="today must be a date written YYYY-MM-DD"):
        TaAreRouter(tiny_lm, today="notadate")
    with pytest.raises(InvalidOptionError, match="vanilla router max_new_tokens must be at least 1"):
        make_router("vanilla", tiny_lm, max_new_tokens=0)
    assert TaAreRouter(tiny_lm, today="2024-03-01").today_text() == "2024-03-01"
    assert TaAreRouter(tiny_lm, today=dt.date(2024, 3, 1)).today_text() == "2024-03-01"


def test_eval_batch_size_is_checked_before_the_model_loads(
    tmp_path: Path, no_model_load: None, capsys: pytest.CaptureFixture[str]
) -> None:
    line = one_line_error(["eval", "--dataset", "hotpotqa", "--data-dir", str(tmp_path), "--batch-size", "0"], capsys)
    assert "--batch-size must be at least 1" in line
