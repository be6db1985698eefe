"""Read a folder of text files into whole-document passages, saying which files were skipped and why.

:func:`read_folder` walks a folder (recursively, without following symlinked folders) and reads:

- files ending in one of :data:`TEXT_SUFFIXES` (``.txt``, ``.md``, ``.markdown``, ``.rst``, ``.text``);
- files without a suffix (``README``, ``LICENSE``) when their bytes are text.

A file's encoding is found by :func:`sniff_encoding`: a byte order mark (UTF-8, UTF-16, UTF-32) first, then, for a
file that holds NUL bytes, the pattern of its NUL bytes (UTF-16/32 text without a BOM: ASCII characters leave a NUL
in every second or in three of every four bytes), else UTF-8. Every other file is skipped and recorded as a
:class:`Skipped` (relative path and reason): binary files (NUL bytes that are not UTF-16/32 text), files with another
suffix, hidden files and folders (a name starting with ``.``, e.g. ``.git``), empty files, files and folders that
cannot be read (permissions), symlinked folders, and suffix-less files that are not UTF-8 text. A ``.txt``/``.md``/
``.rst`` file that is not UTF-8 (e.g. Latin-1) is refused with one :class:`~active_rag.errors.CorpusError` naming it,
since it is meant as text but would be read wrong. :func:`skipped_summary` says what was skipped in one line.
"""

from __future__ import annotations

import codecs
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CorpusError
from ..progress import progress as show_progress
from ..types import Passage

__all__ = ["FolderRead", "Skipped", "TEXT_SUFFIXES", "read_folder", "skipped_summary", "sniff_encoding"]

#: File suffixes read as text (lower case); a file without a suffix is read when its bytes are text.
TEXT_SUFFIXES = (".txt", ".md", ".markdown", ".rst", ".text")

#: Byte order marks, the UTF-32 ones before the UTF-16 ones they start with.
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_SAMPLE_BYTES = 8192
#: Share of a decoded sample that must be printable (or whitespace) for UTF-16/32 bytes to count as text.
_PRINTABLE_SHARE = 0.95
#: How many skipped files the summary line names before "and N more".
_NAMED_IN_SUMMARY = 5


@dataclass(frozen=True)
class Skipped:
    """A file or folder under a folder corpus that was not indexed: its path relative to the corpus folder (``/``
    separators; a folder's ends with ``/``) and why."""

    path: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "reason": self.reason}


@dataclass
class FolderRead:
    """What :func:`read_folder` found: one passage per non-empty text file, in path order, and what it skipped."""

    passages: list[Passage] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


def _printable(text: str) -> bool:
    if not text:
        return False
    good = sum(1 for c in text if c.isprintable() or c in "\t\n\r\f\v")
    return good >= _PRINTABLE_SHARE * len(text)


def _decodes_as_text(sample: bytes, encoding: str) -> bool:
    """Whether the start of a file decodes in ``encoding`` to mostly printable text (a character cut at the end of
    the sample is not an error)."""
    try:
        text = codecs.getincrementaldecoder(encoding)("strict").decode(sample, final=False)
    except UnicodeDecodeError:
        return False
    return _printable(text)


