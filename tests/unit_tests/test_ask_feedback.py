"""Feedback a user expects (issue 66 item 3): ``ask --threads``, an ``ask`` header that names the model and the method
and why, and progress bars for indexing a folder and embedding many texts that show only on a terminal (never under
``--json``, a pipe or the tests)."""

from __future__ import annotations

import io
import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from active_rag import ActiveLM
from active_rag.cli.commands import main
from active_rag.models import registry
from active_rag.progress import progress, progress_shown
from active_rag.retrieval.bm25 import BM25Index

QUESTION = "Which port does the cache server listen on?"


class _Terminal(io.StringIO):
    """Standard error as a terminal."""

    def isatty(self) -> bool:
        return True


def _on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> _Terminal:
    """Standard error as a terminal, from here to the end of the test (set in the test's body: pytest's capture
    puts its own stream back between a fixture and the test)."""
    stream = _Terminal()
    monkeypatch.setattr(sys, "stderr", stream)
    return stream


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "my_docs"
    (root / "ops").mkdir(parents=True)
    (root / "cache.md").write_text("# Cache server\n\nThe cache server listens on port 6380 and keeps keys for an hour.\n")
    (root / "ops" / "deploy.md").write_text("# Deploying\n\nDeploy with the release script; it restarts the cache server.\n")
    (root / "notes.txt").write_text("Notes: the search service reads from the cache server.\n")
    return root


@pytest.fixture
def tiny_loader(monkeypatch: pytest.MonkeyPatch, tiny_dir: Path) -> list[str | None]:
    """``ask``'s model loads the tiny random model; the names it was asked for are recorded."""
    loaded: list[str | None] = []

    def load(name: str | None, **options: Any) -> ActiveLM:
        loaded.append(name)
        return ActiveLM.load(str(tiny_dir))

    monkeypatch.setattr("active_rag.cli.commands.load_model", load)
    return loaded


def _installed(names: set[str]) -> Any:
    class Status:
        def __init__(self, loadable: bool) -> None:
            self.loadable = loadable

    return lambda name: Status(name in names)


# -- --threads ----------------------------------------------------------------------------------------------------


def test_ask_threads_sets_torchs_cpu_threads(tiny_loader: list[str | None], corpus: Path, capsys) -> None:
    before = torch.get_num_threads()
    try:
        assert main(["ask", QUESTION, "--corpus", str(corpus), "--model", "m", "--method", "sr-rag",
                     "--max-new-tokens", "4", "--threads", "1", "--json"]) == 0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    assert json.loads(capsys.readouterr().out)["method"] == "sr-rag"


def test_ask_threads_below_one_is_refused_before_the_model_loads(tiny_loader: list[str | None], corpus: Path,
                                                                  capsys) -> None:
    assert main(["ask", QUESTION, "--corpus", str(corpus), "--model", "m", "--threads", "0"]) == 2
    assert "--threads" in capsys.readouterr().err
    assert tiny_loader == []


# -- the header ---------------------------------------------------------------------------------------------------


def test_the_header_names_the_picked_model_and_why_that_method(monkeypatch: pytest.MonkeyPatch,
                                                               tiny_loader: list[str | None], corpus: Path,
                                                               capsys) -> None:
    monkeypatch.setattr(registry, "model_status", _installed({"smollm2", "qwen2.5-coder-0.5b"}))
    assert main(["ask", QUESTION, "--corpus", str(corpus), "--max-new-tokens", "6"]) == 0
    out = capsys.readouterr().out
    assert tiny_loader == ["qwen2.5-coder-0.5b"]
    assert ("Model:    qwen2.5-coder-0.5b (the strongest installed registry model; a stronger one: "
            "`active-rag models install qwen2.5-coder-1.5b`)") in out
    method = next(line for line in out.splitlines() if line.startswith("Method:"))
    assert method.startswith("Method:   look-again-choose, context focus,")
    assert method.endswith("(the default for models under 1B parameters)")
    # said before the answer: the wait for the first token comes after it
    assert out.index("Model:") < out.index("Method:") < out.index("Answer:")


def test_the_header_of_the_strongest_model_and_of_named_choices(monkeypatch: pytest.MonkeyPatch,
                                                                tiny_loader: list[str | None], corpus: Path,
                                                                capsys) -> None:
    monkeypatch.setattr(registry, "model_status", _installed({"qwen2.5-coder-1.5b"}))
    assert main(["ask", QUESTION, "--corpus", str(corpus), "--max-new-tokens", "6", "--stream"]) == 0
    captured = capsys.readouterr()
    # --stream: standard output is the answer's text as it comes; the header goes to standard error
    assert "Model:    qwen2.5-coder-1.5b (the strongest installed registry model)\n" in captured.err
    assert "(the default for models of 1B parameters and more)" in captured.err
    assert "Model:" not in captured.out and "Retrievals:" in captured.out
    assert main(["ask", QUESTION, "--corpus", str(corpus), "--model", "mine", "--method", "sr-rag",
                 "--max-new-tokens", "6"]) == 0
    out = capsys.readouterr().out
    assert "Model:    mine (--model)" in out
    assert next(line for line in out.splitlines() if line.startswith("Method:")).endswith("(--method)")


