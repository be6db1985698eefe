"""Two-hop questions over the pydocs folder that its dev set does not ask: a held-out check of rules chosen on it.

The pydocs dev set (``../shared/data/pydocs/questions_dev.jsonl``) asks 60 two-hop questions ("P depends on a package
described as "S". Who is the author of that package?" / "What is the minimum Python version that package
requires?"), and rules were chosen on exactly those. This script writes more questions of the same two templates
from the same files' headers, on packages and dependencies no dev two-hop question names or quotes, into a data
folder that ``active-rag eval --dataset pydocs --data-dir OUT`` reads (``OUT/pydocs/docs`` links to the folder)::

    python research/pydocs_heldout.py --data-dir ../shared/data --out /tmp/pydocs-heldout --per-type 20

A pair qualifies when P's header lists D in a ``Requires-Dist`` line that is not an extra's, D's file is in the
folder and its ``Summary`` is unique there (the quotation must name one package), and D's header states what is
asked: its author (``Author:``, or the name of ``Author-email:``) or its minimum Python (``Requires-Python: >=X``).
The gold is that field as the dev set writes it (``3.10`` and ``>=3.10``; the header's ``3.10.0`` is accepted too);
``supporting_files`` are P's and D's files. Pairs are drawn with ``--seed``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections.abc import Sequence
from pathlib import Path

_FIELD = re.compile(r"^([A-Za-z-]+):\s*(.*?)\s*$")
_DIST = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)")
_MIN_PYTHON = re.compile(r">=\s*(\d+(?:\.\d+)*)")
_QUOTED_PAIR = re.compile(r'^(\S+) depends on a package described as "(.*)"\.')


def key(name: str) -> str:
    """A package name as PyPI compares them: lower case, runs of ``-``, ``_`` and ``.`` alike."""
    return re.sub(r"[-_.]+", "-", name).lower()


def header(path: Path) -> dict[str, list[str]]:
    """The header fields of a pydocs file (up to the first blank line after them), each with every value given."""
    fields: dict[str, list[str]] = {}
    started = False
    for line in path.read_text(encoding="utf-8").splitlines()[1:]:
        found = _FIELD.match(line)
        if found:
            started = True
            fields.setdefault(found.group(1), []).append(found.group(2))
        elif started and not line.strip():
            break
    return fields


def author(fields: dict[str, list[str]]) -> str | None:
    """The author a header states: ``Author:``, else the name before the address of ``Author-email:``."""
    for value in fields.get("Author", []):
        if value and "@" not in value:
            return value
    for value in fields.get("Author-email", []):
        name = value.split("<")[0].strip().strip('"')
        if name and "@" not in name:
            return name.split(",")[0].strip()
    return None


def min_python(fields: dict[str, list[str]]) -> tuple[str, str] | None:
    """The minimum Python a header requires, as the dev set writes it (``3.10.0`` -> ``3.10``) and as written."""
    for value in fields.get("Requires-Python", []):
        found = _MIN_PYTHON.search(value)
        if found:
            written = found.group(1)
            parts = written.split(".")
            short = ".".join(parts[:2]) if len(parts) > 2 and all(p == "0" for p in parts[2:]) else written
            return short, written
    return None


def dependencies(fields: dict[str, list[str]]) -> list[str]:
    """The packages a header requires outside an extra, in order, each once."""
    out: list[str] = []
    for value in fields.get("Requires-Dist", []):
        if "extra ==" in value:
            continue
        found = _DIST.match(value)
        if found and key(found.group(1)) not in out:
            out.append(key(found.group(1)))
    return out


def questions(folder: Path, dev: Path, per_type: int, seed: int) -> list[dict[str, object]]:
    """``per_type`` questions of each two-hop type on pairs the dev set does not use (see the module docstring)."""
    files = {key(p.stem): p for p in sorted(folder.glob("*.md"))}
    fields = {k: header(p) for k, p in files.items()}
    summaries: dict[str, list[str]] = {}
    for k, f in fields.items():
        summary = (f.get("Summary") or [""])[0].rstrip(".").strip()
        if summary:
            summaries.setdefault(summary, []).append(k)
    used: set[str] = set()  # the packages and summaries of the dev set's two-hop questions: neither is asked again
    for line in dev.read_text(encoding="utf-8").splitlines():
        found = _QUOTED_PAIR.match(json.loads(line)["question_text"])
        if found:
            used.update((key(found.group(1)), found.group(2)))
    pairs = []
    for package, f in fields.items():
        for dep in dependencies(f):
            if dep == package or dep not in fields:
                continue
            summary = (fields[dep].get("Summary") or [""])[0].rstrip(".").strip()
            if (summary and len(summaries[summary]) == 1 and '"' not in summary and package not in used
                    and summary not in used):
                pairs.append((package, dep, summary))
    rng = random.Random(seed)
    rng.shuffle(pairs)
    out: list[dict[str, object]] = []
    for kind, ask in (("dep-author", "Who is the author of that package?"),
                      ("dep-python", "What is the minimum Python version that package requires?")):
        taken = 0
        for package, dep, summary in pairs:
            if taken == per_type:
                break
            if kind == "dep-author":
                gold = author(fields[dep])
                answers = [gold] if gold else []
            else:
                version = min_python(fields[dep])
                answers = ([version[0], f">={version[0]}"] + ([version[1]] if version[1] != version[0] else [])
                           if version else [])
            if not answers:
                continue
            name = files[package].stem
            out.append({"question_id": f"heldout-{kind}-{name}-{files[dep].stem}", "type": kind,
                        "question_text": f'{name} depends on a package described as "{summary}". {ask}',
                        "answers": answers, "supporting_files": [files[package].name, files[dep].name],
                        "subject": name})
            taken += 1
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python research/pydocs_heldout.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data"), help="the folder holding pydocs/")
    parser.add_argument("--out", type=Path, required=True, help="a data folder to write (OUT/pydocs/)")
    parser.add_argument("--per-type", type=int, default=20, help="questions of each two-hop type (default 20)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    source = args.data_dir / "pydocs"
    if not (source / "docs").is_dir() or not (source / "questions_dev.jsonl").is_file():
        print(f"error: {source} holds no docs/ and questions_dev.jsonl: give --data-dir the folder that holds pydocs/.",
              file=sys.stderr)
        return 2
    if args.per_type < 1:
        print("error: --per-type must be at least 1.", file=sys.stderr)
        return 2
    rows = questions(source / "docs", source / "questions_dev.jsonl", args.per_type, args.seed)
    target = args.out / "pydocs"
    target.mkdir(parents=True, exist_ok=True)
    docs = target / "docs"
    if not docs.exists():
        docs.symlink_to((source / "docs").resolve(), target_is_directory=True)
    (target / "questions_dev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    kinds = {k: sum(r["type"] == k for r in rows) for k in ("dep-author", "dep-python")}
    print(f"{len(rows)} questions ({kinds['dep-author']} dep-author, {kinds['dep-python']} dep-python) in "
          f"{target / 'questions_dev.jsonl'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
