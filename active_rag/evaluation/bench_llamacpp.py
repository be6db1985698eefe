"""``active-rag bench --suite llamacpp``: this library's engine against llama.cpp on the same CPU, in one run.

For every model (a registry name: the same GGUF file feeds both sides) and batch size, each side in a process of
its own (the measurements and the processes: :mod:`~active_rag.evaluation.bench_llamacpp_sides`):

- **prefill**: prompt tokens per second of one prompt (the demo passages, ``prefill_tokens`` tokens, the same
  token ids on both sides), best of ``repeats``; the engine through ``lm.session(ids)`` with the prefix cache
  off, llama.cpp through ``llama_decode`` in batches of ``n_batch`` tokens after clearing its KV cache;
- **decode**: milliseconds per decode step (every sequence of the batch gets one token) over ``tokens`` greedy
  steps after the prefill, median of ``repeats``; the engine through ``session.generate`` (threads sharing
  batched forwards at batch > 1), llama.cpp through ``llama_decode`` with one token per sequence per call
  (``n_seq_max`` sequences in one KV cache);
- **the memory limit**: the bytes of weights one decode step reads (the engine:
  :func:`~active_rag.models.quantized.model_weight_bytes`; llama.cpp: the GGUF's tensors but the token embedding, of
  which it reads one row) over the machine's copy bandwidth, measured in this (the parent) process;
- **memory**: the peak resident set of each side's own process (``VmHWM``): importing its library, loading the
  model, prefilling and decoding (one process per side and model, the engine one per ``--weights`` option).

Every figure of the engine is also given as a ratio to llama.cpp's (prefill: engine / llama.cpp tokens per
second; decode: engine / llama.cpp milliseconds; memory: engine / llama.cpp peak bytes), computed from the
figures measured in this run. Timings are comparable within one run on one machine only. ``rounds`` > 1 measures
every model that many times, the sides alternating which runs first, and reports each figure's median over the rounds
(peak RSS: the largest) with every round's ratios beneath: on a shared machine whose bandwidth drifts by the minute,
one round's ratio can be off by 20%.

Which llama.cpp is measured (``--llama-cpp installed``, the default; ``native``: built once with
``-DGGML_NATIVE=ON``; ``avx2``: built once with AVX2 only, the engine's side held to AVX2 too, to act as an AVX2 CPU)
and the build flags reported with it: :mod:`~active_rag.evaluation.bench_llamacpp_build`.
"""

from __future__ import annotations

import platform
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from active_rag.evaluation.bench_llamacpp_sides import (  # the measurements, re-exported
    QUESTIONS,
    LlamaCppRunner,
    SideSettings,
    best_seconds,
    gguf_decode_bytes,
)

DEFAULT_MODELS = ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]


@dataclass
class LlamaCppBenchConfig:
    """Settings of ``active-rag bench --suite llamacpp``."""

    models: list[str] = field(default_factory=lambda: list(DEFAULT_MODELS))
    weights: list[str] = field(default_factory=lambda: ["auto"])
    batch_sizes: list[int] = field(default_factory=lambda: [1, 8])
    tokens: int = 48
    prefill_tokens: int = 939
    repeats: int = 3
    rounds: int = 1
    """Each model measured this many times on both sides, the sides alternating which runs first; the table gives
    each figure's median over the rounds and each round's ratios (a shared machine's bandwidth drifts by minutes)."""
    threads: int = 2
    n_batch: int = 512
    out_dir: Path = Path("results/bench/llamacpp")
    llama_cpp: str = "installed"
    """``installed`` (this environment's llama-cpp-python), ``native`` (built once with -DGGML_NATIVE=ON) or ``avx2``
    (built once with AVX2 only, the engine's side held to AVX2 too: a run that acts as an AVX2 CPU)."""

    def __post_init__(self) -> None:
        from active_rag.validation import check_int
        from active_rag.models.weights import check_weights

        self.weights = [check_weights(w) for w in self.weights]
        if not self.weights or not self.models:
            from active_rag.errors import InvalidOptionError

            raise InvalidOptionError("the llamacpp suite needs at least one model and one --weights option")
        for b in self.batch_sizes:
            check_int("batch size", b, minimum=1)
        check_int("tokens", self.tokens, minimum=2)
        check_int("prefill tokens", self.prefill_tokens, minimum=2)
        check_int("repeats", self.repeats, minimum=1)
        check_int("rounds", self.rounds, minimum=1)
        check_int("threads", self.threads, minimum=1)
        check_int("n_batch", self.n_batch, minimum=1)
        if self.llama_cpp not in ("installed", "native", "avx2"):
            from active_rag.errors import InvalidOptionError

            raise InvalidOptionError(f"--llama-cpp must be installed, native or avx2, got {self.llama_cpp!r}")
        self.out_dir = Path(self.out_dir)


