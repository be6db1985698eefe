"""The files of a saved BM25 index: where one may be written, its manifest, and the checks made when it is read.

:meth:`BM25Index.save <active_rag.retrieval.bm25.BM25Index.save>` writes bm25s's own files (``*.index.npy``,
``*.index.json``), ``passages.jsonl`` and ``names.json``, and last the manifest ``active_rag_index.json``: the
format version, the tokenizer settings, the passage count, what a folder corpus skipped, and under ``"files"`` the
size and sha256 of every other file. :func:`read_manifest` and :func:`verify_files` refuse, with one
:class:`~active_rag.errors.CorpusError` line naming the file and the fix, a manifest that cannot be read and any
file that is missing, unreadable, or not the bytes that were saved (a truncated, overwritten or shuffled file would
otherwise change what is retrieved without a word). ``names.json`` is the exception: it is built again from the
passages when it is missing or does not match (it is a cache of them). A manifest without ``"files"`` (an index
saved before the checksums were written) is read without the check: saving it again adds them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ..errors import CorpusError, IndexPathError

__all__ = [
    "CONFIG_NAME",
    "FORMAT_VERSION",
    "NAMES_NAME",
    "PASSAGES_NAME",
    "REBUILD",
    "check_index_target",
    "file_checksums",
    "is_index_file",
    "one_line",
    "read_manifest",
    "verify_files",
]

#: Files that :meth:`BM25Index.save` writes next to bm25s's own index files.
CONFIG_NAME = "active_rag_index.json"
PASSAGES_NAME = "passages.jsonl"
NAMES_NAME = "names.json"
FORMAT_VERSION = 1
#: The fix every message about a damaged saved index ends with.
REBUILD = "rebuild it with `active-rag index CORPUS OUT --force` (or BM25Index.save)"

_HASH_BLOCK = 1 << 20


def one_line(error: BaseException | str) -> str:
    """An exception's message (or a text) on one line, for a message that quotes it."""
    text = error if isinstance(error, str) else (str(error) or type(error).__name__)
    return " ".join(text.split())


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(_HASH_BLOCK):
            h.update(block)
    return h.hexdigest()


def file_checksums(folder: Path) -> dict[str, dict[str, Any]]:
    """``{file name: {"bytes", "sha256"}}`` of every file in ``folder`` but the manifest, for the manifest."""
    return {
        f.name: {"bytes": f.stat().st_size, "sha256": _sha256(f)}
        for f in sorted(folder.iterdir())
        if f.is_file() and f.name != CONFIG_NAME
    }


def read_manifest(src: Path) -> dict[str, Any]:
    """The manifest of the index saved in ``src``, checked for its format version."""
    config_file = src / CONFIG_NAME
    if not config_file.is_file():
        raise CorpusError(
            f"{str(src)!r} is not a saved BM25 index ({CONFIG_NAME} is missing): "
            "pass a directory written by BM25Index.save(), or build one with BM25Index.from_path()."
        )
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CorpusError(f"Cannot read {str(config_file)!r} ({exc.strerror or one_line(exc)}): check its "
                          "permissions.") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CorpusError(f"{str(config_file)!r} is not valid JSON ({one_line(exc)}): {REBUILD}.") from exc
    if not isinstance(config, dict):
        raise CorpusError(f"{str(config_file)!r} holds {type(config).__name__}, not an index manifest: {REBUILD}.")
    if config.get("format_version") != FORMAT_VERSION:
        raise CorpusError(
            f"{str(config_file)!r} has index format version {config.get('format_version')!r}, "
            f"this version of active-rag reads {FORMAT_VERSION}: rebuild the index and save it again."
        )
    return config


def verify_files(src: Path, config: dict[str, Any], rebuildable: tuple[str, ...] = (NAMES_NAME,)) -> set[str]:
    """Refuse a saved index whose files are not those its manifest lists (missing, unreadable, another size or
    checksum), except the ``rebuildable`` ones (derived from the passages): those that do not match are returned, to
    be built again. A manifest without ``"files"`` (saved before checksums were written) is not checked."""
    files = config.get("files")
    stale: set[str] = set()
    if files is None:
        return stale
    manifest = str(src / CONFIG_NAME)
    if not isinstance(files, dict) or not all(isinstance(v, dict) for v in files.values()):
        raise CorpusError(f"{manifest!r} lists its files in an unknown form: {REBUILD}.")
    for name, expected in sorted(files.items()):
        if not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
            raise CorpusError(f"{manifest!r} lists {name!r}, which is not a file of the index folder: {REBUILD}.")
        path = src / name
        if name in rebuildable:
            if not _matches(path, expected):
                stale.add(name)
            continue
        if not path.is_file():
            raise CorpusError(f"The saved index {str(src)!r} lacks {name} (listed in {CONFIG_NAME}): {REBUILD}.")
        try:
            size, digest = path.stat().st_size, _sha256(path)
        except OSError as exc:
            raise CorpusError(f"Cannot read {str(path)!r} of the saved index ({exc.strerror or one_line(exc)}): "
                              "check its permissions.") from exc
        if size != expected.get("bytes"):
            raise CorpusError(
                f"{str(path)!r} has {size} bytes, the index was saved with {expected.get('bytes')}: the file was "
                f"truncated or changed, so the index would retrieve other passages; {REBUILD}."
            )
        if digest != expected.get("sha256"):
            raise CorpusError(
                f"{str(path)!r} does not match the sha256 saved in {CONFIG_NAME}: the file was changed, so the index "
                f"would retrieve other passages; {REBUILD}."
            )
    return stale


def _matches(path: Path, expected: dict[str, Any]) -> bool:
    """Whether ``path`` is a readable file of the size and sha256 ``expected``."""
    try:
        return path.stat().st_size == expected.get("bytes") and _sha256(path) == expected.get("sha256")
    except OSError:
        return False


def is_index_file(name: str) -> bool:
    """A file that :meth:`BM25Index.save` writes (ours, or bm25s's ``*.index.json``/``*.index.npy``)."""
    return (
        name in (CONFIG_NAME, PASSAGES_NAME, NAMES_NAME)
        or name.endswith((".index.json", ".index.npy"))
        or name.startswith(".active-rag-index-")  # the temporary folder of an interrupted save
    )


def check_index_target(out: Path, overwrite: bool) -> None:
    """Refuse to save where an index would overwrite or sit beside files it does not own."""
    if out.exists() and not out.is_dir():
        raise IndexPathError(f"{str(out)!r} is a file, not a folder: pass a new folder for the index.")
    if not out.is_dir():
        return
    try:
        names = sorted(f.name for f in out.iterdir())
    except OSError as exc:
        raise IndexPathError(
            f"Cannot read the folder {str(out)!r} ({exc.strerror}): pick another output folder."
        ) from exc
    if not names:
        return
    if CONFIG_NAME not in names:
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        raise IndexPathError(
            f"{str(out)!r} is not empty ({shown}) and holds no index: pick a new or empty folder "
            "(an index is never written beside other files)."
        )
    others = [n for n in names if not is_index_file(n)]
    if others:
        raise IndexPathError(
            f"{str(out)!r} holds an index and other files ({', '.join(others[:3])}): an index is never written "
            "beside other files; pick a new folder."
        )
    if not overwrite:
        raise IndexPathError(
            f"{str(out)!r} already holds an index: pass --force (overwrite=True) to replace it, or pick a new folder."
        )
