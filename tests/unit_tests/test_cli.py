"""The command line on the tiny model saved to a folder (loaded like any local HF model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from active_rag.cli.commands import main


def test_ask_json_schema(tiny_dir: Path, corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["ask", "Who is Kasper Schmeichel?", "--model", str(tiny_dir), "--corpus", str(corpus),
                 "--method", "fl-rag", "--max-new-tokens", "20", "--top-k", "2", "--json"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert {"answer", "method", "retrievals", "passages"} <= set(data)
    assert data["method"] == "fl-rag"
    assert len(data["retrievals"]) == 2  # with the input, then after the first 16 tokens
    for r in data["retrievals"]:
        assert {"position", "token", "score", "threshold", "query", "passage_ids", "dropped_ids"} <= set(r)
        # BM25 returns only passages sharing a word with the query: at most top_k, all of them in the prompt
        assert r["top_k"] == 2 and len(r["passage_ids"]) == r["returned"] <= 2 and r["dropped_ids"] == []
    assert len(data["retrievals"][0]["passage_ids"]) == 2  # the question matches both Schmeichel passages
    ids = {p["id"] for p in data["passages"]}
    assert ids == {i for r in data["retrievals"] for i in r["passage_ids"]}


def test_ask_trigger_and_query_combination_prints_retrievals(tiny_dir: Path, corpus: Path, capsys) -> None:
    code = main(["ask", "Who is Kasper Schmeichel?", "--model", str(tiny_dir), "--corpus", str(corpus),
                 "--trigger", "fixed-length", "--query", "full-context", "--max-new-tokens", "20"])
    assert code == 0
    out = capsys.readouterr().out
    assert "Method:   fixed-length+full-context" in out
    assert "[retrieval @ token 16] trigger=fixed-length" in out


def test_ask_stream(tiny_dir: Path, corpus: Path, capsys) -> None:
    assert main(["ask", "Who?", "--model", str(tiny_dir), "--corpus", str(corpus), "--method", "sr-rag",
                 "--max-new-tokens", "5", "--stream"]) == 0
    assert "[retrieval @ token 0] trigger=once" in capsys.readouterr().out


def test_ask_look_again_prints_both_answers_and_which_was_kept(tiny_dir: Path, corpus: Path, capsys) -> None:
    args = ["ask", "Who is Kasper Schmeichel?", "--model", str(tiny_dir), "--corpus", str(corpus), "--method",
            "look-again-grounded", "--max-new-tokens", "8", "--top-k", "1"]
    assert main([*args, "--json"]) == 0
    check = json.loads(capsys.readouterr().out)["answer_check"]
    assert main([*args, "--stream"]) == 0
    out = capsys.readouterr().out
    assert f"kept the {check['kept']}" in out and f"draft: {check['draft']['answer']!r}" in out
    assert "trigger=answer-check" in out
    if check["second"] is not None:  # the second answer streams from its first word, after a marker
        assert f"second: {check['second']['answer']!r}" in out and "[answer again] " in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["ask", "   "], "question is empty"),
        (["ask", "q", "--method", "nope"], "Unknown method 'nope'. Valid methods: dragin"),
        (["ask", "q", "--trigger", "nope", "--query", "input"], "Unknown trigger 'nope'"),
        (["ask", "q", "--corpus", "/nonexistent/corpus.jsonl"], "does not exist"),
    ],
)
def test_bad_input_gives_a_clear_error(argv: list[str], message: str, capsys, tiny_dir: Path) -> None:
    assert main([*argv, "--model", str(tiny_dir)]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("variable", "message"),
    [
        ("ACTIVE_RAG_HEAP", "error: ACTIVE_RAG_HEAP must be hold or glibc, got 'large'"),
        ("ACTIVE_RAG_PREFILL", "error: ACTIVE_RAG_PREFILL must be kernel, dense or auto, got 'large'"),
    ],
)
def test_a_bad_environment_variable_gives_exit_code_2_and_one_line(variable: str, message: str, capsys, monkeypatch,
                                                                   tiny_dir: Path) -> None:
    from active_rag.decoding import host_memory

    monkeypatch.setattr(host_memory, "_HELD", [])  # the heap policy is read at the process's first prefill
    monkeypatch.setenv(variable, "large")
    assert main(["ask", "What is a retriever?", "--model", str(tiny_dir), "--max-new-tokens", "4"]) == 2
    assert capsys.readouterr().err.strip() == message


def test_malformed_corpus_line_names_file_and_line(tmp_path: Path, tiny_dir: Path, capsys) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "title": "t", "text": "x"}\n{not json\n')
    assert main(["ask", "q", "--corpus", str(bad), "--model", str(tiny_dir)]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl" in err and "line 2" in err


def test_methods_lists_every_component(capsys) -> None:
    from active_rag import PRESETS, QUERIES, TRIGGERS

    assert main(["methods", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data["presets"]) == set(PRESETS)
    assert set(data["triggers"]) == set(TRIGGERS)
    assert set(data["queries"]) == set(QUERIES)
    assert set(data["routers"]) == {"ta-are", "vanilla", "none"}


def test_index_builds_a_loadable_index(tmp_path: Path, corpus: Path, capsys) -> None:
    from active_rag import BM25Index

    out = tmp_path / "idx"
    assert main(["index", str(corpus), str(out)]) == 0
    assert "Indexed 3 passages" in capsys.readouterr().out
    assert BM25Index.load(out).retrieve("IFFHS goalkeeper", 1)[0].id == "b"


def test_models_lists_the_registry(capsys) -> None:
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    for name in ("smollm2", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"):
        assert name in out


def test_ask_reports_prompt_tokens_with_and_without_the_prefix_cache(tiny_dir: Path, corpus: Path, capsys) -> None:
    base = ["ask", "Who is Kasper Schmeichel?", "--model", str(tiny_dir), "--corpus", str(corpus), "--method", "fl-rag",
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


def test_ask_answer_options_picks_an_option_and_says_so(tiny_dir: Path, corpus: Path, capsys) -> None:
    question = "Who is older, Kasper Schmeichel or Peter Schmeichel?"
    args = ["ask", question, "--model", str(tiny_dir), "--corpus", str(corpus), "--method", "sr-rag",
            "--max-new-tokens", "24", "--top-k", "1", "--json"]
    assert main([*args, "--answer-options"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["answer_options"] == ["Kasper Schmeichel", "Peter Schmeichel"]
    assert data["answer"].rstrip(".").endswith(("So the answer is Kasper Schmeichel", "So the answer is Peter Schmeichel"))
    assert main(args) == 0
    assert "answer_options" not in json.loads(capsys.readouterr().out)


def test_ask_stream_keeps_the_unfinished_sentence_and_forces_the_phrase_after_it(tiny_dir: Path, corpus: Path,
                                                                               capsys) -> None:
    """The random model writes no complete sentence in its tokens (8, less the forced phrase and the answer after
    it); the engine keeps them, closes the sentence and forces "So the answer is" (the answer options read the span
    after it): the stream printed every token once, in order, with no rewind."""
    args = ["ask", "Who is older, Kasper Schmeichel or Peter Schmeichel?", "--model", str(tiny_dir), "--corpus",
            str(corpus), "--method", "sr-rag", "--answer-options", "--max-new-tokens", "8"]
    assert main([*args, "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)["answer"]
    assert main([*args, "--stream"]) == 0
    out = capsys.readouterr().out
    assert not answer.startswith("So the answer is") and ". So the answer is" in answer
    assert "So the answer is" in out and "[" + "the text after here dropped" not in out
    assert "kept: the draft" not in out