def compare(engine: dict[str, Any], reference: dict[str, Any], bandwidth: float) -> dict[str, Any]:
    """The ratios of one model's engine row to its llama.cpp row (timings and, where both rows have it, peak memory),
    and each side's batch-1 time over its memory limit (weight bytes per step / copy bandwidth)."""
    out: dict[str, Any] = {"prefill_ratio": engine["prefill_tok_s"] / reference["prefill_tok_s"], "decode_ratio": {}}
    for b, ms in engine["decode_ms"].items():
        out["decode_ratio"][b] = ms / reference["decode_ms"][b]
    for key, row in (("engine", engine), ("llamacpp", reference)):
        limit_ms = 1000 * row["weight_bytes"] / bandwidth
        out[f"{key}_limit_ms"] = limit_ms
        out[f"{key}_x_limit"] = row["decode_ms"]["1"] / limit_ms if "1" in row["decode_ms"] else None
    peaks = engine.get("peak_rss_bytes"), reference.get("peak_rss_bytes")
    out["rss_ratio"] = peaks[0] / peaks[1] if peaks[0] and peaks[1] else None
    return out


def engine_env(config: LlamaCppBenchConfig) -> dict[str, str] | None:
    """The engine side's environment: this process's (``None``), or with ``--llama-cpp avx2`` torch and oneDNN held
    to AVX2 (:data:`~active_rag.evaluation.bench_llamacpp_build.AVX2_ENGINE_ENV`)."""
    import os

    from active_rag.evaluation.bench_llamacpp_build import AVX2_ENGINE_ENV

    return {**os.environ, **AVX2_ENGINE_ENV} if config.llama_cpp == "avx2" else None


def _measure_model(model: str, config: LlamaCppBenchConfig, env: dict[str, str], progress: bool,
                   ids: tuple[list[int], list[list[int]]] | None = None, reference_first: bool = False) -> dict[str, Any]:
    """One model's rows: an engine process per ``--weights`` option (in :func:`engine_env`), then a llama.cpp process
    (in ``env``) given the engine's prompt ids. Given ``ids`` (an earlier round's prompt and questions), the engine's
    processes skip the load that converts the model (done in round one), and with ``reference_first`` llama.cpp's
    process runs before them."""
    from active_rag.evaluation import bench_llamacpp_sides as sides

    settings = asdict(SideSettings(list(config.batch_sizes), config.tokens, config.prefill_tokens, config.repeats,
                                   config.threads, config.n_batch))

    def reference(prompt: list[int], questions: list[list[int]]) -> dict[str, Any]:
        if progress:
            print(f"[llamacpp] {model}: llama.cpp", flush=True)
        return sides.run_side({"side": "llama.cpp", "model": model, "settings": settings, "prompt": prompt,
                               "questions": questions}, label=f"llama.cpp side ({model})", env=env)["row"]

    first = ids is None
    reference_row = reference(*ids) if ids is not None and reference_first else None
    engines = []
    for weights in config.weights:
        if progress:
            print(f"[llamacpp] {model}: active-rag ({weights} weights)", flush=True)
        if first:  # the first load converts and packs (minutes, several GB): in a process of its own, not the measured one
            sides.run_side({"side": "prepare", "model": model, "weights": weights}, label=f"active-rag load ({model})")
        out = sides.run_side({"side": "engine", "model": model, "weights": weights, "settings": settings},
                             label=f"active-rag side ({model}, {weights})", env=engine_env(config))
        engines.append(out["row"])
        ids = ids or (out["prompt"], out["questions"])
    assert ids is not None
    return {"llamacpp": reference_row or reference(*ids), "engines": engines, "ids": ids}


def median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One side's rows of several rounds as one: the median prefill speed and decode times, the largest peak RSS."""
    import statistics

    out = dict(rows[0])
    out["prefill_tok_s"] = statistics.median(r["prefill_tok_s"] for r in rows)
    out["decode_ms"] = {b: statistics.median(r["decode_ms"][b] for r in rows) for b in rows[0]["decode_ms"]}
    peaks = [r["peak_rss_bytes"] for r in rows if r.get("peak_rss_bytes")]
    if peaks:
        out["peak_rss_bytes"] = max(peaks)
    out["rounds"] = len(rows)
    return out


