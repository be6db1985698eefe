"""The per-question JSONL files of ``active-rag eval``: reading them back safely, and counting saved rows.

A run appends one JSON object per line and flushes after each question, so a killed run (SIGKILL, a full
disk, a power cut) can leave a last line that is cut off, not valid UTF-8, or valid JSON without its
newline. :func:`read_rows_file` reads every complete row and says whether the file must be rewritten before
anything is appended to it, so that a resumed run never glues its first row onto a damaged line.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["count_saved_rows", "read_rows_file"]


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


def count_saved_rows(paths: Iterable[Path]) -> int:
    """How many complete rows (JSON objects with an ``id``) the existing files among ``paths`` hold."""
    total = 0
    for path in paths:
        if path.is_file():
            values, _, _ = read_rows_file(path)
            total += sum(1 for v in values if isinstance(v, dict) and "id" in v)
    return total
