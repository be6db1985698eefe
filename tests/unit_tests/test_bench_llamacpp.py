"""``active-rag bench --suite llamacpp`` without a model or llama.cpp: the side processes' protocol (one JSON request
in, one marked JSON line out, a real subprocess loading fake bindings first on PYTHONPATH), the peak-memory reading,
the memory columns and ratio of the table, the native build's cache, commands and fallback, and the build flags
reported beside the figures."""

from __future__ import annotations

import io
import os
import json
import subprocess
import sys
import types
import zipfile
from pathlib import Path
from typing import Any

import pytest

from active_rag.evaluation import bench_llamacpp as bench
from active_rag.evaluation import bench_llamacpp_build as builds
from active_rag.evaluation import bench_llamacpp_sides as sides
from active_rag.evaluation.bench_llamacpp_build import LlamaCppBuild

SYSTEM_INFO = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | FAKE_NATIVE = 1 | "


def _fake_bindings(folder: Path, version: str = "9.9.9") -> Path:
    """A ``llama_cpp`` package in ``folder`` that prints to stdout on import (the protocol must ignore it)."""
    package = folder / "llama_cpp"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        f"print('noise from the bindings')\n__version__ = {version!r}\n"
        f"def llama_print_system_info():\n    return {SYSTEM_INFO.encode()!r}\n", encoding="utf-8")
    return folder


def _completed(returncode: int = 0, stdout: str = "", stderr: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess([], returncode, stdout, stderr)


# ------------------------------------------------------------------------------------------------ the protocol


def test_parse_child_output_takes_the_last_marked_line_and_ignores_noise() -> None:
    out = f"loading...\n{sides.RESULT_MARKER}{json.dumps({'row': 1})}\nmore noise\n{sides.RESULT_MARKER}{json.dumps({'row': 2})}\n"
    assert sides.parse_child_output(out) == {"row": 2}
    with pytest.raises(sides.SideProcessError, match="no result line"):
        sides.parse_child_output('{"row": 3}\n', "engine side")


def test_child_main_answers_one_marked_line_and_sends_prints_to_stderr(monkeypatch, capsys) -> None:
    def side(request: dict[str, Any]) -> dict[str, Any]:
        print("progress that must not reach the parent's parser")
        return {"echo": request["value"] * 2}

    monkeypatch.setitem(sides.SIDES, "echo", side)
    stdout = io.StringIO()
    assert sides.child_main(io.StringIO(json.dumps({"side": "echo", "value": 21})), stdout) == 0
    assert stdout.getvalue() == sides.RESULT_MARKER + json.dumps({"echo": 42}) + "\n"
    assert "progress that must not" in capsys.readouterr().err


def test_a_real_side_process_loads_the_bindings_first_on_pythonpath(tmp_path: Path) -> None:
    site = _fake_bindings(tmp_path / "site")
    build = LlamaCppBuild("native", "native", "9.9.9", builds.NATIVE_CMAKE_ARGS, str(site))
    ours = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "ACTIVE_RAG_OMP_WAIT_POLICY_DEFAULTED")}
    ours.update(OMP_WAIT_POLICY="PASSIVE", ACTIVE_RAG_OMP_WAIT_POLICY_DEFAULTED="1")  # the command's own choice
    out = sides.run_side({"side": "info"}, label="info", env=builds.child_env(build, ours))
    assert out["bindings"]["omp_wait_policy"] == "libgomp's default (another program's process)"  # llama.cpp's own
    assert out["bindings"]["system_info"] == SYSTEM_INFO.strip()
    assert out["bindings"]["version"] == "9.9.9"
    assert out["bindings"]["path"].startswith(str(site))