def llamacpp_suite(config: LlamaCppBenchConfig, progress: bool = True) -> dict[str, Any]:
    """Measure every model on both sides (see the module docstring), each side in its own process."""
    import torch

    from active_rag.evaluation import bench_llamacpp_build as builds
    from active_rag.evaluation import bench_llamacpp_sides as sides
    from active_rag.evaluation.bench_weights import copy_bandwidth

    build, bindings = sides.probe_bindings(builds.resolve_build(config.llama_cpp, progress), progress)
    if progress:
        print(f"[llamacpp] llama.cpp: {format_build(build.to_dict(), bindings)}", flush=True)
    torch.set_num_threads(config.threads)
    result: dict[str, Any] = {
        "config": {**asdict(config), "out_dir": str(config.out_dir)},
        "environment": {"cpu_capability": torch.backends.cpu.get_cpu_capability(), "threads": config.threads,
                        "torch": torch.__version__, "machine": platform.processor() or platform.machine(),
                        "memory": "peak resident set (VmHWM) of a fresh process per side and model: import, load, "
                                  "prefill and decode"},
        "llama_cpp": {**build.to_dict(), "bindings": bindings},
        "models": {},
    }
    if config.llama_cpp == "avx2":
        result["environment"]["engine_env"] = builds.AVX2_ENGINE_ENV
    env = builds.child_env(build)
    bandwidths: list[float] = []
    rounds: dict[str, list[dict[str, Any]]] = {model: [] for model in config.models}
    ids: dict[str, tuple[list[int], list[list[int]]]] = {}
    for number in range(config.rounds):
        bandwidths.append(copy_bandwidth())
        for model in config.models:
            if progress and config.rounds > 1:
                print(f"[llamacpp] round {number + 1} of {config.rounds}", flush=True)
            rows = _measure_model(model, config, env, progress, ids.get(model), reference_first=number % 2 == 1)
            ids[model] = rows.pop("ids")
            rounds[model].append(rows)
    bandwidth = statistics.median(bandwidths)
    result["copy_bandwidth_gb_s"] = bandwidth / 1e9
    result["copy_bandwidth_rounds_gb_s"] = [b / 1e9 for b in bandwidths]
    for model, measured in rounds.items():
        reference = median_row([r["llamacpp"] for r in measured])
        engines = []
        for i in range(len(config.weights)):
            engine = median_row([r["engines"][i] for r in measured])
            per_round = [compare(r["engines"][i], r["llamacpp"], b) for r, b in zip(measured, bandwidths, strict=True)]
            engines.append({"engine": engine, "ratios": compare(engine, reference, bandwidth),
                            "round_ratios": [{"prefill_ratio": c["prefill_ratio"], "decode_ratio": c["decode_ratio"]}
                                             for c in per_round]})
        result["models"][model] = {"llamacpp": reference, "engines": engines}
        if len(measured) > 1:
            result["models"][model]["rounds"] = measured  # each round's rows as measured
    return result


def format_build(build: dict[str, Any], bindings: dict[str, Any] | None) -> str:
    """One line: which llama-cpp-python was measured, the cmake args it was built with and its CPU features."""
    kind = build.get("kind", "installed")
    text = f"llama-cpp-python {build.get('version') or '?'}, {kind} build"
    requested = build.get("requested")
    if requested in ("native", "avx2") and kind != requested:
        text += f" (--llama-cpp {requested} requested: " + build.get("note", f"the {requested} build failed") + ")"
    text += f"; CMAKE_ARGS: {build['cmake_args']}" if build.get("cmake_args") else "; CMAKE_ARGS: not recorded"
    if bindings:
        text += f"; llama_print_system_info(): {bindings.get('system_info', '?')}"
        if bindings.get("omp_wait_policy"):
            text += f"; OpenMP wait policy: {bindings['omp_wait_policy']}"
    return text


def _mb(value: Any) -> str:
    return f"{value / 1e6:.0f}" if value else "n/a"


