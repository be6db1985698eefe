"""pydocs: a documentation folder as an evaluation set, read as `--corpus DIR` reads it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from active_rag.errors import CorpusError, InvalidOptionError
from active_rag.evaluation.breakdown import question_types
from active_rag.evaluation.datasets import load_dataset
from active_rag.evaluation.method_engines import load_corpus_index
from active_rag.evaluation.prompts import build_eval_prompt
from active_rag.retrieval.bm25 import BM25Index

LONG = " ".join(f"Sentence number {i} of the long description says little." for i in range(120))


def _data(tmp_path: Path) -> Path:
    root = tmp_path / "data" / "pydocs"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "alpha.md").write_text(
        "# alpha 1.0\n\nName: alpha\nSummary: Fast alpha things\nAuthor: Ann Lee\nRequires-Python: >=3.10\n"
        "Requires-Dist: beta>=2\n\n" + LONG + "\n", encoding="utf-8")
    (root / "docs" / "beta.md").write_text(
        "# beta 2.0\n\nName: beta\nSummary: Beta helpers for alpha\nAuthor-email: Bo Chen <bo@example.org>\n"
        "License-Expression: MIT\nRequires-Python: >=3.8\n", encoding="utf-8")
    rows = [
        {"question_id": "q1", "type": "python", "question_text": "What is the minimum Python version required by alpha?",
         "answers": ["3.10", ">=3.10"], "supporting_files": ["alpha.md"], "subject": "alpha"},
        {"question_id": "q2", "type": "dep-author", "question_text": "alpha depends on a package described as "
         "\"Beta helpers for alpha\". Who is the author of that package?", "answers": ["Bo Chen"],
         "supporting_files": ["alpha.md", "beta.md"], "subject": "alpha"},
        {"question_id": "q3", "type": "license", "question_text": "What license is the beta package released under?",
         "answers": ["MIT"], "supporting_files": ["beta.md"], "subject": "beta"},
    ]
    (root / "questions_dev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return tmp_path / "data"


def test_gold_chunks_are_those_holding_the_field_asked_about(tmp_path: Path) -> None:
    data = _data(tmp_path)
    examples = load_dataset("pydocs", data)
    assert [e.kind for e in examples] == ["qa"] * 3
    passages = {p.id: p for p in BM25Index.from_path(data / "pydocs" / "docs").passages}
    assert any(pid.startswith("alpha.md#") for pid in passages)  # the long file is cut into chunks
    q1, q2, q3 = examples
    assert len(q1.gold_passage_ids) == 1 and "Requires-Python" in passages[q1.gold_passage_ids[0]].text
    first, second = q2.gold_passage_ids
    assert "Requires-Dist: beta" in passages[first].text and second == "beta.md"
    assert q3.gold_passage_ids == ["beta.md"] and q3.answers == ["MIT"]
    assert question_types(examples) == {"q1": "python", "q2": "dep-author", "q3": "license"}


def test_the_eval_reads_the_folder_as_the_cli_does_and_refuses_hidden_titles(tmp_path: Path) -> None:
    data = _data(tmp_path)
    index, folder, loaded = load_corpus_index("pydocs", data)
    assert folder == data / "pydocs" / "docs" and not loaded
    assert [p.id for p in index.passages] == [p.id for p in BM25Index.from_path(folder).passages]
    with pytest.raises(InvalidOptionError, match="--hide-titles"):
        load_corpus_index("pydocs", data, hide_titles=True)


def test_a_malformed_pydocs_record_names_the_file_and_line(tmp_path: Path) -> None:
    data = _data(tmp_path)
    path = data / "pydocs" / "questions_dev.jsonl"
    path.write_text(path.read_text(encoding="utf-8") + json.dumps({"question_id": "q4", "question_text": "x?",
                                                                   "answers": [], "supporting_files": []}) + "\n")
    with pytest.raises(CorpusError, match="line 4.*answers"):
        load_dataset("pydocs", data)


def test_the_prompt_is_hotpotqas() -> None:
    assert build_eval_prompt("pydocs", "Q?") == build_eval_prompt("hotpotqa", "Q?")


@pytest.mark.parametrize("earlier", ["continuation", "continuation+premise", "continuation+premise+described"])
def test_rows_written_with_earlier_link_rules_resume_but_those_with_a_premise(
        tiny_lm, tmp_path: Path, earlier: str) -> None:
    """Rows of a method that follows links over a folder, written before a name only a question's premise states
    faced the continuation rule (``link_rules: "continuation"``) or before the premise's pages left the prompt
    (``"continuation+premise"``), resume under the new key: a question of one sentence is carried over, one with a
    premise ("alpha depends on ... . Who is ...?") is answered again, and so is one whose look read a name its
    passages mention (before ``subject``); the rows it replaces are set aside."""
    from active_rag.evaluation import method_engines
    from active_rag.evaluation.runner import EvalConfig, run_eval
    from active_rag.evaluation.settled import followed_mentioned_names

    data = _data(tmp_path)

    def config() -> EvalConfig:
        return EvalConfig(dataset="pydocs", data_dir=data, out_dir=tmp_path / "out", index_cache=tmp_path / "idx",
                          methods=["sr-rag-choose"], max_new_tokens=6, plots=False)

    with pytest.MonkeyPatch.context() as mp:  # the key as it was
        mp.setattr(method_engines._engine_key, "__defaults__", (None, earlier))
        old = run_eval(config(), lm=tiny_lm, progress=False)
    path = old.out_dir / "sr-rag-choose.jsonl"
    written = {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}
    run_eval(config(), lm=tiny_lm, progress=False)
    rows = {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}
    assert sorted(rows) == ["q1", "q2", "q3"]
    carried = {q for q, r in rows.items() if "settled_from" in r}
    # q2 has a premise; a row whose look read a name its passages mention may now leave it out (subject)
    assert carried == {q for q in ("q1", "q3") if not followed_mentioned_names(written[q])} and carried
    assert all(rows[q]["engine_key"] != written[q]["engine_key"] for q in rows)
    aside = [json.loads(line) for p in (old.out_dir / "other-settings").rglob("*.jsonl") for line in p.read_text().splitlines()]
    assert len(aside) == len(written)  # nothing lost


def test_rows_written_before_a_version_asked_got_the_version_resume_without_the_model(tiny_lm, tmp_path: Path) -> None:
    """Rows of a preset that settles versions, written before a question that asks for a version got the version
    as its short answer (no ``version_asked`` in the key), resume under the new key without the model: every row
    carried over (none answered again), each settled from what it holds."""
    from active_rag.engine.answer_steps import SettleVersions
    from active_rag.evaluation.runner import EvalConfig, run_eval

    data = _data(tmp_path)

    def config() -> EvalConfig:
        return EvalConfig(dataset="pydocs", data_dir=data, out_dir=tmp_path / "out", index_cache=tmp_path / "idx",
                          methods=["sr-rag-choose"], max_new_tokens=6, plots=False)

    with pytest.MonkeyPatch.context() as mp:  # the step as it was: no version asked
        mp.setattr(SettleVersions.__init__, "__defaults__", ("passages", False, "settle-versions", False))
        old = run_eval(config(), lm=tiny_lm, progress=False)
    path = old.out_dir / "sr-rag-choose.jsonl"
    written = {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}
    with pytest.warns(UserWarning, match=r"carried over 3 row\(s\).*version-asked"):
        run_eval(config(), lm=tiny_lm, progress=False)
    rows = {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}
    assert sorted(rows) == ["q1", "q2", "q3"] and all(rows[q]["settled_from"] == written[q]["engine_key"] for q in rows)
    assert all(rows[q]["prediction"] == written[q]["prediction"] for q in rows)  # not answered again


def test_the_held_out_two_hop_questions_skip_extras_ambiguous_summaries_and_what_the_dev_set_asks(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from research.pydocs_heldout import main, questions

    docs = tmp_path / "data" / "pydocs" / "docs"
    docs.mkdir(parents=True)
    pages = {
        "alpha": "Name: alpha\nSummary: Alpha\nRequires-Dist: beta>=2\nRequires-Dist: gamma\n"
                 'Requires-Dist: delta; extra == "x"\n',
        "beta": "Name: beta\nSummary: Beta helpers.\nAuthor-email: Bo Chen <bo@example.org>\nRequires-Python: >=3.10.0\n",
        "gamma": "Name: gamma\nSummary: Shared words\nAuthor: Gil\n",
        "epsilon": "Name: epsilon\nSummary: Shared words\n",  # the same summary: a quotation naming neither
        "delta": "Name: delta\nSummary: Delta things\nAuthor: Dee\n",  # only an extra's dependency
        "zeta": "Name: zeta\nSummary: Zeta\nRequires-Dist: beta\n",  # a premise the dev set names
    }
    for name, text in pages.items():
        (docs / f"{name}.md").write_text(f"# {name} 1.0\n\n{text}\nLong description.\n", encoding="utf-8")
    dev = tmp_path / "data" / "pydocs" / "questions_dev.jsonl"
    dev.write_text(json.dumps({"question_text": 'zeta depends on a package described as "Other". Who is the author '
                                                "of that package?"}) + "\n", encoding="utf-8")
    rows = questions(docs, dev, 5, 0)
    assert [(r["type"], r["answers"], r["supporting_files"]) for r in rows] == [
        ("dep-author", ["Bo Chen"], ["alpha.md", "beta.md"]),
        ("dep-python", ["3.10", ">=3.10", "3.10.0"], ["alpha.md", "beta.md"])]
    assert rows[0]["question_text"] == 'alpha depends on a package described as "Beta helpers". Who is the author of that package?'
    out = tmp_path / "held"
    assert main(["--data-dir", str(tmp_path / "data"), "--out", str(out), "--per-type", "5"]) == 0
    assert (out / "pydocs" / "docs" / "beta.md").is_file() and len((out / "pydocs" / "questions_dev.jsonl").read_text().splitlines()) == 2
    assert load_dataset("pydocs", out)[0].question == rows[0]["question_text"]
    assert main(["--data-dir", str(tmp_path / "nowhere"), "--out", str(out)]) == 2
    assert "holds no docs/" in capsys.readouterr().err


def test_a_row_written_before_subject_is_carried_over_unless_its_look_read_a_mentioned_name() -> None:
    """The ``subject`` rule only leaves links out: a row whose looks read only the question's own names (or none) is
    the row it writes; one that read a name a passage mentions is answered again."""
    from active_rag.evaluation.settled import convert_row

    own = {"id": "a", "question": "Who is the author of joblib?", "engine_key": "old",
           "trace": [{"linked_from": {}}, {"linked_from": {"joblib.md#1": None}}]}
    mentioned = {**own, "id": "b", "trace": [{"linked_from": {"dask.md": "joblib.md#1"}}]}
    assert convert_row(own, "new", "subject")["settled_from"] == "old"
    assert convert_row(mentioned, "new", "subject") is None
    assert convert_row(mentioned, "new", "described") is not None  # only the subject rule asks it again
