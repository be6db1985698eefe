"""``--device``, ``--dtype``, ``--no-prefix-cache``, ``--prefix-cache-mb`` and ``eval --batch-size`` on the
command line: checked before the model loads (exit 2, one line), and the JSON reports prompt tokens."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from active_rag import ActiveLM
from active_rag.cli import main


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory, tiny_model, tiny_tokenizer) -> Path:
    d = tmp_path_factory.mktemp("tiny-model")
    tiny_model.save_pretrained(d)
    tiny_tokenizer.save_pretrained(d)
    return d


@pytest.fixture
def no_model_load(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(cls: type, *a: Any, **kw: Any) -> None:
        raise AssertionError("the model was loaded before the bad option was reported")

    monkeypatch.setattr(ActiveLM, "load", classmethod(refuse))


def one_line_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code  # type: ignore[assignment]
    captured = capsys.readouterr()
    assert code == 2, captured
    assert "Traceback" not in captured.err
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--device", "tpu"], "device must be one of"),
        (["--device", "cuda:7"], "cuda"),
        (["--dtype", "int8"], "dtype must be one of"),
        (["--prefix-cache-mb", "-5"], "--prefix-cache-mb must be at least 0"),
        (["--prefix-cache-mb", "nan"], "--prefix-cache-mb must be a finite number"),
        (["--prefix-cache-mb", "lots"], "expected a number"),
    ],
)
def test_bad_model_options_fail_before_loading(args, expected, capsys, no_model_load) -> None:
    line = one_line_error(["ask", "Who?", *args], capsys)
    assert expected in line


def test_eval_bad_batch_size(capsys, no_model_load, tmp_path: Path) -> None:
    line = one_line_error(["eval", "--dataset", "hotpotqa", "--data-dir", str(tmp_path), "--batch-size", "0"], capsys)
    assert "--batch-size must be at least 1" in line


def test_ask_reports_prompt_tokens_with_and_without_the_cache(tiny_dir: Path, capsys) -> None:
    base = ["ask", "Who is Kasper Schmeichel?", "--model", str(tiny_dir), "--method", "fl-rag",
            "--max-new-tokens", "20", "--json", "--device", "cpu", "--dtype", "float32"]
    assert main(base) == 0
    cached = json.loads(capsys.readouterr().out)["prompt_tokens"]
    assert cached["cached"] > 0  # the re-prompt after the second retrieval shares the instruction
    assert main([*base, "--no-prefix-cache"]) == 0
    plain = json.loads(capsys.readouterr().out)["prompt_tokens"]
    assert plain["cached"] == 0
    assert plain["prefilled"] == cached["prefilled"] + cached["cached"]
    assert main(base[:-5]) == 0
    assert "Prompt tokens:" in capsys.readouterr().out
