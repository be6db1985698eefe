"""What the command line prints besides answers: the ``active-rag methods`` tables and the progress line that
``active-rag ask`` writes on a terminal while it generates.

Tables wrap their last column (a description) to the terminal's width instead of cutting it; a column is as wide
as its longest entry. Where the description would get fewer than :data:`MIN_WRAP` characters, it goes on the
lines below its row, indented.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import textwrap
import time
from collections.abc import Sequence
from typing import Any, TextIO

__all__ = ["MIN_WRAP", "ProgressLine", "format_table", "methods_json", "methods_text", "summary"]

_ROLE = re.compile(r":\w+:`~?([^`]+)`")

MIN_WRAP = 36
"""The narrowest description column: below it, descriptions go on their own lines under each row."""


def _role_text(match: re.Match[str]) -> str:
    """What a reST role reads as: its explicit title (``Title <target>``), else the target's last name."""
    content = match.group(1)
    if content.endswith(">") and "<" in content:
        return content[:content.rindex("<")].strip()
    return content.rsplit(".", 1)[-1]


def summary(obj: Any) -> str:
    """The first paragraph of ``obj``'s docstring, on one line, as plain text: a cross-reference role reads as its
    title or name (:func:`_role_text`) and literal marks go."""
    paragraph = (obj.__doc__ or "").strip().split("\n\n")[0]
    paragraph = _ROLE.sub(_role_text, paragraph).replace("``", "")
    return " ".join(paragraph.split())


def format_table(rows: Sequence[Sequence[str]], width: int, indent: str = "  ") -> list[str]:
    """``rows`` as aligned columns within ``width`` characters: every column but the last as wide as its longest
    entry, the last one (free text) wrapped at word boundaries; never cut."""
    if not rows:
        return []
    columns = len(rows[0])
    widths = [max(len(r[c]) for r in rows) for c in range(columns - 1)]
    left = len(indent) + sum(w + 2 for w in widths)
    room = width - left
    lines: list[str] = []
    for row in rows:
        head = indent + "".join(f"{cell:<{w}}  " for cell, w in zip(row[:-1], widths, strict=True))
        if room >= MIN_WRAP:
            wrapped = textwrap.wrap(row[-1], room, break_on_hyphens=False) or [""]
            lines.append((head + wrapped[0]).rstrip())
            lines.extend(" " * left + line for line in wrapped[1:])
        else:  # too narrow beside the other columns: the text goes below, indented
            lines.append(head.rstrip())
            below = indent + "    "
            lines.extend(textwrap.wrap(row[-1], max(width - len(below), 20), initial_indent=below,
                                       subsequent_indent=below, break_on_hyphens=False))
    return lines


def _width(out: TextIO) -> int:
    """The terminal's width ($COLUMNS, else the terminal's own), 100 when the output is not a terminal."""
    if "COLUMNS" in os.environ or (hasattr(out, "isatty") and out.isatty()):
        return max(shutil.get_terminal_size((100, 24)).columns, 40)
    return 100


def methods_json() -> str:
    """``active-rag methods --json``: every preset, trigger, query formulator and router, and the calibrated
    thresholds, as one JSON object."""
    from ..components.presets import PRESETS
    from ..components.queries import QUERIES
    from ..components.routing import ROUTERS
    from ..components.thresholds import calibration_entries
    from ..components.triggers import TRIGGERS

    return json.dumps({
        "presets": {n: {"trigger": p.trigger, "query": p.query, "description": p.description, "source": p.source,
                        "use_for": p.use_for} for n, p in PRESETS.items()},
        "triggers": {n: summary(c) for n, c in TRIGGERS.items()},
        "queries": {n: summary(c) for n, c in QUERIES.items()},
        "routers": {**{n: summary(c) for n, c in ROUTERS.items()}, "none": "always follow the method"},
        "calibrated_thresholds": calibration_entries(),
    }, indent=2)


def methods_text(out: TextIO | None = None) -> str:
    """``active-rag methods``: the presets, triggers, query formulators and routers as tables, then the calibrated
    thresholds, for a terminal of ``out``'s width."""
    from ..components.presets import PRESETS
    from ..components.queries import QUERIES
    from ..components.routing import ROUTERS
    from ..components.thresholds import cache_path, calibration_entries
    from ..components.triggers import TRIGGERS

    width = _width(out or sys.stdout)
    from ..components.presets import SOURCES

    lines = textwrap.wrap("Presets (--method): when to retrieve (trigger) and what with (query), by source, each with "
                          "what it is recommended for (recipes beyond these: docs/recipes.md)", width)
    for source in SOURCES:
        lines += ["", f"  {source}"]
        lines += format_table([("NAME", "TRIGGER", "QUERY", "DESCRIPTION")]
                              + [(n, p.trigger, p.query, f"{p.description}. Use for: {p.use_for}.")
                                 for n, p in PRESETS.items() if p.source == source], width)
    for title, table in (("Triggers (--trigger): when to retrieve", TRIGGERS),
                         ("Query formulators (--query): what to retrieve with", QUERIES)):
        lines += ["", title]
        lines += format_table([(n, summary(c)) for n, c in table.items()], width)
    lines += ["", "Routers (--router): whether to retrieve at all, decided before generating"]
    lines += format_table([*((n, summary(c)) for n, c in ROUTERS.items()), ("none", "no router: always follow the method")],
                          width)
    entries = calibration_entries()
    lines += ["", "Calibrated thresholds (theta='auto' uses them):", f"  {cache_path()}"]
    if entries:
        lines += format_table([(key, f"theta={e['theta']:.4g} (target {e['target_retrievals_per_question']:g} "
                                     f"retrievals/question, {e['questions']} questions)") for key, e in entries.items()],
                              width)
    else:
        lines += textwrap.wrap("none: presets use the profile's or the paper's threshold; run `active-rag calibrate`",
                               width, initial_indent="  ", subsequent_indent="  ")
    return "\n".join(lines) + "\n"


class ProgressLine:
    """One line on ``stream`` (standard error) that says how far the answer is while ``ask`` generates: tokens so
    far, retrievals and seconds, rewritten in place at most ten times a second and erased at the end. Off unless
    ``enabled`` (the command line turns it on only when standard error is a terminal, and never with ``--json`` or
    ``--stream``)."""

    def __init__(self, stream: TextIO, *, enabled: bool, interval: float = 0.1) -> None:
        self.stream = stream
        self.enabled = enabled
        self.interval = interval
        self.tokens = 0
        self.retrievals = 0
        self._start = time.monotonic()
        self._shown = 0.0
        self._length = 0

    def token(self, position: int) -> None:
        """An answer token at ``position`` (0-based) was written."""
        self.tokens = position + 1
        self._show()

    def retrieval(self) -> None:
        self.retrievals += 1
        self._show(force=True)

    def _show(self, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._shown < self.interval:
            return
        self._shown = now
        retrievals = f", {self.retrievals} retrieval{'s' if self.retrievals != 1 else ''}" if self.retrievals else ""
        text = (f"generating the answer: {self.tokens} token{'s' if self.tokens != 1 else ''}{retrievals}, "
                f"{now - self._start:.0f} s")
        self.stream.write("\r" + text.ljust(self._length))
        self.stream.flush()
        self._length = len(text)

    def close(self) -> None:
        """Erase the line (the answer is printed on a clean terminal)."""
        if self.enabled and self._length:
            self.stream.write("\r" + " " * self._length + "\r")
            self.stream.flush()
            self._length = 0
