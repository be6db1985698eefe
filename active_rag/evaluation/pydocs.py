"""pydocs: a user's documentation folder as an evaluation set (not Wikipedia).

``pydocs/docs/`` holds one Markdown file per third-party Python package (its METADATA: a ``# name version`` line,
header fields such as ``Author:``, ``Requires-Python:``, ``License:``, then the long description), and
``pydocs/questions_dev.jsonl`` questions read from those headers (loaded by
:func:`~active_rag.evaluation.datasets.load_dataset`) (``question_id``, ``type``, ``question_text``,
``answers`` (the gold first, then accepted forms), ``supporting_files``, ``subject``). The folder is read and cut
into passages exactly as ``active-rag ask --corpus DIR`` and :meth:`~active_rag.retrieval.bm25.BM25Index.from_path`
do (:func:`folder_passages`), so the scores are those a user of the library gets on such a folder.

**Gold passages** (:func:`gold_chunks`): of each supporting file, the first chunk that holds the header field the
question asks about (consecutive chunks overlap, so a line may be in two): ``Author``/``Author-email`` (author, same-author and dep-author questions), ``Requires-Python``
(python, compare-python, dep-python) or ``License``/``License-Expression`` (license); for the two-hop types the
subject's own file contributes the first chunk that lists the dependency (its ``Requires-Dist`` line). When a file
has no such chunk (a field the header lacks) all its chunks count, so that a question never has no gold.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from active_rag.errors import CorpusError
from active_rag.types import Passage

__all__ = ["FIELDS_BY_TYPE", "file_of", "folder_index", "folder_passages", "folder_signature", "gold_chunks",
           "passages_digest"]

#: The header fields that answer each question type (the subject's file of a two-hop question: see module doc).
FIELDS_BY_TYPE: dict[str, tuple[str, ...]] = {
    "author": ("Author", "Author-email"),
    "same-author": ("Author", "Author-email"),
    "dep-author": ("Author", "Author-email"),
    "python": ("Requires-Python",),
    "compare-python": ("Requires-Python",),
    "dep-python": ("Requires-Python",),
    "license": ("License", "License-Expression"),
}
_TWO_HOP = ("dep-author", "dep-python")


def folder_signature(root: Path) -> str:
    """A short hash of every file under ``root`` (relative path, size, modification time): a folder corpus's
    cache key."""
    h = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        st = f.stat()
        h.update(f"{f.relative_to(root).as_posix()}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:12]


@functools.lru_cache(maxsize=4)
def _folder_index(root: str, signature: str) -> Any:
    from active_rag.retrieval.bm25 import BM25Index

    return BM25Index.from_path(root)


def folder_index(root: Path) -> Any:
    """The BM25 index of a folder corpus as ``--corpus DIR`` builds it (default chunking), once per process and
    folder state."""
    return _folder_index(str(root.resolve()), folder_signature(root))


def folder_passages(root: Path) -> list[Passage]:
    """The passages of a folder corpus, cut as ``--corpus DIR`` cuts them (:func:`folder_index`)."""
    return list(folder_index(root).passages)


def passages_digest(root: Path) -> str:
    """A short hash of the passages a folder corpus is cut into (ids, titles, texts): rows answered over other
    passages (other chunking rules) never resume one another."""
    h = hashlib.sha256()
    for p in folder_passages(root):
        h.update(f"{p.id}\x00{p.title}\x00{p.text}\x01".encode())
    return h.hexdigest()[:12]


def file_of(passage: Passage) -> str:
    """The file (relative path) a folder passage was cut from: its id without the ``#k`` chunk suffix."""
    return str(passage.metadata.get("source") or passage.id).split("#", 1)[0]


def _has_field(text: str, fields: Sequence[str]) -> bool:
    return any(re.search(rf"(?m)^\s*{re.escape(f)}:\s*\S", text) for f in fields)


def _lists_dependency(text: str, dependency: str) -> bool:
    """Whether ``text`` has a ``Requires-Dist:`` line naming ``dependency`` (names compare as PEP 503 does)."""
    want = re.sub(r"[-_.]+", "-", dependency).lower()
    for m in re.finditer(r"(?m)^\s*Requires-Dist:\s*([A-Za-z0-9][A-Za-z0-9._-]*)", text):
        if re.sub(r"[-_.]+", "-", m.group(1)).lower() == want:
            return True
    return False


def gold_chunks(qtype: str, supporting_files: Sequence[str], by_file: dict[str, list[Passage]]) -> list[str]:
    """The gold passage ids of a question (see the module's docstring), in file then chunk order."""
    fields = FIELDS_BY_TYPE.get(qtype, ())
    gold: list[str] = []
    for n, name in enumerate(supporting_files):
        chunks = by_file.get(name, [])
        if qtype in _TWO_HOP and n == 0 and len(supporting_files) > 1:
            dependency = Path(supporting_files[1]).stem
            chosen = [p for p in chunks if _lists_dependency(p.text, dependency)]
        else:
            chosen = [p for p in chunks if _has_field(p.text, fields)]
        gold.extend(p.id for p in (chosen[:1] or chunks))  # overlapping chunks repeat a line: its first one
    return gold
