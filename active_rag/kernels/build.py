"""Building the decode kernel library (``csrc/``: ``decode_kernel.cpp``, ``dequant.cpp``, ``simd.cpp``, ``simd_avx512.cpp``, ``int6.cpp``,
``attention.cpp``, ``norm.cpp``, ``rope.cpp``, ``summary.cpp``, ``layers.cpp``, ``kernels.h``, ``simd.h``, ``pool.h``)
with the machine's C++ compiler, ahead of time.

``make setup`` runs ``python -m active_rag.kernels.build`` once torch is installed; it can be run again at any time
(``--force`` rebuilds). The library is a torch operator library (``TORCH_LIBRARY(active_rag, ...)``: the ops are
``torch.ops.active_rag.*``, usable under ``torch.compile``), linked against the installed torch and compiled for
generic x86-64 with per-function target attributes, so one build runs on every x86-64 CPU and picks its instruction
set at run time.

Where it goes: ``<root>/<key>/libactive_rag_kernels.so``, ``key`` a hash of the source, torch's version and C++ ABI
and the flags, so a changed source or another torch is never served a stale build (it is simply not
found, and the package falls back to torch's kernels until it is built again). ``root`` is
``$ACTIVE_RAG_KERNEL_DIR`` when set, else ``<sys.prefix>/share/active-rag/kernels`` (inside the virtual
environment: one build per torch install), else, when that is not writable, ``<cache_dir()>/kernels``.

Nothing is compiled at import or at model load: a process only looks for a finished build (:func:`find_library`).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

logger = logging.getLogger(__name__)

CSRC = Path(__file__).resolve().parent / "csrc"
SOURCES = (CSRC / "decode_kernel.cpp", CSRC / "dequant.cpp", CSRC / "simd.cpp", CSRC / "simd_avx512.cpp", CSRC / "int6.cpp",
           CSRC / "attention.cpp", CSRC / "norm.cpp", CSRC / "rope.cpp", CSRC / "summary.cpp", CSRC / "layers.cpp")
"""The kernels' C++ sources (shipped inside the package, so an installed wheel can build them too)."""
HEADERS = (CSRC / "kernels.h", CSRC / "simd.h", CSRC / "pool.h")

LIBRARY_NAME = "libactive_rag_kernels.so"

KERNEL_DIR_VARIABLE = "ACTIVE_RAG_KERNEL_DIR"
"""Environment variable naming the folder builds are written to and looked for in (instead of the defaults)."""

FLAGS = ("-O3", "-std=c++17", "-fPIC", "-shared", "-fopenmp", "-ffp-contract=off", "-fno-math-errno", "-DNDEBUG",
         "-Wall", "-Wno-unused-function", "-Wno-unknown-pragmas")
"""Compiler flags. No ``-march``: the vector code has per-function target attributes and is chosen at run time.
``-ffp-contract=off`` keeps every path's float operations the ones written (no fused multiply-add where the scalar
reference has none), so all paths give the same outputs; ``-fopenmp`` links the OpenMP runtime torch loaded, which
``at::get_num_threads`` reads (the kernels' threads are their own: ``csrc/pool.h``)."""


class BuildError(RuntimeError):
    """The library could not be built (no compiler, not x86-64, a compile error)."""


def compiler() -> str | None:
    """The C++ compiler: ``$CXX``, else ``c++``/``g++``/``clang++`` on the path."""
    named = os.environ.get("CXX")
    if named:
        return shutil.which(named) or named
    for candidate in ("c++", "g++", "clang++"):
        found = shutil.which(candidate)
        if found:
            return found
    return None


def _torch_flags() -> tuple[list[str], list[str]]:
    """Include flags and link flags for the installed torch."""
    import torch
    from torch.utils import cpp_extension

    abi = int(bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)))
    includes = [f"-I{path}" for path in cpp_extension.include_paths()]
    libs = cpp_extension.library_paths()
    link = [f"-L{path}" for path in libs] + [f"-Wl,-rpath,{path}" for path in libs] + ["-lc10", "-ltorch_cpu"]
    return [f"-D_GLIBCXX_USE_CXX11_ABI={abi}", *includes], link