def test_a_failed_side_names_its_signal_and_last_stderr_line() -> None:
    def runner(*args: Any, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        assert json.loads(kwargs["input"]) == {"side": "llama.cpp"}
        return _completed(-11, "", "loading\nggml_backend_amx_mul_mat: crash\n\n")

    with pytest.raises(sides.SideProcessError, match=r"llama.cpp side \(m\) failed \(signal SIGSEGV\): ggml_backend_amx_mul_mat: crash"):
        sides.run_side({"side": "llama.cpp"}, label="llama.cpp side (m)", runner=runner)
    assert sides.describe_exit(3) == "exit 3"


def test_peak_rss_reads_vmhwm_and_falls_back_to_ru_maxrss() -> None:
    assert sides.peak_rss("Name:\tpython\nVmHWM:\t  2048 kB\nVmRSS:\t 1024 kB\n") == (2048 * 1024, "VmHWM")
    peak, source = sides.peak_rss("Name:\tpython\n")
    assert source == "ru_maxrss" and peak > 1024 * 1024
    if sys.platform.startswith("linux"):
        live, source = sides.peak_rss()
        assert source == "VmHWM" and live >= 1024 * 1024


def test_the_llamacpp_side_reads_its_peak_before_the_gguf_sizes_and_reports_its_bindings(monkeypatch, tmp_path: Path) -> None:
    fake = types.ModuleType("llama_cpp")
    fake.__file__ = str(tmp_path / "llama_cpp" / "__init__.py")
    fake.llama_print_system_info = lambda: SYSTEM_INFO.encode()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "llama_cpp", fake)
    order: list[str] = []

    def row(model: str, settings: sides.SideSettings, prompt: list[int], questions: list[list[int]]) -> dict[str, Any]:
        order.append("timed")
        assert settings.batch_sizes == [1, 8] and prompt == [1, 2, 3] and questions == [[4, 5]]
        return {"side": "llama.cpp", "model": model, "weights": "gguf", "prefill_tok_s": 100.0, "decode_ms": {"1": 20.0, "8": 60.0}}

    def peak(before: int | None) -> dict[str, Any]:
        order.append("peak")
        return {"peak_rss_bytes": 123_000_000, "rss_before_load_bytes": before, "rss_source": "VmHWM"}

    def decode_bytes(path: Any) -> int:
        order.append("gguf")
        return 456

    monkeypatch.setattr(sides, "llamacpp_row", row)
    monkeypatch.setattr(sides, "gguf_decode_bytes", decode_bytes)
    monkeypatch.setattr("active_rag.models.gguf_files.resolve_gguf", lambda model: Path(f"/x/{model}.gguf"))
    monkeypatch.setattr(sides, "memory_fields", peak)
    settings = {"batch_sizes": [1, 8], "tokens": 4, "prefill_tokens": 3, "repeats": 1, "threads": 1, "n_batch": 8}
    out = sides.measure_llamacpp({"side": "llama.cpp", "model": "m", "settings": settings, "prompt": [1, 2, 3], "questions": [[4, 5]]})
    assert order == ["timed", "peak", "gguf"]
    assert out["row"]["peak_rss_bytes"] == 123_000_000 and out["row"]["weight_bytes"] == 456
    assert out["row"]["bindings"]["system_info"] == SYSTEM_INFO.strip()


# ------------------------------------------------------------------------------------------------ the suite and its table


ENGINE = {"side": "active-rag", "model": "m", "weights": "int8", "prefill_dtype": "bfloat16", "weight_bytes": 600_000_000,
          "prefill_tok_s": 300.0, "decode_ms": {"1": 30.0, "8": 90.0}, "peak_rss_bytes": 900_000_000}
REFERENCE = {"side": "llama.cpp", "model": "m", "weights": "gguf", "weight_bytes": 500_000_000, "prefill_tok_s": 200.0,
             "decode_ms": {"1": 25.0, "8": 100.0}, "peak_rss_bytes": 600_000_000,
             "bindings": {"version": "0.3.36", "path": "/site/llama_cpp/__init__.py", "system_info": SYSTEM_INFO.strip()}}


