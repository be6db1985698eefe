"""What a newcomer meets on the command line: --version, a bare `active-rag`, the `methods` tables, `ask --stream`
printing its trace once, the progress line on a terminal, and --max-new-tokens bounding the whole answer."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import pytest

from active_rag import ActiveRAGResult, __version__
from active_rag.cli.commands import main
from active_rag.components.presets import PRESETS


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out.strip() == f"active-rag {__version__}"


def test_a_bare_command_prints_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("usage: active-rag") and "ask" in captured.out and "methods" in captured.out
    assert captured.err == ""


@pytest.mark.parametrize("columns", [80, 140])
def test_methods_is_a_table_that_wraps_without_cutting(columns: int, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    assert main(["methods"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= columns
    assert "..." not in out and not re.search(r"issue \d", out) and ":func:" not in out
    flat = " ".join(out.split())
    for name, preset in PRESETS.items():
        assert " ".join(preset.description.split()) in flat, name  # every description whole
    assert re.search(r"^  look-again-grounded +once +input", out, re.M)  # the longest name keeps its columns


def test_methods_json_gives_whole_descriptions(capsys: pytest.CaptureFixture[str]) -> None:
    from active_rag.components.triggers import TRIGGERS

    assert main(["methods", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    doc = " ".join((TRIGGERS["bridge"].__doc__ or "").split("\n\n")[0].split())
    assert len(data["triggers"]["bridge"]) > 110 and data["triggers"]["bridge"].endswith(doc[-20:].replace("``", ""))


def test_stream_prints_each_retrieval_once(tiny_dir: Path, corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ask", "Who is Kasper Schmeichel?", "--model", str(tiny_dir), "--corpus", str(corpus), "--method",
                 "sr-rag", "--max-new-tokens", "5", "--stream"]) == 0
    out = capsys.readouterr().out
    assert out.count("[retrieval @ token 0] trigger=once") == 1
    assert "Retrievals: 1" in out


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("extra, shown", [([], True), (["--json"], False), (["--stream"], False)])
def test_a_progress_line_on_a_terminal_only(extra: list[str], shown: bool, tiny_dir: Path, corpus: Path,
                                            monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(["ask", "Who is Kasper Schmeichel?", "--model", str(tiny_dir), "--corpus", str(corpus), "--method",
                 "sr-rag", "--max-new-tokens", "6", *extra]) == 0
    written = terminal.getvalue()
    assert ("generating the answer: " in written) is shown
    if shown:  # rewritten in place, then erased: the terminal is left clean
        line = written[written.index("\rgenerating the answer: "):]  # (transformers' own bar may come before)
        assert "1 retrieval" in line and line.endswith("\r") and "\n" not in line
        assert line.rstrip("\r").split("\r")[-1].strip() == ""
    out = capsys.readouterr().out
    assert "generating the answer" not in out
    if "--json" in extra:
        json.loads(out)


def test_no_progress_line_when_stderr_is_not_a_terminal(tiny_dir: Path, corpus: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ask", "Who?", "--model", str(tiny_dir), "--corpus", str(corpus), "--method", "wo-rag",
                 "--max-new-tokens", "4"]) == 0
    assert "generating" not in capsys.readouterr().err


@pytest.mark.parametrize("limit", [2, 12, 36, 60])
def test_max_new_tokens_bounds_the_answer_with_its_forced_phrase(limit: int, tiny_dir: Path, corpus: Path,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """The tiny model never stops on its own: every budget is spent, and a forced "So the answer is" with the answer
    after it must fit in the same --max-new-tokens (where it cannot, the answer is the model's own tokens)."""
    from active_rag.engine import ActiveRAG as Engine

    results = []
    stream = Engine.stream

    def recorded(self, question):  # type: ignore[no-untyped-def]
        for event in stream(self, question):
            if isinstance(event, ActiveRAGResult):
                results.append(event)
            yield event

    monkeypatch.setattr(Engine, "stream", recorded)
    assert main(["ask", "Who is Kasper Schmeichel?", "--model", str(tiny_dir), "--corpus", str(corpus), "--method",
                 "sr-rag-linked", "--max-new-tokens", str(limit), "--json"]) == 0  # a method that forces the phrase
    (result,) = results
    assert 0 < len(result.tokens) <= limit
    # room for the phrase, a token before it and one after it: still forced, in the same budget
    assert ("So the answer is" in result.answer) is (limit > 2)
    assert json.loads(capsys.readouterr().out)["answer"] == result.answer