def format_llamacpp_table(result: dict[str, Any]) -> str:
    """The Markdown report: one row per side and model, one ratio row per engine option."""
    env = result["environment"]
    batches = [str(b) for b in result["config"]["batch_sizes"]]
    lines = [
        f"# active-rag bench --suite llamacpp ({env['cpu_capability']}, {env['threads']} threads, torch {env['torch']})",
        "",
        f"Copy bandwidth (read + write): {result['copy_bandwidth_gb_s']:.1f} GB/s. Prefill: tokens/s of a "
        f"{result['config']['prefill_tokens']}-token prompt (best of {result['config']['repeats']}); decode: ms per step, every "
        f"sequence of the batch gets one token ({result['config']['tokens']} steps, median of {result['config']['repeats']}); "
        "x limit: batch-1 decode / (weight bytes per step / copy bandwidth); peak RSS: the peak resident set (VmHWM) "
        "of the side's own process (import, load, prefill, decode); ratios: active-rag / llama.cpp.",
        "",
    ]
    rounds = result["config"].get("rounds", 1)
    if rounds > 1:
        seen = ", ".join(f"{b:.1f}" for b in result.get("copy_bandwidth_rounds_gb_s", []))
        lines += [f"Rounds: {rounds}, the sides alternating which runs first (round one the engine's, which gives "
                  "llama.cpp its prompt ids); every figure the median of the rounds' (peak RSS: the largest), the copy "
                  f"bandwidth the median of {seen} GB/s; under each ratio row, every round's ratios (each round's sides "
                  "measured minutes apart) and their median.", ""]
    if "llama_cpp" in result:
        lines += [f"llama.cpp: {format_build(result['llama_cpp'], result['llama_cpp'].get('bindings'))}.", ""]
    fallback = sorted({e["engine"].get("kernel") or "torch" for m in result["models"].values() for e in m["engines"]
                       if e["engine"].get("kernel_isa") is None and e["engine"]["weights"] != "float32"})
    if fallback:
        lines += [f"**Not the project's decode path: the engine's side decoded with {'; '.join(fallback)}.** Build the "
                  "kernels (`python -m active_rag.kernels.build`; `active-rag doctor` says which kernel decodes) and "
                  "run the bench again.", ""]
    if env.get("engine_env"):
        held = " ".join(f"{k}={v}" for k, v in env["engine_env"].items())
        paths = sorted({e["engine"].get("kernel_isa") or "?" for m in result["models"].values() for e in m["engines"]})
        lines += [f"Acting as an AVX2 CPU: llama.cpp built with AVX2 only, the engine's side run with {held} (its "
                  f"kernels' path: {', '.join(paths)}).", ""]
    lines += [
        "| Model | Side | Weights | MB/step | Prefill tok/s | " + " | ".join(f"Decode ms (batch {b})" for b in batches)
        + " | x limit | Peak RSS MB |",
        "|---|---|---|---:|---:|" + "---:|" * len(batches) + "---:|---:|",
    ]

    def line(model: str, row: dict[str, Any], x_limit: float) -> str:
        weights = row["weights"] + (f", {row['prefill_dtype']} prefill" if row.get("prefill_dtype") else "")
        return (f"| {model} | {row['side']} | {weights} | {row['weight_bytes'] / 1e6:.0f} | {row['prefill_tok_s']:.0f} | "
                + " | ".join(f"{row['decode_ms'][b]:.1f}" for b in batches) + f" | {x_limit:.2f} | {_mb(row.get('peak_rss_bytes'))} |")

    for model, entry in result["models"].items():
        first = entry["engines"][0]["ratios"]
        lines.append(line(model, entry["llamacpp"], first["llamacpp_x_limit"]))
        for item in entry["engines"]:
            ratios = item["ratios"]
            rss = f" **{ratios['rss_ratio']:.2f}x** |" if ratios.get("rss_ratio") else " |"
            lines.append(line(model, item["engine"], ratios["engine_x_limit"]))
            lines.append(f"| {model} | ratio ({item['engine']['weights']} / llama.cpp) | | | **{ratios['prefill_ratio']:.2f}x** | "
                         + " | ".join(f"**{ratios['decode_ratio'][b]:.2f}x**" for b in batches) + " | |" + rss)
            each = item.get("round_ratios") or []
            if len(each) > 1:
                def cell(values: list[float]) -> str:
                    return ", ".join(f"{v:.2f}x" for v in values) + f" (median {statistics.median(values):.2f}x)"

                lines.append(f"| {model} | each round | | | {cell([r['prefill_ratio'] for r in each])} | "
                             + " | ".join(cell([r["decode_ratio"][b] for r in each]) for b in batches) + " | | |")
    return "\n".join(lines) + "\n"


def run_llamacpp_bench(config: LlamaCppBenchConfig, progress: bool = True) -> dict[str, Any]:
    """Run the suite and write ``bench-llamacpp.json`` and ``bench-llamacpp.md`` to ``config.out_dir``."""
    from active_rag.evaluation.bench_weights import write_bench

    result = llamacpp_suite(config, progress)
    result["table"] = format_llamacpp_table(result)
    write_bench(config.out_dir, "llamacpp", result)
    return result


__all__ = [
    "QUESTIONS",
    "LlamaCppBenchConfig",
    "LlamaCppRunner",
    "best_seconds",
    "compare",
    "format_build",
    "format_llamacpp_table",
    "gguf_decode_bytes",
    "llamacpp_suite",
    "median_row",
    "run_llamacpp_bench",
]
