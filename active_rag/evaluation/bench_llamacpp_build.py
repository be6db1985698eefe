"""Which llama.cpp ``bench --suite llamacpp`` measures, and the build flags it reports (``--llama-cpp``).

- ``installed`` (the default): the llama-cpp-python bindings of this environment. ``make setup`` builds them from
  source with CPU flags named one by one (its ``LLAMA_CPP_CMAKE_ARGS``, ``GGML_NATIVE=OFF``, AMX kernels off);
  where the installed library is byte for byte a wheel ``make setup`` left in ``~/.cache/active-rag/wheels/<hash>/``,
  the cmake args it wrote beside it (``cmake-args.txt``) are reported, otherwise none.
- ``native``: llama-cpp-python ``LLAMA_CPP_VERSION`` built once with ``-DGGML_NATIVE=ON`` (``-march=native``; the AMX
  kernels stay off, compiler flags included (:data:`NO_AMX`): they crash with the registry's GGUFs) into
  ``~/.cache/active-rag/llama-cpp-native/<hash of the version and cmake args>/site`` and put first on the
  llama.cpp side's ``PYTHONPATH``. A reference built below its best flatters the engine's ratios. Where the build
  fails, one line says so and the installed bindings are measured (the report says which).

Whatever the build, the llama.cpp side's process reports ``llama_print_system_info()`` (the CPU features compiled
in) and the path of the bindings it loaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

LLAMA_CPP_VERSION = "0.3.36"
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
#: ``-march=native`` defines ``__AMX_INT8__`` on a CPU with AMX whatever the ``GGML_AMX_*`` options say, and ggml then
#: compiles its AMX matrix kernels in (``ggml_backend_amx_mul_mat``: SIGSEGV with the registry's GGUFs on one Xeon,
#: SIGILL at ``tileloadd`` on another). GCC's explicit ``-mno-amx-*`` win over
#: ``-march=native`` wherever they stand on the command line; every other instruction the CPU has stays.
NATIVE_CMAKE_ARGS = ("-DGGML_NATIVE=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAVA_BUILD=OFF "
                     f"'-DCMAKE_C_FLAGS={NO_AMX}' '-DCMAKE_CXX_FLAGS={NO_AMX}'")
AVX2_CMAKE_ARGS = ("-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON "
                   "-DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF "
                   "-DGGML_AVX512_BF16=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF "
                   "-DLLAVA_BUILD=OFF")
"""``--llama-cpp avx2``: llama.cpp's AVX2 kernels and nothing above them (no VNNI, no AVX-512), for a run that acts as
an AVX2 CPU on a larger one: the engine's side then runs with torch held to AVX2 (:data:`AVX2_ENGINE_ENV`)."""
AVX2_ENGINE_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
"""The engine side's environment under ``--llama-cpp avx2``: torch's and oneDNN's AVX2 kernels; active-rag's kernels
follow torch's capability down to AVX2's class (:func:`active_rag.kernels.default_isa`)."""
CHOICES = ("installed", "native", "avx2")

#: the file ``make setup`` writes beside the llama-cpp-python wheel it built: the ``CMAKE_ARGS`` it built it with
CMAKE_ARGS_FILE = "cmake-args.txt"

Runner = Callable[..., "subprocess.CompletedProcess[str]"]


@dataclass
class LlamaCppBuild:
    """The llama.cpp bindings one suite run measures."""

    requested: str
    """``installed`` or ``native`` (``--llama-cpp``)."""
    kind: str
    """What is measured: ``installed`` or ``native`` (``installed`` after a failed native build)."""
    version: str | None
    cmake_args: str | None
    """The ``CMAKE_ARGS`` the bindings were built with, where known."""
    site: str | None = None
    """A folder put first on the llama.cpp side's ``PYTHONPATH`` (the native build), else None."""
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The build as JSON-ready fields."""
        return asdict(self)


def cache_root() -> Path:
    """``~/.cache/active-rag/llama-cpp-native`` (``$XDG_CACHE_HOME`` respected)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "active-rag" / "llama-cpp-native"


def build_key(version: str, cmake_args: str) -> str:
    """The first 12 hex digits of the SHA-256 of the version and the cmake args: one folder per build."""
    return hashlib.sha256(f"llama-cpp-python=={version}\n{cmake_args}".encode()).hexdigest()[:12]


def _site_ready(folder: Path) -> bool:
    return (folder / "build.json").is_file() and (folder / "site" / "llama_cpp" / "__init__.py").is_file()


def _pip(args: list[str], env: dict[str, str], log: Path, runner: Runner) -> None:
    """``python -m pip ARGS``, its output appended to ``log``; ``RuntimeError`` naming the log if it fails."""
    proc = runner([sys.executable, "-m", "pip", *args], env=env, capture_output=True, text=True, check=False)
    with log.open("a", encoding="utf-8") as fh:
        fh.write(f"$ pip {' '.join(args)}\n{proc.stdout}\n{proc.stderr}\n")
    if proc.returncode != 0:
        raise RuntimeError(f"pip {args[0]} exited {proc.returncode} (log: {log})")


