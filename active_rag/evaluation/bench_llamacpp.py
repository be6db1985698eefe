"""``active-rag bench --suite llamacpp``: this library's engine against llama.cpp on the same CPU, in one run.

For every model (a registry name: the same GGUF file feeds both sides) and batch size, in one process:

- **prefill**: prompt tokens per second of one prompt (the demo passages, ``prefill_tokens`` tokens, the same
  token ids on both sides), best of ``repeats``; the engine through ``lm.session(ids)`` with the prefix cache
  off, llama.cpp through ``llama_decode`` in batches of ``n_batch`` tokens after clearing its KV cache;
- **decode**: milliseconds per decode step (every sequence of the batch gets one token) over ``tokens`` greedy
  steps after the prefill, median of ``repeats``; the engine through ``session.generate`` (threads sharing
  batched forwards at batch > 1), llama.cpp through ``llama_decode`` with one token per sequence per call
  (``n_seq_max`` sequences in one KV cache);
- **the memory limit**: the bytes of weights one decode step reads (the engine:
  :func:`~active_rag.models.quantized.model_weight_bytes`; llama.cpp: the GGUF's tensors but the token embedding, of
  which it reads one row) over the machine's copy bandwidth, measured in the same run.

Every figure of the engine is also given as a ratio to llama.cpp's (prefill: engine / llama.cpp tokens per
second; decode: engine / llama.cpp milliseconds), computed from the seconds measured here. Timings are
comparable within one run on one machine only.
"""

from __future__ import annotations

import gc
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

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
    threads: int = 2
    n_batch: int = 512
    out_dir: Path = Path("results/bench/llamacpp")

    def __post_init__(self) -> None:
        from active_rag.validation import check_int
        from active_rag.models.weights import check_weights

        self.weights = [check_weights(w) for w in self.weights]
        for b in self.batch_sizes:
            check_int("batch size", b, minimum=1)
        check_int("tokens", self.tokens, minimum=2)
        check_int("prefill tokens", self.prefill_tokens, minimum=2)
        check_int("repeats", self.repeats, minimum=1)
        check_int("threads", self.threads, minimum=1)
        check_int("n_batch", self.n_batch, minimum=1)
        self.out_dir = Path(self.out_dir)


