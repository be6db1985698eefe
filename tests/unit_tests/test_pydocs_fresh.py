"""research/pydocs_fresh.py: a documentation folder of other packages, written as pydocs writes one (no network)."""

from __future__ import annotations

import json
from pathlib import Path

from research.pydocs_fresh import as_markdown, main, questions

METADATA = """Metadata-Version: 2.4
Name: {name}
Version: 1.0
Summary: {summary}.
Author: {author}
License: BSD
   with a second line
Classifier: Programming Language :: Python
Requires-Python: >={python}
{requires}Description-Content-Type: text/markdown

# {name}

The long description of {name}.
"""


def _write(folder: Path, name: str, author: str, python: str, requires: str = "", summary: str | None = None) -> None:
    text = METADATA.format(name=name, summary=summary or f"The {name} library", author=author, python=python,
                           requires="".join(f"Requires-Dist: {r}\n" for r in requires.split()) if requires else "")
    filename, markdown = as_markdown(text)
    (folder / filename).write_text(markdown, encoding="utf-8")


def test_a_metadata_file_is_written_as_pydocs_writes_one() -> None:
    filename, text = as_markdown(METADATA.format(name="alpha", summary="Alpha", author="Ann", python="3.9",
                                                 requires="Requires-Dist: beta>=1\nRequires-Dist: gamma; extra == 'x'\n"))
    lines = text.split("\n")
    assert filename == "alpha.md" and lines[:3] == ["# alpha 1.0", "", "Name: alpha  "]
    assert "License: BSD with a second line  " in lines
    assert not any(line.startswith(("Metadata-Version", "Classifier", "Description-Content-Type")) for line in lines)
    assert "Requires-Dist: beta>=1  " in lines and text.rstrip().endswith("The long description of alpha.")


def test_questions_of_the_seven_types_read_their_answers_from_the_headers(tmp_path: Path) -> None:
    folder = tmp_path / "pydocs" / "docs"
    folder.mkdir(parents=True)
    _write(folder, "alpha", "Ann", "3.9", "beta>=1 gamma")
    _write(folder, "beta", "Bob", "3.11", summary="Beta does b")
    _write(folder, "gamma", "Ann", "3.8", summary="Gamma does g")
    _write(folder, "delta", "Dee", "3.10", "gamma")
    rows = questions(folder, per_type=2, seed=0)
    kinds = {r["type"] for r in rows}
    assert kinds == {"author", "python", "license", "dep-author", "dep-python", "compare-python", "same-author"}
    by_subject = {(r["type"], r["subject"]): r for r in rows}
    if ("author", "beta") in by_subject:
        assert by_subject[("author", "beta")]["answers"] == ["Bob"]
    for r in rows:
        if r["type"] == "dep-author" and "Beta does b" in str(r["question_text"]):
            assert r["answers"] == ["Bob"] and r["supporting_files"] == ["alpha.md", "beta.md"]
        if r["type"] == "dep-python" and "Gamma does g" in str(r["question_text"]):
            assert r["answers"][:2] == ["3.8", ">=3.8"]
        if r["type"] == "compare-python":
            a, b = str(r["question_text"]).rstrip("?").split(", ")[1].split(" or ")
            versions = {"alpha": 9, "beta": 11, "gamma": 8, "delta": 10}
            assert r["answers"] == [a if versions[a] > versions[b] else b]
        if r["type"] == "same-author":
            pair = set(str(r["question_text"])[3:].split(" have")[0].split(" and "))
            assert r["answers"] == (["yes"] if pair == {"alpha", "gamma"} else ["no"])
    assert any(r["type"] == "same-author" and r["answers"] == ["yes"] for r in rows)


def test_the_questions_command_writes_the_pydocs_layout(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "pydocs" / "docs"
    folder.mkdir(parents=True)
    for i, (name, author) in enumerate([("alpha", "Ann"), ("beta", "Bob"), ("gamma", "Ann"), ("delta", "Dee")]):
        _write(folder, name, author, f"3.{8 + i}", "beta" if name == "alpha" else "")
    assert main(["questions", "--out", str(tmp_path), "--per-type", "1"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "pydocs" / "questions_dev.jsonl").read_text().splitlines()]
    assert rows and all({"question_id", "type", "question_text", "answers", "supporting_files"} <= set(r) for r in rows)
    assert len({r["question_id"] for r in rows}) == len(rows)
    assert "questions in" in capsys.readouterr().out
