"""The per-question JSONL files of ``active-rag eval``: reading them back safely, and counting saved rows.

A run appends one JSON object per line and flushes after each question, so a killed run (SIGKILL, a full
disk, a power cut) can leave a last line that is cut off, not valid UTF-8, or valid JSON without its
newline. :func:`read_rows_file` reads every complete row and says whether the file must be rewritten before
anything is appended to it, so that a resumed run never glues its first row onto a damaged line.

Rows made with other engine settings (another threshold, e.g. a calibration cached since the last run, another
generation length) are never deleted: :func:`set_aside_rows` moves them to ``other-settings/<file stem>.<engine
key>.jsonl`` beside the method's file, and :func:`restore_rows` brings them back when a later run has those
settings again, so switching back resumes instead of answering again.

A question that failed (an :class:`~active_rag.errors.ActiveRAGError`: the endpoint or the retriever down, out
of memory) is written as a row with an ``error`` field (:func:`is_failed`): a record of the failure, never a
score. :func:`pick_rows` keeps one row per question (a finished row over a failed one, else the later one), and
:func:`compact_rows_file` rewrites a file that holds a question more than once, so that a failed question
answered on resume, or rows written twice, leave one line per question.
"""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "OTHER_SETTINGS_DIR",
    "compact_rows_file",
    "count_saved_rows",
    "forget_set_aside",
    "format_failures",
    "is_failed",
    "pick_rows",
    "read_rows_file",
    "restore_rows",
    "rows_on_disk",
    "set_aside_rows",
    "write_rows_file",
]

OTHER_SETTINGS_DIR = "other-settings"


def read_rows_file(path: Path) -> tuple[list[Any], list[int], bool]:
    """``(values, bad_lines, needs_rewrite)`` of a JSONL file.

    ``values`` are the parsed JSON values of the lines that decode as UTF-8 and parse as JSON, in order;
    ``bad_lines`` the 1-based numbers of the lines that do not (e.g. a row cut off mid-write); ``needs_rewrite``
    is true when a line is bad or the file does not end with a newline (a valid last row without its newline
    is kept, and the rewrite adds the newline).
    """
    data = path.read_bytes()
    values: list[Any] = []
    bad: list[int] = []
    for lineno, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            values.append(json.loads(raw.decode("utf-8")))
        except (UnicodeDecodeError, json.JSONDecodeError):
            bad.append(lineno)
    missing_newline = bool(data.strip()) and not data.endswith(b"\n")
    return values, bad, bool(bad) or missing_newline


def write_rows_file(path: Path, rows: Iterable[Any]) -> None:
    """Replace ``path`` with one JSON line per row, atomically (a temporary file, then a rename)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    tmp.replace(path)


def is_failed(row: dict[str, Any]) -> bool:
    """Whether ``row`` records a failed question (an ``error`` field) rather than an answer."""
    return bool(row.get("error"))


def pick_rows(values: Iterable[Any], key: str | None = None) -> dict[str, dict[str, Any]]:
    """One row per question id, in the order the ids first appear: a finished row wins over a failed one, and
    among rows of the same kind the later one wins. ``key``: only rows with this ``engine_key``; values that are
    not rows (no ``id``) are left out."""
    picked: dict[str, dict[str, Any]] = {}
    for row in values:
        if not isinstance(row, dict) or "id" not in row or (key is not None and row.get("engine_key") != key):
            continue
        qid = str(row["id"])
        old = picked.get(qid)
        if old is not None and is_failed(row) and not is_failed(old):
            continue  # a failure never replaces an answer
        picked[qid] = row
    return picked


def compact_rows_file(path: Path) -> int:
    """Rewrite ``path`` so that it holds each question once per engine key (:func:`pick_rows`), when it holds one
    more than once; lines that are not rows (a line cut off by a killed run) are dropped then, with a warning.
    Returns the number of lines removed (0: the file is left as it is)."""
    if not path.is_file():
        return 0
    values, bad, _ = read_rows_file(path)
    by_key: dict[str, list[Any]] = {}
    for row in values:
        if isinstance(row, dict) and "id" in row:
            by_key.setdefault(str(row.get("engine_key")), []).append(row)
    kept = [row for rows in by_key.values() for row in pick_rows(rows).values()]
    removed = len(values) - len(kept)
    if removed == 0:
        return 0
    order = {id(row): n for n, row in enumerate(values)}
    kept.sort(key=lambda row: order[id(row)])
    if bad:
        warnings.warn(f"{path}: dropped {len(bad)} row(s) that are malformed (malformed line(s) "
                      f"{', '.join(map(str, bad[:5]))}{', ...' if len(bad) > 5 else ''}); they will be rerun.", stacklevel=2)
    write_rows_file(path, kept)
    return removed + len(bad)


def rows_on_disk(path: Path, key: str | None) -> dict[str, dict[str, Any]]:
    """The rows of ``path`` with engine key ``key`` (any when None), one per question (:func:`pick_rows`)."""
    if not path.is_file():
        return {}
    values, _, _ = read_rows_file(path)
    return pick_rows(values, key)


def format_failures(failures: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """The failed questions as a markdown section (count and first error per method), or ``""`` when none failed."""
    lines = [f"| {method} | {len(rows)} | {rows[0]['id']}: {str(rows[0]['error']).splitlines()[0][:200]} |"
             for method, rows in failures.items() if rows]
    if not lines:
        return ""
    return ("\n## Failed questions\n\nNot scored; a rerun of the same command (resume) answers them again.\n\n"
            "| Method | Failed | First error |\n|---|---:|---|\n" + "\n".join(lines) + "\n")


def count_saved_rows(paths: Iterable[Path]) -> int:
    """How many questions the existing files among ``paths`` hold a finished row of (failed rows not counted,
    each question once)."""
    total = 0
    for path in paths:
        if path.is_file():
            values, _, _ = read_rows_file(path)
            total += sum(1 for row in pick_rows(values).values() if not is_failed(row))
    return total


def _aside_path(path: Path, key: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in key) or "unknown"
    return path.parent / OTHER_SETTINGS_DIR / f"{path.stem}.{safe}.jsonl"


def set_aside_rows(path: Path, rows: Iterable[dict[str, Any]]) -> list[Path]:
    """Move ``rows`` (from ``path``, made with other settings) to one file per engine key under
    ``other-settings/``, merged by question id with rows set aside before (the newer row wins). Returns the
    files written."""
    by_key: dict[str, dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_key.setdefault(str(row.get("engine_key") or "unknown"), {})[str(row["id"])] = row
    written = []
    for key, new in by_key.items():
        target = _aside_path(path, key)
        target.parent.mkdir(parents=True, exist_ok=True)
        merged: dict[str, dict[str, Any]] = {}
        if target.is_file():
            old, _, _ = read_rows_file(target)
            merged.update((str(v["id"]), v) for v in old if isinstance(v, dict) and "id" in v)
        merged.update(new)
        write_rows_file(target, merged.values())
        written.append(target)
    return written


def restore_rows(path: Path, key: str) -> tuple[list[dict[str, Any]], Path | None]:
    """The rows set aside from ``path`` with engine key ``key`` and their file (``([], None)`` when there are
    none). The caller writes them back into ``path`` first, then calls :func:`forget_set_aside` on the file."""
    source = _aside_path(path, key)
    if not source.is_file():
        return [], None
    values, _, _ = read_rows_file(source)
    return [v for v in values if isinstance(v, dict) and "id" in v], source


def forget_set_aside(source: Path) -> None:
    """Remove a file of set-aside rows once they are back in the method's file (and its folder when empty)."""
    source.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        source.parent.rmdir()  # only when empty
