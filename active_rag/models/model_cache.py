"""The model cache on disk: where it lives, how its files are hashed, and the locks around every write.

* Paths: :func:`cache_dir` (``$ACTIVE_RAG_CACHE``, else ``$XDG_CACHE_HOME/active-rag``, else
  ``~/.cache/active-rag``; the calibrated thresholds live there too), ``gguf/<name>.gguf`` (a split model's
  assembled GGUF), ``converted/<name>-<sha256[:12]>/`` (a GGUF converted to safetensors, finished once its
  marker file is written).
* Hashes: a file's sha256, remembered in this process while its size and mtime are unchanged.
* Locks: a per-target thread lock and, when the ``filelock`` package is importable (it ships with
  ``huggingface_hub``), an inter-process file lock; leftovers of interrupted writes are removed under it.

A leaf: it imports nothing else of active-rag, so the registry, installing and loading modules all build on it.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

__all__ = ["cache_dir"]

# The registry's logger: these messages were logged under it before this module was split off.
logger = logging.getLogger("active_rag.registry")

_CHUNK = 8 * 1024 * 1024
_MARKER = "active-rag-conversion.json"


# --------------------------------------------------------------------------------------------------
# Paths
# --------------------------------------------------------------------------------------------------


def cache_dir() -> Path:
    """The folder active-rag caches models and calibrated thresholds in (it may not exist yet).

    ``$ACTIVE_RAG_CACHE`` if set, else ``$XDG_CACHE_HOME/active-rag``, else ``~/.cache/active-rag``.
    """
    explicit = os.environ.get("ACTIVE_RAG_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg).expanduser() / "active-rag"
    return Path.home() / ".cache" / "active-rag"


def _gguf_cache_path(name: str) -> Path:
    return cache_dir() / "gguf" / f"{name}.gguf"


def _converted_dir_for(key: str, sha256: str) -> Path:
    return cache_dir() / "converted" / f"{key}-{sha256[:12]}"


def _is_converted(folder: Path) -> bool:
    """Whether ``folder`` holds a finished conversion (the marker is written last, before the rename)."""
    return (folder / _MARKER).is_file() and (folder / "config.json").is_file()


# --------------------------------------------------------------------------------------------------
# Hashing and locking
# --------------------------------------------------------------------------------------------------

_HASHES: dict[tuple[str, int, int], str] = {}
_HASHES_LOCK = threading.Lock()


def _file_key(path: Path) -> tuple[str, int, int]:
    stat = path.stat()
    return (os.path.realpath(path), stat.st_size, stat.st_mtime_ns)


def _sha256_file(path: Path) -> str:
    """The sha256 of a file, remembered in this process while its size and mtime are unchanged."""
    key = _file_key(path)
    with _HASHES_LOCK:
        known = _HASHES.get(key)
    if known is not None:
        return known
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    value = digest.hexdigest()
    with _HASHES_LOCK:
        _HASHES[key] = value
    return value


def _remember_sha256(path: Path, value: str) -> None:
    with _HASHES_LOCK:
        _HASHES[_file_key(path)] = value


_THREAD_LOCKS: dict[str, threading.Lock] = {}
_THREAD_LOCKS_GUARD = threading.Lock()


def _thread_lock(key: str) -> threading.Lock:
    with _THREAD_LOCKS_GUARD:
        return _THREAD_LOCKS.setdefault(key, threading.Lock())


@contextlib.contextmanager
def _exclusive(lock_path: Path, what: str) -> Iterator[None]:
    """Hold a thread lock and, when ``filelock`` is importable, a file lock on ``lock_path``."""
    with _thread_lock(os.path.abspath(lock_path)):
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            from filelock import FileLock, Timeout
        except ImportError:  # pragma: no cover - filelock ships with huggingface_hub
            yield
            return
        lock = FileLock(str(lock_path))
        try:
            lock.acquire(timeout=1)
        except Timeout:
            logger.warning("Waiting for another process that is %s (lock %s).", what, lock_path)
            lock.acquire()
        try:
            yield
        finally:
            lock.release()


def _remove_stale(folder: Path, prefix: str) -> None:
    """Remove leftovers of interrupted writes; only call while holding the lock of their target."""
    if not folder.is_dir():
        return
    for leftover in folder.glob(prefix + "*"):
        if leftover.is_dir():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                leftover.unlink()