def sniff_encoding(data: bytes) -> str | None:
    """The encoding of a file's bytes: a BOM's, else UTF-16/32 told by where its NUL bytes are, else ``"utf-8"``
    for bytes without NUL; ``None`` for binary data (NUL bytes that are not UTF-16/32 text). The result is a guess
    to decode with: UTF-8 bytes may still fail to decode (then they are not UTF-8 text)."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):  # the codec without an endianness reads (and drops) the BOM
            return {"utf-8": "utf-8-sig"}.get(encoding, encoding[:6])
    if b"\x00" not in data:
        return "utf-8"
    sample = data[:_SAMPLE_BYTES]
    n = len(sample)
    zeros = [sum(1 for i in range(r, n, 4) if sample[i] == 0) for r in range(4)]
    candidates: list[str] = []
    if len(data) % 4 == 0 and n >= 4:
        if zeros[3] == n // 4 and zeros[2] >= n // 8:  # the top byte of every code point, and mostly the next
            candidates.append("utf-32-le")
        if zeros[0] == n // 4 and zeros[1] >= n // 8:
            candidates.append("utf-32-be")
    if len(data) % 2 == 0:
        even, odd = zeros[0] + zeros[2], zeros[1] + zeros[3]
        if odd and even <= odd // 50:  # NULs in the high byte of little-endian code units only
            candidates.append("utf-16-le")
        if even and odd <= even // 50:
            candidates.append("utf-16-be")
    for encoding in candidates:
        if _decodes_as_text(sample, encoding):
            return encoding
    return None


def _decode(data: bytes, rel: str, file: Path, text_suffix: bool) -> tuple[str, str] | Skipped:
    """The text of a file and its encoding, or why it is skipped; a text-suffixed file that is not UTF-8 is
    refused."""
    encoding = sniff_encoding(data)
    if encoding is None:
        return Skipped(rel, "binary (NUL bytes, not UTF-16/32 text)")
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        if encoding.startswith("utf-8") and text_suffix:
            raise CorpusError(
                f"{str(file)!r} is not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start}): convert it "
                "to UTF-8 (e.g. `iconv -f latin1 -t utf-8`) or remove it."
            ) from exc
        return Skipped(rel, f"not {encoding.removesuffix('-sig').upper()} text")
    if "\x00" in text:
        return Skipped(rel, f"binary (NUL characters in its {encoding} text)")
    return text, encoding


def _walk(root: Path) -> tuple[list[tuple[Path, str]], list[Skipped]]:
    """The files under ``root`` (path, relative path), sorted, and the folders that were not entered."""
    files: list[tuple[Path, str]] = []
    skipped: list[Skipped] = []

    def unreadable(error: OSError) -> None:
        where = Path(error.filename) if error.filename else root
        rel = "" if where == root else where.relative_to(root).as_posix()
        if not rel:  # the corpus folder itself: nothing can be read
            raise CorpusError(
                f"Cannot read the corpus folder {str(root)!r} ({error.strerror or error}): check its permissions."
            )
        skipped.append(Skipped(rel + "/", f"unreadable folder ({error.strerror or error})"))

    for folder, dirs, names in os.walk(root, onerror=unreadable):
        base = Path(folder)
        for d in sorted(dirs):
            rel = (base / d).relative_to(root).as_posix()
            if d.startswith("."):
                skipped.append(Skipped(rel + "/", "hidden folder"))
            elif (base / d).is_symlink():
                skipped.append(Skipped(rel + "/", "symlinked folder (not followed)"))
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not (base / d).is_symlink())
        for name in names:
            files.append((base / name, (base / name).relative_to(root).as_posix()))
    files.sort(key=lambda item: item[1])
    return files, skipped


def read_folder(path: str | os.PathLike[str], *, progress: bool | None = False) -> FolderRead:
    """Read the text files under ``path`` (see the module docs) into passages: id the relative path (``/``
    separators), title the file name without its suffix, text the file's text stripped, ``metadata["path"]`` the
    absolute path (and ``metadata["encoding"]`` when it is not UTF-8). Raises
    :class:`~active_rag.errors.CorpusError` when ``path`` is not a folder or cannot be read, or a text-suffixed file
    is not UTF-8. ``progress=None`` draws a bar over the files when standard error is a terminal
    (:mod:`active_rag.progress`); ``False`` (the default) never."""
    root = Path(path)
    if not root.is_dir():
        raise CorpusError(f"Corpus directory {str(root)!r} does not exist: pass an existing directory.")
    files, skipped = _walk(root)
    out = FolderRead(skipped=skipped)
    for file, rel in show_progress(files, desc="reading files", unit="file", enabled=progress):
        suffix = file.suffix.lower()
        if file.name.startswith("."):
            out.skipped.append(Skipped(rel, "hidden file"))
            continue
        if suffix and suffix not in TEXT_SUFFIXES:
            out.skipped.append(Skipped(rel, f"{suffix} files are not read"))
            continue
        if not file.is_file():  # a broken symlink, a socket, a FIFO
            out.skipped.append(Skipped(rel, "not a regular file"))
            continue
        try:
            data = file.read_bytes()
        except OSError as exc:
            out.skipped.append(Skipped(rel, f"unreadable ({exc.strerror or exc})"))
            continue
        decoded = _decode(data, rel, file, text_suffix=bool(suffix))
        if isinstance(decoded, Skipped):
            out.skipped.append(decoded)
            continue
        text, encoding = decoded
        if not text.strip():
            out.skipped.append(Skipped(rel, "empty"))
            continue
        metadata: dict[str, object] = {"path": str(file.resolve())}
        if encoding not in ("utf-8", "utf-8-sig"):
            metadata["encoding"] = encoding
        out.passages.append(Passage(id=rel, title=file.stem, text=text.strip(), metadata=metadata))
    out.skipped.sort(key=lambda s: s.path)
    return out


def skipped_summary(root: str | os.PathLike[str], skipped: list[Skipped]) -> str:
    """One line naming what a folder corpus skipped (the first few, then how many more), or ``""`` for nothing."""
    if not skipped:
        return ""
    named = "; ".join(f"{s.path} ({s.reason})" for s in skipped[:_NAMED_IN_SUMMARY])
    more = f"; and {len(skipped) - _NAMED_IN_SUMMARY} more" if len(skipped) > _NAMED_IN_SUMMARY else ""
    return (f"{os.fspath(root)}: skipped {len(skipped)} file(s) or folder(s) that are not readable text: {named}{more} "
            "(all of them: index.skipped, or `active-rag index --json`).")
