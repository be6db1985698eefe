"""A third documentation folder, prose this time: the Python language reference as a user's folder.

pydocs and the second folder (``pydocs_fresh.py``) are package headers with templated questions. This script writes
a folder of another kind: the 79 topics of the Python reference that ``pydoc`` serves offline
(``pydoc_data.topics``: statements, expressions, the execution model, the built-in types' methods; prose,
grammar and examples, no header fields), one plain-text file a topic, and beside it 45 hand-written questions
(``results/eval-heldout/pyref/questions_dev.jsonl``: one-fact questions, versions, yes/no, and two comparisons
across two topics), for ``active-rag eval --dataset pydocs --data-dir OUT``::

    python research/pyref.py --out /tmp/pyref

Nothing of the engine was chosen on these files or questions. The topics are those of the Python running the
script; the questions were written from Python 3.11's, and the script refuses another minor version unless
``--any-python`` is given (the files' SHA-256 is printed and written to ``OUT/pydocs/topics.sha256`` so a run says
which text it read). Each question's answer was checked to occur in its ``supporting_files`` (yes/no and
comparisons excepted).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

QUESTIONS = Path(__file__).resolve().parent.parent / "results" / "eval-heldout" / "pyref" / "questions_dev.jsonl"
PYTHON = (3, 11)


def topics() -> dict[str, str]:
    """The reference topics of the running Python: name -> text."""
    from pydoc_data.topics import topics as table

    return dict(table)


class FolderInUse(Exception):
    """``OUT/pydocs`` holds files this script did not write (pydocs itself, say): nothing is replaced."""


def write_folder(out: Path, questions: Path = QUESTIONS) -> str:
    """``out/pydocs/docs/<topic>.txt`` for every topic and ``out/pydocs/questions_dev.jsonl``; returns the topics'
    SHA-256 (over the names and texts in name order). A folder this script wrote before (its ``topics.sha256``) is
    written again; any other ``out/pydocs`` that is not empty raises :class:`FolderInUse`."""
    root = out / "pydocs"
    if root.is_dir() and any(root.iterdir()) and not (root / "topics.sha256").is_file():
        raise FolderInUse(f"{root} holds files pyref.py did not write; give --out a new or empty folder")
    docs = root / "docs"
    if docs.exists():
        shutil.rmtree(docs)
    docs.mkdir(parents=True)
    digest = hashlib.sha256()
    for name, text in sorted(topics().items()):
        (docs / f"{name}.txt").write_text(text, encoding="utf-8")
        digest.update(name.encode() + b"\0" + text.encode() + b"\0")
    shutil.copyfile(questions, out / "pydocs" / "questions_dev.jsonl")
    sha = digest.hexdigest()
    (out / "pydocs" / "topics.sha256").write_text(sha + "\n")
    return sha


def check_questions(questions: Path = QUESTIONS) -> list[str]:
    """The questions whose files are missing or whose answer (one of its forms) is not in their files' text
    (yes/no and comparisons are not checked for their answer)."""
    table = topics()
    problems = []
    for line in questions.read_text().splitlines():
        row = json.loads(line)
        stems = [Path(f).stem for f in row["supporting_files"]]
        if any(s not in table for s in stems):
            problems.append(f"{row['question_id']}: no such topic among {stems}")
            continue
        if row["type"] in ("yes-no", "compare"):
            continue
        text = " ".join(table[s] for s in stems).lower().replace('"', "").replace("*", "")
        forms = [a.lower().replace('"', "").replace("*", "") for a in row["answers"]]
        if not any(f in text for f in forms):
            problems.append(f"{row['question_id']}: no form of {row['answers']} in {stems}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="data folder to write (OUT/pydocs/...)")
    parser.add_argument("--any-python", action="store_true", help="write the topics of another Python minor version")
    args = parser.parse_args(argv)
    if sys.version_info[:2] != PYTHON and not args.any_python:
        print(f"pyref: the questions were written from Python {PYTHON[0]}.{PYTHON[1]}'s reference, this is "
              f"{sys.version_info[0]}.{sys.version_info[1]}: run it with Python {PYTHON[0]}.{PYTHON[1]} or pass "
              "--any-python", file=sys.stderr)
        return 2
    problems = check_questions()
    if problems:
        print("pyref: " + "; ".join(problems), file=sys.stderr)
        return 2
    try:
        sha = write_folder(args.out)
    except FolderInUse as error:
        print(f"pyref: {error}", file=sys.stderr)
        return 2
    print(f"{len(topics())} topics and {len(QUESTIONS.read_text().splitlines())} questions in {args.out / 'pydocs'} "
          f"(topics sha256 {sha[:16]})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
