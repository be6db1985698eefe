"""Progress bars for the slow steps a user waits on (indexing a folder, embedding many texts): tqdm on standard
error, shown only when standard error is a terminal, so a program reading the output (``--json``), a pipe, a log file
and the test suite see nothing. ``enabled=False`` turns a bar off even on a terminal."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

__all__ = ["progress", "progress_shown"]

T = TypeVar("T")


def progress_shown(enabled: bool | None = None, stream: Any = None) -> bool:
    """Whether a bar is drawn: never with ``enabled=False``, else only when ``stream`` (default standard error) is a
    terminal and tqdm is installed."""
    if enabled is False:
        return False
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    if not (isatty and isatty()):
        return False
    try:
        import tqdm  # noqa: F401
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return False
    return True


def progress(items: Iterable[T], *, desc: str, total: int | None = None, unit: str = "it",
             enabled: bool | None = None) -> Iterator[T]:
    """``items``, drawn as a tqdm bar on standard error when :func:`progress_shown` says so, else as they are."""
    if not progress_shown(enabled):
        yield from items
        return
    from tqdm.auto import tqdm

    bar = tqdm(items, desc=desc, total=total, unit=unit, file=sys.stderr, leave=False, dynamic_ncols=True)
    try:
        yield from bar
    finally:
        bar.close()