def test_json_has_no_header(tiny_loader: list[str | None], corpus: Path, capsys) -> None:
    assert main(["ask", QUESTION, "--corpus", str(corpus), "--model", "m", "--max-new-tokens", "4", "--json"]) == 0
    json.loads(capsys.readouterr().out)  # one JSON object, nothing before it


# -- progress bars ------------------------------------------------------------------------------------------------


def test_progress_draws_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    pipe = io.StringIO()
    monkeypatch.setattr(sys, "stderr", pipe)
    assert list(progress(range(3), desc="counting")) == [0, 1, 2]
    assert pipe.getvalue() == "" and not progress_shown()
    tty = _Terminal()
    monkeypatch.setattr(sys, "stderr", tty)
    assert list(progress(range(3), desc="counting", enabled=False)) == [0, 1, 2]
    assert tty.getvalue() == ""
    assert list(progress(range(3), desc="counting")) == [0, 1, 2]
    assert "counting" in tty.getvalue()


def test_indexing_a_folder_draws_bars_on_a_terminal(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = _on_a_terminal(monkeypatch)
    index = BM25Index.from_path(folder)
    assert len(index) == 3
    assert "reading files" in terminal.getvalue()
    assert "Split strings" in terminal.getvalue() or "Tokeniz" in terminal.getvalue() or "BM25" in terminal.getvalue()


def test_indexing_is_silent_off_a_terminal_and_with_progress_off(folder: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = _on_a_terminal(monkeypatch)
    BM25Index.from_path(folder, progress=False)
    assert terminal.getvalue() == ""
    pipe = io.StringIO()
    monkeypatch.setattr(sys, "stderr", pipe)
    BM25Index.from_path(folder)
    assert pipe.getvalue() == ""


def test_the_index_command_draws_bars_on_a_terminal_and_none_under_json(folder: Path, tmp_path: Path,
                                                                        capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = _on_a_terminal(monkeypatch)
    assert main(["index", str(folder), str(tmp_path / "idx")]) == 0
    assert "reading files" in terminal.getvalue()
    assert capsys.readouterr().out.startswith("Indexed 3 passages")
    terminal.seek(0)
    terminal.truncate()
    assert main(["index", str(folder), str(tmp_path / "idx2"), "--json"]) == 0
    assert terminal.getvalue() == ""
    assert json.loads(capsys.readouterr().out)["passages"] == 3


class _Encoding(dict):
    def to(self, device: str) -> _Encoding:
        return self


class _Tokenizer:
    def __call__(self, batch: list[str], **kwargs: Any) -> _Encoding:
        width = max(len(t) for t in batch)
        mask = torch.tensor([[1] * len(t) + [0] * (width - len(t)) for t in batch])
        return _Encoding(input_ids=mask.clone(), attention_mask=mask)


class _Model:
    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
        hidden = torch.ones(*input_ids.shape, 4)

        class Out:
            last_hidden_state = hidden

        return Out()


@pytest.fixture
def stub_encoder(monkeypatch: pytest.MonkeyPatch) -> None:
    """MiniLM's model replaced by a stub: what is measured is the loop over the batches."""
    from active_rag.retrieval import embeddings

    loaded = embeddings._Loaded(_Tokenizer(), _Model(), threading.Lock())
    monkeypatch.setattr(embeddings.MiniLMEncoder, "_loaded", lambda self: loaded)


def test_embedding_many_texts_draws_a_bar_on_a_terminal(stub_encoder: None, monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = _on_a_terminal(monkeypatch)
    from active_rag.retrieval.embeddings import MiniLMEncoder

    vectors = MiniLMEncoder(batch_size=2).encode(["a", "bb", "ccc", "dddd", "e"])
    assert len(vectors) == 5
    assert "embedding" in terminal.getvalue()


def test_embedding_is_silent_for_one_batch_off_a_terminal_and_when_turned_off(
        stub_encoder: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from active_rag.retrieval.embeddings import MiniLMEncoder

    terminal = _on_a_terminal(monkeypatch)
    MiniLMEncoder(batch_size=8).encode(["a", "bb"])  # one batch: nothing to wait for
    MiniLMEncoder(batch_size=2, show_progress=False).encode(["a", "bb", "ccc", "dddd"])
    assert terminal.getvalue() == ""
    pipe = io.StringIO()
    monkeypatch.setattr(sys, "stderr", pipe)
    MiniLMEncoder(batch_size=2).encode(["a", "bb", "ccc", "dddd"])
    assert pipe.getvalue() == ""


def test_minilm_embeddings_pass_show_progress_on() -> None:
    pytest.importorskip("langchain_core")
    from langchain_active_rag import MiniLMEmbeddings

    assert MiniLMEmbeddings().encoder.show_progress is True
    assert MiniLMEmbeddings(show_progress=False).encoder.show_progress is False
