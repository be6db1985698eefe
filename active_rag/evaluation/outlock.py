"""The output folder of ``active-rag eval``: checked before the model loads, and written by one run at a time.

:func:`check_output_root` checks, creating nothing, that ``--out`` is a folder that can be written or created, and
:func:`prepare_output_root` creates it and checks that a file can be written in it, so that a path naming an
existing file or a folder this user cannot write is refused in one line before anything slow happens
(:class:`EvalOutputError`).

:class:`OutputLock` makes a run the only writer of its output folder (``OUT/<dataset>/<model>``): it holds an
exclusive ``flock`` on :data:`LOCK_NAME` in the folder, a JSON file naming the holder's pid, host, start time and
settings, for the whole run. A second run on the same folder is refused with :class:`EvalLockedError`, naming the
holder. The kernel drops a ``flock`` when its process dies, even on ``SIGKILL``; the lock file such a run leaves
behind names a process that is no longer alive, and the next run takes it over with a warning. A lock naming a
live process on this host is honoured even without its ``flock`` (a run of an older version, or a copy of the
folder); one written on another host is refused, since its process cannot be checked from here.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
import warnings
from pathlib import Path
from types import TracebackType
from typing import Any

from active_rag.errors import ActiveRAGError

try:  # POSIX; elsewhere the lock file's pid is the only guard
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["LOCK_NAME", "EvalLockedError", "EvalOutputError", "OutputLock", "check_output_root", "prepare_output_root"]

#: The lock file in a run's output folder.
LOCK_NAME = ".active-rag-eval.lock"


class EvalOutputError(ActiveRAGError, ValueError):
    """``--out`` names an existing file, or a folder that cannot be created or written."""


class EvalLockedError(ActiveRAGError):
    """Another run is writing the same output folder; the message names its pid and host and the fix."""


def _refused(path: Path, what: str, exc: OSError) -> EvalOutputError:
    return EvalOutputError(f"--out {str(path)!r} {what} ({exc.strerror or type(exc).__name__}): pass a folder you can "
                           "write, e.g. runs/eval.")


def check_output_root(path: Path) -> Path:
    """Check, without creating anything, that ``path`` is a folder a run can write, or one it can create: an
    :class:`EvalOutputError` in one line naming the path and the fix when it is a file, lies under a file, or its
    nearest existing folder does not let this user create an entry (a probe folder is made there and removed)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise EvalOutputError(f"--out {str(path)!r} is an existing file, not a folder: pass a folder path (e.g. runs/eval).")
    base = path
    while not base.exists() and base != base.parent:
        base = base.parent
    if not base.is_dir():
        raise EvalOutputError(f"--out {str(path)!r} lies under the file {str(base)!r}: pass a folder path (e.g. runs/eval).")
    probe = base / f".active-rag-write-check-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as exc:
        raise _refused(path, "cannot be created" if base != path else "is not writable", exc) from exc
    return path


def prepare_output_root(path: Path) -> Path:
    """Create ``path`` (and its parents) once :func:`check_output_root` passes, and check that a file can be
    written in it; :class:`EvalOutputError` in one line naming the path and the fix when not."""
    path = check_output_root(Path(path))
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _refused(path, "cannot be created", exc) from exc
    probe = path / f".active-rag-write-check-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise _refused(path, "is not writable", exc) from exc
    return path


def _start_ticks(pid: int) -> str | None:
    """The start time of process ``pid`` in clock ticks since boot (Linux ``/proc``), None where unknown: it tells
    a live holder from a later process that reuses its pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def _alive(pid: int, ticks: str | None) -> bool:
    """Whether process ``pid`` of this host is running (a zombie, or a later process that took its pid, is not)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    except OSError:  # pragma: no cover - e.g. an unsupported platform
        return True
    with contextlib.suppress(OSError):
        state = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace").rsplit(")", 1)[-1].split()
        if state and state[0] in ("Z", "X"):
            return False
    now = _start_ticks(pid)
    return ticks is None or now is None or now == ticks


def _read_holder(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _describe(holder: dict[str, Any]) -> str:
    started = holder.get("started")
    when = f", started {started}" if started else ""
    return f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')}{when}"


class OutputLock:
    """Hold ``folder/.active-rag-eval.lock`` for the ``with`` block: the run is the folder's only writer.

    ``settings`` (e.g. :meth:`EvalConfig.to_dict`) are written into the lock file with the pid, host, start time
    and command line, for whoever finds it. Entering raises :class:`EvalLockedError` when a live run holds the
    folder; a lock left by a dead process is taken over with a warning."""

    def __init__(self, folder: Path, settings: dict[str, Any] | None = None) -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self.settings = settings or {}
        self._fd: int | None = None

    def _refuse(self, holder: dict[str, Any]) -> EvalLockedError:
        pid = holder.get("pid", "?")
        return EvalLockedError(
            f"{self.folder} is being written by another eval run ({_describe(holder)}): wait for it to finish or stop "
            f"it (kill {pid}), or pass another --out; if that run is gone, delete {self.path}.")

    def _open_locked(self) -> int:
        """An fd of the lock file holding its exclusive ``flock`` (the file as it is at the path, not one a finishing
        run just unlinked)."""
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                if fcntl is not None:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        raise self._refuse(_read_holder(self.path)) from None
                try:
                    same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
                except FileNotFoundError:
                    same = False
                if same:
                    return fd
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # the holder removed the file between our open and our flock: open the new one

    def __enter__(self) -> OutputLock:
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = self._open_locked()
        try:
            holder = _read_holder(self.path)
            pid = holder.get("pid")
            host = socket.gethostname()
            if isinstance(pid, int) and pid != os.getpid():
                if holder.get("host") not in (None, host):
                    raise self._refuse(holder)
                if _alive(pid, holder.get("start_ticks")):
                    raise self._refuse(holder)
                warnings.warn(f"{self.path}: took over the lock of an eval run that is no longer running "
                              f"({_describe(holder)}); its rows are kept and checked on resume.", stacklevel=2)
            info = {"pid": os.getpid(), "host": host, "start_ticks": _start_ticks(os.getpid()),
                    "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "argv": list(sys.argv), "settings": self.settings}
            data = (json.dumps(info, default=str, indent=1) + "\n").encode("utf-8")
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()  # while the flock is held: a run waiting on it opens the next file, never this one
        os.close(self._fd)
        self._fd = None