def build_native(root: Path | None = None, *, version: str = LLAMA_CPP_VERSION, cmake_args: str = NATIVE_CMAKE_ARGS,
                 runner: Runner = subprocess.run, progress: bool = True, kind: str = "native") -> LlamaCppBuild:
    """The native build of llama-cpp-python (``kind="avx2"``: the :data:`AVX2_CMAKE_ARGS` one), built and installed
    into its cache folder on first use.

    ``pip wheel --no-cache-dir``: pip's own wheel cache is keyed by the sdist's address, not by ``CMAKE_ARGS``, and
    would hand back a wheel built with other flags. Raises ``RuntimeError`` (naming the build log) on failure."""
    folder = (root or cache_root()) / build_key(version, cmake_args)
    if _site_ready(folder):
        return LlamaCppBuild(kind, kind, version, cmake_args, str(folder / "site"), f"cached in {folder}")
    if progress:
        print(f"[llamacpp] building llama-cpp-python=={version} with CMAKE_ARGS=\"{cmake_args}\" into {folder} "
              "(once; minutes)", flush=True)
    wheels, site = folder / "wheels", folder / "site"
    for stale in (wheels, site):
        shutil.rmtree(stale, ignore_errors=True)
    wheels.mkdir(parents=True)
    env = {**os.environ, "CMAKE_ARGS": cmake_args, "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 1)}
    log = folder / "build.log"
    _pip(["wheel", "--no-cache-dir", "--no-deps", "--no-binary", "llama-cpp-python", "-w", str(wheels),
          f"llama-cpp-python=={version}"], env, log, runner)
    built = sorted(wheels.glob("llama_cpp_python-*.whl"))
    if not built:
        raise RuntimeError(f"pip wheel left no llama_cpp_python wheel in {wheels} (log: {log})")
    _pip(["install", "--no-deps", "--no-index", "--target", str(site), str(built[-1])], env, log, runner)
    record = {"version": version, "cmake_args": cmake_args, "wheel": built[-1].name}
    (folder / "build.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return LlamaCppBuild(kind, kind, version, cmake_args, str(site), f"built in {folder}")


def _record_hash(record: str, name: str) -> str | None:
    """The hash column of ``name``'s line in a wheel ``RECORD``."""
    for line in record.splitlines():
        parts = line.split(",")
        if len(parts) >= 2 and parts[0] == name:
            return parts[1]
    return None


def installed_cmake_args(wheel_cache: Path | None = None) -> str | None:
    """The cmake args ``make setup`` wrote (:data:`CMAKE_ARGS_FILE`) beside the wheel whose ``libggml-cpu.so`` is the
    installed one, among the folders of ``~/.cache/active-rag/wheels/``; None where that cannot be shown."""
    from importlib import metadata

    try:
        dist = metadata.distribution("llama-cpp-python")
        installed = _record_hash(dist.read_text("RECORD") or "", "llama_cpp/lib/libggml-cpu.so")
    except (metadata.PackageNotFoundError, OSError):
        return None
    root = wheel_cache or Path.home() / ".cache" / "active-rag" / "wheels"
    for wheel in sorted(root.glob(f"*/llama_cpp_python-{dist.version}-*.whl")):
        args_file = wheel.parent / CMAKE_ARGS_FILE
        try:
            with zipfile.ZipFile(wheel) as zf:
                record = next(n for n in zf.namelist() if n.endswith(".dist-info/RECORD"))
                built = _record_hash(zf.read(record).decode(), "llama_cpp/lib/libggml-cpu.so")
            if installed and built == installed and args_file.is_file():
                return args_file.read_text(encoding="utf-8").strip()
        except (OSError, StopIteration, zipfile.BadZipFile):
            continue
    return None


def installed_build(requested: str = "installed", note: str = "") -> LlamaCppBuild:
    """The bindings of this environment, with the cmake args ``make setup`` built them with where they can be shown."""
    from importlib import metadata

    try:
        version: str | None = metadata.version("llama-cpp-python")
    except metadata.PackageNotFoundError:
        version = None
    args = installed_cmake_args()
    if args is None:
        note = (note + "; " if note else "") + "cmake args not recorded (not the wheel make setup built for this CPU)"
    return LlamaCppBuild(requested, "installed", version, args, None, note)


def resolve_build(choice: str, progress: bool = True, *, build: Callable[..., LlamaCppBuild] = build_native) -> LlamaCppBuild:
    """The bindings ``--llama-cpp CHOICE`` measures: the native build, or the installed bindings where it fails
    (one line says so)."""
    if choice not in CHOICES:
        from active_rag.errors import InvalidOptionError

        raise InvalidOptionError(f"--llama-cpp must be one of {', '.join(CHOICES)}, got {choice!r}")
    if choice == "installed":
        return installed_build()
    try:
        if choice == "avx2":
            return build(progress=progress, cmake_args=AVX2_CMAKE_ARGS, kind="avx2")
        return build(progress=progress)
    except (RuntimeError, OSError) as error:
        message = f"{choice} build failed ({error}); measuring the installed bindings"
        print(f"[llamacpp] llama.cpp {message}", file=sys.stderr, flush=True)
        return installed_build(choice, message)


def child_env(build: LlamaCppBuild, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of the llama.cpp side's process: the build's ``site`` first on ``PYTHONPATH``, and OpenMP's
    wait policy llama.cpp's own unless the user set one (:func:`active_rag.omp_wait.reference_env`)."""
    from active_rag.omp_wait import reference_env

    env = reference_env(os.environ if base is None else base)
    if build.site:
        env["PYTHONPATH"] = os.pathsep.join([build.site, *filter(None, [env.get("PYTHONPATH")])])
    return env


def main(argv: list[str] | None = None) -> int:
    """``python -m active_rag.evaluation.bench_llamacpp_build [--native]``: build (or find) and print the build."""
    args = sys.argv[1:] if argv is None else argv
    print(json.dumps(resolve_build("native" if "--native" in args else "installed").to_dict(), indent=2))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())


__all__ = [
    "CHOICES",
    "LLAMA_CPP_VERSION",
    "NATIVE_CMAKE_ARGS",
    "LlamaCppBuild",
    "build_key",
    "build_native",
    "cache_root",
    "child_env",
    "installed_build",
    "installed_cmake_args",
    "resolve_build",
]