def _fake_suite(monkeypatch, tmp_path: Path, build: LlamaCppBuild) -> list[tuple[dict[str, Any], dict[str, str] | None]]:
    """The suite with scripted side processes; returns the requests the sides were given (with their env)."""
    calls: list[tuple[dict[str, Any], dict[str, str] | None]] = []

    def run_side(request: dict[str, Any], *, label: str, env: dict[str, str] | None = None, **_: Any) -> dict[str, Any]:
        calls.append((request, env))
        if request["side"] == "info":
            return {"bindings": {**REFERENCE["bindings"], "path": f"{build.site}/llama_cpp/__init__.py"}}
        if request["side"] == "engine":
            return {"row": {**ENGINE, "weights": request["weights"]}, "prompt": [7, 8, 9], "questions": [[1], [2]]}
        return {"row": dict(REFERENCE)}

    monkeypatch.setattr(sides, "run_side", run_side)
    monkeypatch.setattr(builds, "resolve_build", lambda choice, progress=True: build)
    monkeypatch.setattr("active_rag.evaluation.bench_weights.copy_bandwidth", lambda: 50e9)
    monkeypatch.setattr("torch.set_num_threads", lambda n: None)  # the suite's, not the test session's
    return calls


def test_the_suite_runs_one_process_per_side_and_model_and_writes_the_memory_columns(monkeypatch, tmp_path: Path) -> None:
    build = LlamaCppBuild("native", "native", "0.3.36", builds.NATIVE_CMAKE_ARGS, str(tmp_path / "site"))
    calls = _fake_suite(monkeypatch, tmp_path, build)
    config = bench.LlamaCppBenchConfig(models=["m"], weights=["int8", "mixed"], batch_sizes=[1, 8], tokens=4, repeats=1,
                                       threads=1, out_dir=tmp_path / "out", llama_cpp="native")
    result = bench.run_llamacpp_bench(config, progress=False)
    # each engine process is preceded by one that loads the model (its one-time conversion is not measured)
    assert [c[0]["side"] for c in calls] == ["info", "prepare", "engine", "prepare", "engine", "llama.cpp"]
    assert [c[0].get("weights") for c in calls[1:5]] == ["int8", "int8", "mixed", "mixed"]
    calls = [c for c in calls if c[0]["side"] != "prepare"]
    llama_request, llama_env = calls[3]
    assert llama_request["prompt"] == [7, 8, 9] and llama_request["questions"] == [[1], [2]]
    assert llama_request["settings"]["batch_sizes"] == [1, 8] and llama_request["settings"]["threads"] == 1
    assert llama_env is not None and llama_env["PYTHONPATH"].split(":")[0] == build.site
    assert calls[1][1] is None  # the engine runs in this environment, not the native build's

    saved = json.loads((tmp_path / "out" / "bench-llamacpp.json").read_text())
    ratios = saved["models"]["m"]["engines"][0]["ratios"]
    assert ratios["rss_ratio"] == pytest.approx(900 / 600) and ratios["prefill_ratio"] == pytest.approx(1.5)
    assert saved["llama_cpp"]["kind"] == "native" and saved["llama_cpp"]["cmake_args"] == builds.NATIVE_CMAKE_ARGS
    assert saved["llama_cpp"]["bindings"]["system_info"] == SYSTEM_INFO.strip()
    table = (tmp_path / "out" / "bench-llamacpp.md").read_text()
    assert "| x limit | Peak RSS MB |" in table
    assert "| 600 |" in table and "| 900 |" in table and "**1.50x** |" in table
    assert "native build; CMAKE_ARGS: -DGGML_NATIVE=ON" in table and "FAKE_NATIVE = 1" in table


