"""One answer format everywhere, and what ``active-rag ask QUESTION`` runs with no ``--model`` or ``--method``: the
strongest installed registry model and ``sr-rag-choose`` (``look-again-choose`` with the ``focus`` context for a model
under 1B parameters), named as such in the header. The model is the tiny one saved to a folder (``tiny_dir``,
tests/conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from active_rag import ActiveLM, ActiveRAG, AnswerStage, BM25Index
from active_rag.models import registry
from active_rag.cli.ask_defaults import (
    ASK_MODELS,
    ASK_SMALL_MODELS,
    default_ask_context,
    default_ask_method,
    default_ask_model,
)
from active_rag.components.context import FocusContext
from active_rag.cli.commands import build_parser, main
from tests.recipes import recipe

QUESTION = "Who is Kasper Schmeichel?"


def _loadable(names: set[str]) -> Any:
    def status(name: str) -> Any:
        return registry.ModelStatus(name=name, installed=name in names, gguf_path=None, converted=False, description="")

    return status


@pytest.mark.parametrize(("installed", "expected"), [
    ({"smollm2", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"}, "qwen2.5-coder-1.5b"),
    ({"smollm2", "qwen2.5-coder-0.5b"}, "qwen2.5-coder-0.5b"),
    ({"smollm2"}, "smollm2"),
    (set(), "smollm2"),
])
def test_the_default_model_is_the_strongest_installed(installed: set[str], expected: str) -> None:
    assert default_ask_model(installed.__contains__) == expected
    assert ASK_MODELS[-1] == registry.DEFAULT_MODEL


def test_ask_without_model_or_method_runs_the_default_method_on_the_strongest_model(
        monkeypatch, tiny_dir: Path, corpus: Path, capsys) -> None:
    monkeypatch.setattr(registry, "model_status", _loadable({"smollm2", "qwen2.5-coder-0.5b"}))
    loaded: list[str | None] = []

    def load(name: str | None, **options: Any) -> ActiveLM:
        loaded.append(name)
        return ActiveLM.load(str(tiny_dir))

    monkeypatch.setattr("active_rag.cli.commands.load_model", load)
    assert main(["ask", QUESTION, "--corpus", str(corpus), "--max-new-tokens", "6"]) == 0
    out = capsys.readouterr().out
    assert loaded == ["qwen2.5-coder-0.5b"]
    assert "Method:   look-again-choose, context focus," in out
    assert "Short answer: " in out
    assert main(["ask", QUESTION, "--corpus", str(corpus), "--max-new-tokens", "6", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["method"], data["context"]) == ("look-again-choose", "focus")


def test_a_context_of_the_users_own_stays_with_the_default_method(monkeypatch) -> None:
    from active_rag.cli.commands import _engine_kwargs

    monkeypatch.setattr(registry, "model_status", _loadable({"qwen2.5-coder-0.5b"}))
    args = build_parser().parse_args(["ask", QUESTION, "--context", "accumulate"])
    kwargs = _engine_kwargs(args)
    assert args.method == "look-again-choose" and args.context == "accumulate"
    assert not isinstance(kwargs["context"], FocusContext) and kwargs["context"].name == "accumulate"
    args = build_parser().parse_args(["ask", QUESTION])
    assert isinstance(_engine_kwargs(args)["context"], FocusContext)
    args = build_parser().parse_args(["ask", QUESTION, "--method", "sr-rag"])  # a method named: its own context
    assert _engine_kwargs(args)["context"] == "replace" and args.context is None  # sr-rag's own


@pytest.mark.parametrize(("installed", "endpoint", "expected", "context"), [
    ({"smollm2", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"}, False, "sr-rag-choose", None),
    ({"smollm2", "qwen2.5-coder-0.5b"}, False, "look-again-choose", "focus"),
    ({"smollm2"}, False, "look-again-choose", "focus"),
    ({"smollm2", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"}, True, "sr-rag", None),
])
def test_the_default_method_follows_the_default_model(monkeypatch, installed: set[str], endpoint: bool,
                                                      expected: str, context: str | None) -> None:
    """The method is chosen with the model, before anything loads: ``sr-rag-choose`` for the 1.5B reader,
    ``look-again-choose`` read with ``focus`` for the registry models under 1B parameters (their reader loses in six
    passages what the links add) and ``sr-rag`` for endpoints."""
    from active_rag.cli.commands import _engine_kwargs

    monkeypatch.setattr(registry, "model_status", _loadable(installed))
    argv = ["ask", QUESTION, *(["--endpoint", "http://localhost:8080/v1", "--model", "served"] if endpoint else [])]
    args = build_parser().parse_args(argv)
    _engine_kwargs(args)
    assert (args.method, args.context) == (expected, context)
    assert args.model == ("served" if endpoint else default_ask_model(installed.__contains__))


def test_a_model_named_by_the_user_keeps_the_method_of_its_size() -> None:
    assert set(ASK_SMALL_MODELS) < set(registry.MODELS) and "qwen2.5-coder-1.5b" not in ASK_SMALL_MODELS
    assert default_ask_method(model="qwen2.5-coder-1.5b") == "sr-rag-choose"
    assert default_ask_method(model="Qwen/Qwen2.5-7B-Instruct") == "sr-rag-choose"  # outside the registry
    assert default_ask_method(model="smollm2") == "look-again-choose" and default_ask_context(model="smollm2") == "focus"
    assert default_ask_context(model="qwen2.5-coder-1.5b") is None and default_ask_context(True, "smollm2") is None


def test_ask_help_says_the_defaults() -> None:
    ask = build_parser()._subparsers._group_actions[0].choices["ask"]  # type: ignore[union-attr]
    helps = {a.dest: a.help or "" for a in ask._actions}
    assert "default sr-rag-choose" in helps["method"] and "sr-rag with --endpoint" in helps["method"]
    assert "look-again-choose with --context focus with a model under 1B" in helps["method"]
    assert "qwen2.5-coder-1.5b, else qwen2.5-coder-0.5b, else smollm2" in helps["model"]


@pytest.mark.parametrize("method", ["wo-rag", "dragin"])
def test_a_preset_answers_in_one_format_in_the_cli_and_in_python(tiny_dir: Path, corpus: Path, capsys,
                                                                 method: str) -> None:
    """No answer phrase of the CLI's own: a preset that reads no answer span answers as the model wrote it."""
    assert main(["ask", QUESTION, "--model", str(tiny_dir), "--corpus", str(corpus), "--method", method,
                 "--max-new-tokens", "10", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    python = ActiveRAG.from_preset(method, ActiveLM.load(str(tiny_dir)), BM25Index.from_path(corpus),
                                   max_new_tokens=10).run(QUESTION)
    assert (cli["answer"], cli["short_answer"]) == (python.answer, python.short_answer)


def test_a_preset_that_reads_the_answer_span_forces_its_phrase_everywhere(tiny_lm: ActiveLM, fake_retriever) -> None:
    """``look-again`` checks the span after "So the answer is": from Python too, the phrase is forced, so the check
    reads an answer instead of finding none and looking again every time."""
    rag = ActiveRAG(tiny_lm, fake_retriever, **recipe("look-again", max_new_tokens=12, top_k=2))
    assert rag.answer_phrase == "So the answer is"
    result = rag.run(QUESTION)
    assert result.answer_check is not None and result.answer_check["draft"]["tokens"] > 0
    assert result.short_answer == result.answer_check["draft" if result.answer_check["kept"] == "draft" else "second"]["answer"]
    assert ActiveRAG(tiny_lm, fake_retriever, trigger="once", answer=AnswerStage(check=True)).answer_phrase == "So the answer is"
    assert ActiveRAG(tiny_lm, fake_retriever, trigger="once").answer_phrase is None
    assert ActiveRAG(tiny_lm, fake_retriever, trigger="once", answer=AnswerStage(phrase=None, check=True)).answer_phrase is None


def test_the_short_answer_is_the_span_after_the_answer_phrase() -> None:
    from active_rag import ActiveRAGResult

    result = ActiveRAGResult(question="q", answer="He is Danish. So the answer is Peter Schmeichel.", method="m")
    assert result.short_answer == "Peter Schmeichel" and result.to_dict()["short_answer"] == "Peter Schmeichel"
    assert ActiveRAGResult(question="q", answer="Peter Schmeichel", method="m").short_answer == "Peter Schmeichel"


def test_a_draft_kept_after_looking_again_says_why(tiny_lm: ActiveLM, fake_retriever) -> None:
    """Without the phrase neither answer has a span: the check ties, keeps the draft and records that reason."""
    result = ActiveRAG(tiny_lm, fake_retriever, **recipe("look-again", max_new_tokens=12, top_k=2, answer_phrase=None)).run(QUESTION)
    check = result.answer_check
    assert check is not None and check["fired"] and check["second"] is not None and check["kept"] == "draft"
    assert check["reason"].startswith("neither answer has an answer span")


def test_the_header_names_the_method_as_help_does(tiny_dir: Path, corpus: Path, capsys) -> None:
    """``--theta`` alone tunes DRAGIN's threshold: the header says ``dragin``; a trigger of the user's own is
    named ``trigger+query``."""
    base = ["ask", QUESTION, "--model", str(tiny_dir), "--corpus", str(corpus), "--max-new-tokens", "4"]
    assert main([*base, "--theta", "0.5"]) == 0
    assert "Method:   dragin (theta 0.5: user)" in capsys.readouterr().out
    assert main([*base, "--trigger", "fixed-length"]) == 0
    assert "Method:   fixed-length+attention" in capsys.readouterr().out