def best_seconds(run: Callable[[], Any], repeats: int) -> float:
    """The shortest of ``repeats`` timings of ``run()``."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best


# ------------------------------------------------------------------------------------------------ llama.cpp


class LlamaCppRunner:
    """llama.cpp (llama-cpp-python's low-level API) over one GGUF file: batched prefill and greedy decoding of
    several sequences in one KV cache."""

    def __init__(self, gguf: Path, *, threads: int, n_ctx: int, n_batch: int, n_seq_max: int) -> None:
        import llama_cpp
        from llama_cpp import _internals

        self._llama_cpp = llama_cpp
        self.llm = llama_cpp.Llama(model_path=str(gguf), n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch,
                                   n_threads=threads, n_threads_batch=threads, verbose=False)
        params = self.llm.context_params
        params.n_seq_max = n_seq_max
        params.kv_unified = True  # one cache of n_ctx cells shared by the sequences
        self.ctx = _internals.LlamaContext(model=self.llm._model, params=params, verbose=False)
        self.n_batch = n_batch
        self.batch = _internals.LlamaBatch(n_tokens=max(n_batch, n_seq_max), embd=0, n_seq_max=n_seq_max, verbose=False)
        self.n_vocab = self.llm.n_vocab()

    def close(self) -> None:
        self.batch.close()
        self.ctx.close()
        self.llm.close()

    def _decode(self, entries: Sequence[tuple[int, int, int, bool]]) -> None:
        """One ``llama_decode`` of ``(token, position, sequence, wants logits)`` entries."""
        b = self.batch.batch
        b.n_tokens = len(entries)
        for i, (token, pos, seq, logits) in enumerate(entries):
            b.token[i] = token
            b.pos[i] = pos
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq
            b.logits[i] = logits
        self.ctx.decode(self.batch)

    def clear(self) -> None:
        self._llama_cpp.llama_memory_clear(self._llama_cpp.llama_get_memory(self.ctx.ctx), True)

    def prefill(self, ids: Sequence[int], seq: int = 0) -> None:
        """Feed ``ids`` to sequence ``seq`` from position 0, ``n_batch`` tokens a call; logits of the last."""
        for start in range(0, len(ids), self.n_batch):
            chunk = ids[start : start + self.n_batch]
            last = start + len(chunk) == len(ids)
            self._decode([(t, start + i, seq, last and i == len(chunk) - 1) for i, t in enumerate(chunk)])

    def _argmax(self, index: int) -> int:
        import numpy as np

        logits = np.ctypeslib.as_array(self.ctx.get_logits_ith(index), shape=(self.n_vocab,))
        return int(logits.argmax())

    def decode_step_ms(self, prompts: Sequence[Sequence[int]], tokens: int) -> float:
        """Milliseconds per decode step of ``len(prompts)`` sequences, greedy, prefill not timed."""
        self.clear()
        positions: list[int] = []
        current = []
        for seq, ids in enumerate(prompts):
            self.prefill(ids, seq)
            positions.append(len(ids))
            current.append(self._argmax(-1))  # the first token: from this prefill's last logits
        t0 = time.perf_counter()
        for _ in range(tokens):
            self._decode([(current[s], positions[s], s, True) for s in range(len(prompts))])
            positions = [p + 1 for p in positions]
            current = [self._argmax(s) for s in range(len(prompts))]
        return 1000 * (time.perf_counter() - t0) / tokens

    def prefill_tokens_per_s(self, ids: Sequence[int], repeats: int) -> float:
        def run() -> None:
            self.clear()
            self.prefill(ids)

        return len(ids) / best_seconds(run, repeats)


def gguf_decode_bytes(gguf: Path) -> int:
    """Bytes of the GGUF's tensors that one decode step reads: all but the token embedding, plus one of its rows."""
    import gguf as gguf_py

    reader = gguf_py.GGUFReader(str(gguf))
    total = 0
    for tensor in reader.tensors:
        if tensor.name == "token_embd.weight":
            rows = int(tensor.shape[-1]) if len(tensor.shape) > 1 else 1
            total += int(tensor.n_bytes) // max(rows, 1)
        else:
            total += int(tensor.n_bytes)
    return total


# ------------------------------------------------------------------------------------------------ the suite


QUESTIONS = [
    "Who is Kasper Schmeichel's father?",
    "A Japanese manga series based on a 16 year old high school student Ichitaka Seto, is written and illustrated by someone born in what year?",
    "Which river flows through Paris?",
    "What government position was held by the woman who portrayed Corliss Archer in the film Kiss and Tell?",
]
"""The decode prompts (one per sequence, repeated for larger batches)."""


def _engine_row(model: str, weights: str, config: LlamaCppBenchConfig) -> tuple[dict[str, Any], list[int], list[list[int]]]:
    """The engine's row, the prefill prompt's ids and the decode prompts' ids (the chat template applied)."""
    from active_rag.evaluation.bench_weights import _prefill_prompt, decode_step_ms, prefill_tokens_per_s
    from active_rag.decoding.model import ActiveLM
    from active_rag.models.quantized import model_weight_bytes, prefill_dtype

    t0 = time.perf_counter()
    lm = ActiveLM.load(model, weights=weights, device="cpu")
    load_s = time.perf_counter() - t0
    prompt = _prefill_prompt(lm, config.prefill_tokens)
    questions = [lm.prompt_ids(q) for q in QUESTIONS]
    decode_step_ms(lm, questions[:1], 4)  # warm-up: first-call allocations
    row: dict[str, Any] = {
        "side": "active-rag", "model": model, "weights": lm.weights, "prefill_dtype": str(prefill_dtype()).removeprefix("torch."),
        "load_s": load_s, "weight_bytes": model_weight_bytes(lm.model), "decode_ms": {},
        "prefill_tok_s": prefill_tokens_per_s(lm, prompt, config.repeats),
    }
    for b in config.batch_sizes:
        batch = [questions[i % len(questions)] for i in range(b)]
        row["decode_ms"][str(b)] = statistics.median(decode_step_ms(lm, batch, config.tokens) for _ in range(config.repeats))
    del lm
    gc.collect()
    return row, prompt, questions


def _llamacpp_row(model: str, config: LlamaCppBenchConfig, prompt: list[int], questions: list[list[int]]) -> dict[str, Any]:
    from active_rag.models.gguf_files import resolve_gguf

    path = resolve_gguf(model)
    # one KV cache shared by the sequences: the prefill prompt alone, or every decode sequence at once
    per_sequence = max(len(q) for q in questions) + config.tokens + 8
    n_ctx = max(len(prompt) + 8, per_sequence * max(config.batch_sizes))
    t0 = time.perf_counter()
    runner = LlamaCppRunner(path, threads=config.threads, n_ctx=n_ctx, n_batch=config.n_batch, n_seq_max=max(config.batch_sizes))
    load_s = time.perf_counter() - t0
    try:
        runner.decode_step_ms(questions[:1], 4)  # warm-up
        row: dict[str, Any] = {
            "side": "llama.cpp", "model": model, "weights": "gguf", "load_s": load_s, "weight_bytes": gguf_decode_bytes(path),
            "decode_ms": {}, "prefill_tok_s": runner.prefill_tokens_per_s(prompt, config.repeats),
        }
        for b in config.batch_sizes:
            batch = [questions[i % len(questions)] for i in range(b)]
            row["decode_ms"][str(b)] = statistics.median(runner.decode_step_ms(batch, config.tokens) for _ in range(config.repeats))
    finally:
        runner.close()
    return row


def compare(engine: dict[str, Any], reference: dict[str, Any], bandwidth: float) -> dict[str, Any]:
    """The ratios of one model's engine row to its llama.cpp row, and each side's batch-1 time over its memory
    limit (weight bytes per step / copy bandwidth), all from the measured seconds."""
    out: dict[str, Any] = {"prefill_ratio": engine["prefill_tok_s"] / reference["prefill_tok_s"], "decode_ratio": {}}
    for b, ms in engine["decode_ms"].items():
        out["decode_ratio"][b] = ms / reference["decode_ms"][b]
    for key, row in (("engine", engine), ("llamacpp", reference)):
        limit_ms = 1000 * row["weight_bytes"] / bandwidth
        out[f"{key}_limit_ms"] = limit_ms
        out[f"{key}_x_limit"] = row["decode_ms"]["1"] / limit_ms if "1" in row["decode_ms"] else None
    return out


def llamacpp_suite(config: LlamaCppBenchConfig, progress: bool = True) -> dict[str, Any]:
    """Measure every model on both sides (see the module docstring)."""
    import torch

    from active_rag.evaluation.bench_weights import copy_bandwidth

    torch.set_num_threads(config.threads)
    bandwidth = copy_bandwidth()
    result: dict[str, Any] = {
        "config": {**asdict(config), "out_dir": str(config.out_dir)},
        "environment": {"cpu_capability": torch.backends.cpu.get_cpu_capability(), "threads": config.threads,
                        "torch": torch.__version__, "machine": platform.processor() or platform.machine()},
        "copy_bandwidth_gb_s": bandwidth / 1e9, "models": {},
    }
    for model in config.models:
        engines = []
        for weights in config.weights:
            if progress:
                print(f"[llamacpp] {model}: active-rag ({weights} weights)", flush=True)
            engine, prompt, questions = _engine_row(model, weights, config)
            engines.append(engine)
        if progress:
            print(f"[llamacpp] {model}: llama.cpp", flush=True)
        reference = _llamacpp_row(model, config, prompt, questions)
        result["models"][model] = {"llamacpp": reference, "engines": [
            {"engine": engine, "ratios": compare(engine, reference, bandwidth)} for engine in engines]}
    return result


def format_llamacpp_table(result: dict[str, Any]) -> str:
    env = result["environment"]
    batches = [str(b) for b in result["config"]["batch_sizes"]]
    lines = [
        f"# active-rag bench --suite llamacpp ({env['cpu_capability']}, {env['threads']} threads, torch {env['torch']})",
        "",
        f"Copy bandwidth (read + write): {result['copy_bandwidth_gb_s']:.1f} GB/s. Prefill: tokens/s of a "
        f"{result['config']['prefill_tokens']}-token prompt (best of {result['config']['repeats']}); decode: ms per step, every "
        f"sequence of the batch gets one token ({result['config']['tokens']} steps, median of {result['config']['repeats']}); "
        "x limit: batch-1 decode / (weight bytes per step / copy bandwidth); ratios: active-rag / llama.cpp.",
        "",
        "| Model | Side | Weights | MB/step | Prefill tok/s | " + " | ".join(f"Decode ms (batch {b})" for b in batches) + " | x limit |",
        "|---|---|---|---:|---:|" + "---:|" * len(batches) + "---:|",
    ]
    def line(model: str, row: dict[str, Any], x_limit: float) -> str:
        weights = row["weights"] + (f", {row['prefill_dtype']} prefill" if row.get("prefill_dtype") else "")
        return (f"| {model} | {row['side']} | {weights} | {row['weight_bytes'] / 1e6:.0f} | {row['prefill_tok_s']:.0f} | "
                + " | ".join(f"{row['decode_ms'][b]:.1f}" for b in batches) + f" | {x_limit:.2f} |")

    for model, entry in result["models"].items():
        first = entry["engines"][0]["ratios"]
        lines.append(line(model, entry["llamacpp"], first["llamacpp_x_limit"]))
        for item in entry["engines"]:
            ratios = item["ratios"]
            lines.append(line(model, item["engine"], ratios["engine_x_limit"]))
            lines.append(f"| {model} | ratio ({item['engine']['weights']} / llama.cpp) | | | **{ratios['prefill_ratio']:.2f}x** | "
                         + " | ".join(f"**{ratios['decode_ratio'][b]:.2f}x**" for b in batches) + " | |")
    return "\n".join(lines) + "\n"


def run_llamacpp_bench(config: LlamaCppBenchConfig, progress: bool = True) -> dict[str, Any]:
    """Run the suite and write ``bench-llamacpp.json`` and ``bench-llamacpp.md`` to ``config.out_dir``."""
    from active_rag.evaluation.bench_weights import write_bench

    result = llamacpp_suite(config, progress)
    result["table"] = format_llamacpp_table(result)
    write_bench(config.out_dir, "llamacpp", result)
    return result


__all__ = [
    "LlamaCppBenchConfig",
    "LlamaCppRunner",
    "compare",
    "format_llamacpp_table",
    "gguf_decode_bytes",
    "llamacpp_suite",
    "run_llamacpp_bench",
]