def test_an_avx2_run_holds_the_engine_side_to_avx2_and_says_so(monkeypatch, tmp_path: Path) -> None:
    build = LlamaCppBuild("avx2", "avx2", "0.3.36", builds.AVX2_CMAKE_ARGS, str(tmp_path / "site"))
    calls = _fake_suite(monkeypatch, tmp_path, build)
    config = bench.LlamaCppBenchConfig(models=["m"], weights=["mixed"], batch_sizes=[1, 8], tokens=4, repeats=1,
                                       threads=1, out_dir=tmp_path / "out", llama_cpp="avx2")
    bench.run_llamacpp_bench(config, progress=False)
    engine_env = next(env for request, env in calls if request["side"] == "engine")
    assert engine_env is not None and engine_env["ATEN_CPU_CAPABILITY"] == "avx2"
    assert engine_env["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    llama_env = next(env for request, env in calls if request["side"] == "llama.cpp")
    assert "ATEN_CPU_CAPABILITY" not in llama_env or llama_env["ATEN_CPU_CAPABILITY"] == os.environ.get("ATEN_CPU_CAPABILITY")
    table = (tmp_path / "out" / "bench-llamacpp.md").read_text()
    assert "avx2 build; CMAKE_ARGS: -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON" in table
    assert "Acting as an AVX2 CPU: llama.cpp built with AVX2 only, the engine's side run with ATEN_CPU_CAPABILITY=avx2" in table
    assert "-DGGML_AVX512=OFF" in builds.AVX2_CMAKE_ARGS and "-DGGML_AVX_VNNI=OFF" in builds.AVX2_CMAKE_ARGS


def test_rounds_alternate_the_sides_and_report_medians_and_each_rounds_ratios(monkeypatch, tmp_path: Path) -> None:
    build = LlamaCppBuild("native", "native", "0.3.36", builds.NATIVE_CMAKE_ARGS, str(tmp_path / "site"))
    calls = _fake_suite(monkeypatch, tmp_path, build)
    timed = calls  # every side's call, in order
    engine_ms = iter([30.0, 20.0, 40.0])  # the engine's batch-1 step in rounds 1, 2, 3
    reference_ms = iter([25.0, 25.0, 20.0])
    bandwidths = iter([50e9, 40e9, 60e9])
    run_side = sides.run_side

    def varying(request: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        out = run_side(request, **kwargs)
        if request["side"] in ("engine", "llama.cpp"):
            row = out["row"] = dict(out["row"])
            ms = next(engine_ms if request["side"] == "engine" else reference_ms)
            row["decode_ms"] = {"1": ms, "8": 4 * ms}
        return out

    monkeypatch.setattr(sides, "run_side", varying)
    monkeypatch.setattr("active_rag.evaluation.bench_weights.copy_bandwidth", lambda: next(bandwidths))
    config = bench.LlamaCppBenchConfig(models=["m"], weights=["mixed"], batch_sizes=[1, 8], tokens=4, repeats=1, rounds=3,
                                       threads=1, out_dir=tmp_path / "out", llama_cpp="native")
    result = bench.run_llamacpp_bench(config, progress=False)
    # round 1: the engine first (its prompt ids go to llama.cpp); round 2: llama.cpp first; round 3: the engine first
    sides_run = [request["side"] for request, _ in timed if request["side"] != "info"]
    assert sides_run == ["prepare", "engine", "llama.cpp", "llama.cpp", "engine", "engine", "llama.cpp"]
    llama_requests = [request for request, _ in timed if request["side"] == "llama.cpp"]
    assert all(r["prompt"] == [7, 8, 9] and r["questions"] == [[1], [2]] for r in llama_requests)
    entry = result["models"]["m"]
    assert entry["llamacpp"]["decode_ms"]["1"] == 25.0 and entry["engines"][0]["engine"]["decode_ms"]["1"] == 30.0
    assert entry["engines"][0]["ratios"]["decode_ratio"]["1"] == pytest.approx(30 / 25)  # medians' ratio
    assert [r["engines"][0]["decode_ms"]["1"] for r in entry["rounds"]] == [30.0, 20.0, 40.0]
    each = [r["decode_ratio"]["1"] for r in entry["engines"][0]["round_ratios"]]
    assert each == pytest.approx([30 / 25, 20 / 25, 40 / 20])
    assert result["copy_bandwidth_gb_s"] == pytest.approx(50) and result["copy_bandwidth_rounds_gb_s"] == [50, 40, 60]
    table = result["table"]
    assert "Rounds: 3, the sides alternating" in table and "50.0, 40.0, 60.0 GB/s" in table
    assert ("| m | each round | | | 1.50x, 1.50x, 1.50x (median 1.50x) | 1.20x, 0.80x, 2.00x (median 1.20x) | "
            "1.20x, 0.80x, 2.00x (median 1.20x) | | |") in table


def test_resolve_build_builds_the_avx2_flags_for_avx2(monkeypatch) -> None:
    seen: list[dict[str, Any]] = []

    def build(**kwargs: Any) -> LlamaCppBuild:
        seen.append(kwargs)
        return LlamaCppBuild(kwargs.get("kind", "native"), kwargs.get("kind", "native"), "0.3.36",
                             kwargs.get("cmake_args", builds.NATIVE_CMAKE_ARGS), "/site")

    assert builds.resolve_build("avx2", progress=False, build=build).kind == "avx2"
    assert seen[-1]["cmake_args"] == builds.AVX2_CMAKE_ARGS
    assert builds.resolve_build("native", progress=False, build=build).kind == "native"
    assert "cmake_args" not in seen[-1]


def test_the_table_states_a_failed_native_build_and_reads_old_results_without_memory() -> None:
    engine, reference = ({k: v for k, v in row.items() if k != "peak_rss_bytes"} for row in (ENGINE, REFERENCE))
    ratios = bench.compare(engine, reference, bandwidth=50e9)
    assert ratios["rss_ratio"] is None
    old = {"environment": {"cpu_capability": "AVX512", "threads": 2, "torch": "2.13"}, "copy_bandwidth_gb_s": 50.0,
           "config": {"batch_sizes": [1, 8], "prefill_tokens": 939, "repeats": 3, "tokens": 48},
           "models": {"m": {"llamacpp": reference, "engines": [{"engine": engine, "ratios": ratios}]}}}
    rows = [line for line in bench.format_llamacpp_table(old).splitlines() if line.startswith("| m |")]
    assert [row.endswith("| n/a |") for row in rows] == [True, True, False] and rows[2].endswith("| | |")
    assert "llama.cpp: llama-cpp-python" not in bench.format_llamacpp_table(old)
    result = {**old, "models": {"m": {"llamacpp": REFERENCE, "engines": [{"engine": ENGINE, "ratios": ratios}]}}}
    failed = builds.LlamaCppBuild("native", "installed", "0.3.36", None, None, "native build failed (pip wheel exited 1)")
    table = bench.format_llamacpp_table({**result, "llama_cpp": {**failed.to_dict(), "bindings": REFERENCE["bindings"]}})
    assert "installed build (--llama-cpp native requested: native build failed (pip wheel exited 1))" in table
    assert "CMAKE_ARGS: not recorded" in table and "llama_print_system_info(): CPU : SSE3 = 1" in table


def test_a_native_build_that_loads_other_bindings_gives_way_to_the_installed_ones(monkeypatch, capsys) -> None:
    answers = iter([{"bindings": {"path": "/venv/llama_cpp/__init__.py", "system_info": "a"}},
                    {"bindings": {"path": "/venv/llama_cpp/__init__.py", "system_info": "a"}}])
    monkeypatch.setattr(sides, "run_side", lambda request, **_: next(answers))
    monkeypatch.setattr(builds, "installed_cmake_args", lambda: None)
    native = LlamaCppBuild("native", "native", "0.3.36", builds.NATIVE_CMAKE_ARGS, "/cache/site")
    build, info = sides.probe_bindings(native)
    assert build.kind == "installed" and build.requested == "native" and build.site is None
    assert "not from /cache/site" in build.note and info["system_info"] == "a"
    assert "measuring the installed bindings" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ the native build


def _fake_pip(calls: list[tuple[list[str], dict[str, str]]], fail: bool = False):
    def runner(cmd: list[str], *, env: dict[str, str], **_: Any) -> subprocess.CompletedProcess[str]:
        args = cmd[cmd.index("pip") + 1:]
        calls.append((args, env))
        if fail:
            return _completed(1, "", "CMake Error: no compiler")
        if args[0] == "wheel":
            folder = Path(args[args.index("-w") + 1])
            (folder / "llama_cpp_python-0.3.36-cp311-cp311-linux_x86_64.whl").write_bytes(b"wheel")
        else:
            _fake_bindings(Path(args[args.index("--target") + 1]), "0.3.36")
        return _completed()

    return runner


def test_build_native_builds_once_with_its_cmake_args_and_caches_by_their_hash(tmp_path: Path) -> None:
    calls: list[tuple[list[str], dict[str, str]]] = []
    build = builds.build_native(tmp_path, runner=_fake_pip(calls), progress=False)
    folder = tmp_path / builds.build_key(builds.LLAMA_CPP_VERSION, builds.NATIVE_CMAKE_ARGS)
    assert build.kind == "native" and build.site == str(folder / "site")
    assert build.cmake_args == builds.NATIVE_CMAKE_ARGS
    assert build.cmake_args.startswith("-DGGML_NATIVE=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF")
    (wheel_args, env), (install_args, _) = calls
    assert wheel_args[:5] == ["wheel", "--no-cache-dir", "--no-deps", "--no-binary", "llama-cpp-python"]
    assert wheel_args[-1] == "llama-cpp-python==0.3.36" and env["CMAKE_ARGS"] == builds.NATIVE_CMAKE_ARGS
    assert install_args[:3] == ["install", "--no-deps", "--no-index"] and "--target" in install_args
    assert json.loads((folder / "build.json").read_text())["cmake_args"] == builds.NATIVE_CMAKE_ARGS
    again = builds.build_native(tmp_path, runner=_fake_pip(calls), progress=False)
    assert len(calls) == 2 and again.site == build.site
    assert builds.build_key("0.3.36", "-DGGML_NATIVE=ON") != builds.build_key("0.3.37", "-DGGML_NATIVE=ON")
    assert builds.build_key("0.3.36", "-DGGML_NATIVE=ON") != builds.build_key("0.3.36", "-DGGML_NATIVE=OFF")


def test_a_failed_native_build_says_so_in_one_line_and_falls_back(monkeypatch, tmp_path: Path, capsys) -> None:
    calls: list[tuple[list[str], dict[str, str]]] = []
    with pytest.raises(RuntimeError, match="pip wheel exited 1"):
        builds.build_native(tmp_path, runner=_fake_pip(calls, fail=True), progress=False)
    monkeypatch.setattr(builds, "installed_cmake_args", lambda: None)
    build = builds.resolve_build("native", build=lambda progress: builds.build_native(
        tmp_path, runner=_fake_pip([], fail=True), progress=progress), progress=False)
    assert build.requested == "native" and build.kind == "installed" and build.site is None
    assert build.note.startswith("native build failed (pip wheel exited 1")
    err = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(err) == 1 and "native build failed" in err[0] and "measuring the installed bindings" in err[0]
    with pytest.raises(ValueError, match="--llama-cpp"):
        builds.resolve_build("fastest")


def test_the_installed_cmake_args_are_those_make_setup_wrote_beside_the_matching_wheel(monkeypatch, tmp_path: Path) -> None:
    args = "-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF -DGGML_AVX2=ON"
    record = "llama_cpp/lib/libggml-cpu.so,sha256=ABC,10\n"

    class Dist:
        version = "0.3.36"

        def read_text(self, name: str) -> str:
            return record

    monkeypatch.setattr("importlib.metadata.distribution", lambda name: Dist())
    folder = tmp_path / "0123456789ab"
    folder.mkdir()
    with zipfile.ZipFile(folder / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl", "w") as zf:
        zf.writestr("llama_cpp_python-0.3.36.dist-info/RECORD", record)
    assert builds.installed_cmake_args(tmp_path) is None  # no cmake-args.txt: not shown
    (folder / builds.CMAKE_ARGS_FILE).write_text(args + "\n", encoding="utf-8")
    assert builds.installed_cmake_args(tmp_path) == args
    record = "llama_cpp/lib/libggml-cpu.so,sha256=OTHER,10\n"
    assert builds.installed_cmake_args(tmp_path) is None  # another library than the wheel's


def test_the_cli_passes_llama_cpp_native_to_the_suite(monkeypatch, tmp_path: Path, capsys) -> None:
    from active_rag.cli.commands import main

    seen: list[bench.LlamaCppBenchConfig] = []
    monkeypatch.setitem(sys.modules, "llama_cpp", types.ModuleType("llama_cpp"))
    monkeypatch.setattr(bench, "run_llamacpp_bench", lambda config, progress=True: seen.append(config) or {"table": "T"})
    assert main(["bench", "--suite", "llamacpp", "--llama-cpp", "native", "--models", "m", "--weights", "int8",
                 "--out", str(tmp_path)]) == 0
    assert seen[0].llama_cpp == "native" and seen[0].models == ["m"]
    with pytest.raises(SystemExit):
        main(["bench", "--suite", "llamacpp", "--llama-cpp", "fastest"])
    with pytest.raises(ValueError, match="--llama-cpp"):
        bench.LlamaCppBenchConfig(llama_cpp="fastest")
    assert main(["bench", "--suite", "llamacpp", "--models", "m", "--weights", "int8", "--rounds", "3",
                 "--out", str(tmp_path)]) == 0
    assert seen[-1].rounds == 3 and seen[0].rounds == 1
    assert main(["bench", "--suite", "llamacpp", "--rounds", "0"]) == 2
    assert main(["bench", "--suite", "weights", "--rounds", "2"]) == 2
    err = capsys.readouterr().err
    assert "--rounds" in err and "pass --suite llamacpp" in err


@pytest.mark.slow
def test_a_real_engine_side_process_on_the_tiny_model_returns_timings_memory_and_prompt_ids(tiny_dir: Path) -> None:
    settings = {"batch_sizes": [1, 2], "tokens": 3, "prefill_tokens": 16, "repeats": 1, "threads": 1, "n_batch": 8}
    out = sides.run_side({"side": "engine", "model": str(tiny_dir), "weights": "float32", "settings": settings},
                         label="engine side (tiny)")
    row = out["row"]
    assert row["side"] == "active-rag" and set(row["decode_ms"]) == {"1", "2"} and row["prefill_tok_s"] > 0
    assert len(out["prompt"]) == 16 and len(out["questions"]) == len(bench.QUESTIONS)
    if sys.platform.startswith("linux"):
        assert row["rss_source"] == "VmHWM"
    assert row["peak_rss_bytes"] >= row["rss_before_load_bytes"] > 0


def test_the_native_build_keeps_ggml_amx_kernels_out_even_where_march_native_has_amx() -> None:
    import shlex

    args = shlex.split(builds.NATIVE_CMAKE_ARGS)  # how scikit-build-core reads CMAKE_ARGS
    assert "-DGGML_NATIVE=ON" in args and "-DGGML_AMX_INT8=OFF" in args
    for language in ("C", "CXX"):
        flags = next(a for a in args if a.startswith(f"-DCMAKE_{language}_FLAGS="))
        assert flags.split("=", 1)[1].split() == ["-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16"]


def test_the_table_says_when_the_engine_side_decoded_without_its_kernels() -> None:
    """A build the process could not load (a stale source, another torch) makes packed layers decode with torch's
    kernels: the table must not read as the kernels' figures."""
    ratios = bench.compare(ENGINE, REFERENCE, bandwidth=50e9)

    def table(**engine: Any) -> str:
        result = {"environment": {"cpu_capability": "AVX2", "threads": 2, "torch": "2.13"}, "copy_bandwidth_gb_s": 50.0,
                  "config": {"batch_sizes": [1, 8], "prefill_tokens": 939, "repeats": 3, "tokens": 48},
                  "models": {"m": {"llamacpp": REFERENCE, "engines": [{"engine": {**ENGINE, **engine}, "ratios": ratios}]}}}
        return bench.format_llamacpp_table(result)

    reason = "torch (the active-rag kernel is not built: run python -m active_rag.kernels.build)"
    assert f"**Not the project's decode path: the engine's side decoded with {reason}.**" in table(kernel_isa=None, kernel=reason)
    assert "Not the project's decode path" not in table(kernel_isa="avx2", kernel="active-rag avx2")
    assert "Not the project's decode path" not in table(kernel_isa=None, weights="float32")