def build_key() -> str:
    """A hash of what the library must match: its source, torch's version and C++ ABI, the flags, the machine. Not
    the compiler (any compiler's build of the same source serves, and a process that only loads the library, e.g.
    in an image without a compiler, must find it)."""
    import torch

    digest = hashlib.sha256()
    for path in (*SOURCES, *HEADERS):
        digest.update(path.read_bytes())
    for part in (torch.__version__, str(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", "")), " ".join(FLAGS), platform.machine()):
        digest.update(b"\0" + part.encode())
    return digest.hexdigest()[:16]


def default_roots() -> list[Path]:
    """The folders builds are looked for in, in order (the first writable one is built into)."""
    explicit = os.environ.get(KERNEL_DIR_VARIABLE)
    if explicit:
        return [Path(explicit).expanduser()]
    from ..models.model_cache import cache_dir

    return [Path(sys.prefix) / "share" / "active-rag" / "kernels", cache_dir() / "kernels"]


def find_library(key: str | None = None) -> Path | None:
    """The finished build for this source and torch, or ``None``."""
    if not all(path.is_file() for path in (*SOURCES, *HEADERS)):
        return None
    try:
        key = key or build_key()
    except OSError:
        return None
    for root in default_roots():
        path = root / key / LIBRARY_NAME
        if path.is_file():
            return path
    return None


def _writable_root() -> Path:
    for root in default_roots():
        with contextlib.suppress(OSError):
            root.mkdir(parents=True, exist_ok=True)
            if os.access(root, os.W_OK):
                return root
    raise BuildError(f"no writable folder among {', '.join(map(str, default_roots()))}")


def build(*, force: bool = False, verbose: bool = False) -> Path:
    """Compile the library (unless this key's build exists and ``force`` is false) and return its path.

    Raises :class:`BuildError` when it cannot be built. The file is written under a temporary name and renamed, so a
    concurrent process never loads half a library.
    """
    if platform.machine().lower() not in ("x86_64", "amd64"):
        raise BuildError(f"the kernels are x86-64 code; this machine is {platform.machine()}")
    cxx = compiler()
    if cxx is None:
        raise BuildError("no C++ compiler found (set CXX, or install g++ or clang++)")
    key = build_key()
    existing = find_library(key)
    if existing is not None and not force:
        return existing
    folder = _writable_root() / key
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / LIBRARY_NAME
    cflags, link = _torch_flags()
    handle, temporary = tempfile.mkstemp(prefix=f".{LIBRARY_NAME}.tmp-", dir=folder)
    os.close(handle)
    command = [cxx, *FLAGS, *cflags, *map(str, SOURCES), "-o", temporary, *link]
    if verbose:
        print(" ".join(command), file=sys.stderr)
    try:
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise BuildError(f"{Path(cxx).name} failed ({done.returncode}): {done.stderr.strip()[-4000:]}")
        os.chmod(temporary, 0o755)
        os.replace(temporary, target)
    finally:
        Path(temporary).unlink(missing_ok=True)
    return target


def main(argv: list[str] | None = None) -> int:
    """``python -m active_rag.kernels.build [--force] [--verbose]``: build, print the path; exit 1 on failure."""
    parser = argparse.ArgumentParser(description="Build active-rag's CPU decode kernels for the installed torch.")
    parser.add_argument("--force", action="store_true", help="rebuild even when a build for this source exists")
    parser.add_argument("--verbose", action="store_true", help="print the compiler command")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        path = build(force=args.force, verbose=args.verbose)
    except (BuildError, OSError) as error:
        print(f"active-rag kernels not built ({error}); torch's kernels will decode.", file=sys.stderr)
        return 1
    print(f"active-rag kernels: {path} ({time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
