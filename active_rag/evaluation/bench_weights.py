"""``active-rag bench --suite weights``: float32 against int8 and int4 weights, in one run.

For every model and weights option, in one process on one machine:

- **decode**: milliseconds per decode step at each batch size (sessions of the bench questions, greedy,
  an end-of-sequence token decoded on as any other, exactly ``tokens`` steps timed after the prefill; at batch > 1
  the sessions decode from threads and share batched forwards through the model's decode scheduler);
- **prefill**: prompt tokens per second of a ``prefill_tokens``-token prompt with the prefix cache off;
- **the memory limit**: the bytes of weights one decode step reads (:func:`~active_rag.models.quantized.model_weight_bytes`:
  every linear layer, packed or dense, and one embedding row) divided by the machine's copy bandwidth, measured
  in the same run by a STREAM-like copy of two 512 MiB arrays (bytes read plus bytes written per second, as
  STREAM counts them); each option's batch-1 decode time is reported as a ratio to its limit.

Every speed is reported as a ratio against float32 measured in the same run. The timings of one run are
comparable with each other only: the CPUs of different machines differ (AVX2 only, AVX-512 with BF16).

**Agreement** is read from evaluation rows, not re-run here: ``active-rag eval --weights int8`` writes its rows
to ``<eval_dir>/<dataset>/<model>-int8/`` beside the float32 rows in ``<eval_dir>/<dataset>/<model>/``. For each
method, on the first ``agreement_questions`` questions both answered: identical extracted answers, identical
generated text, identical retrieval decisions (position, query and passages of every retrieval); on the first
``f1_questions``: F1 with the paired 95% bootstrap interval against float32.
"""

from __future__ import annotations

import gc
import json
import platform
import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_MODELS = ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]
DEFAULT_WEIGHTS = ["float32", "int8", "int4"]
AGREEMENT_METHODS = ["sr-rag", "flare", "dragin"]


@dataclass
class WeightsBenchConfig:
    """Settings of ``active-rag bench --suite weights``."""

    models: list[str] = field(default_factory=lambda: list(DEFAULT_MODELS))
    weights: list[str] = field(default_factory=lambda: list(DEFAULT_WEIGHTS))
    batch_sizes: list[int] = field(default_factory=lambda: [1, 8])
    tokens: int = 32
    prefill_tokens: int = 512
    repeats: int = 3
    out_dir: Path = Path("runs/bench")
    eval_dir: Path | None = Path("results/eval")
    dataset: str = "hotpotqa"
    methods: list[str] = field(default_factory=lambda: list(AGREEMENT_METHODS))
    agreement_questions: int = 20
    f1_questions: int = 50

    def __post_init__(self) -> None:
        from active_rag.validation import check_int
        from active_rag.models.weights import check_weights

        self.weights = [check_weights(w) for w in self.weights]
        if "auto" in self.weights:
            raise ValueError("--weights of the weights suite names options (float32, int8, int4), not auto.")
        for b in self.batch_sizes:
            check_int("batch size", b, minimum=1)
        check_int("tokens", self.tokens, minimum=2)
        check_int("prefill tokens", self.prefill_tokens, minimum=2)
        check_int("repeats", self.repeats, minimum=1)
        self.out_dir = Path(self.out_dir)
        self.eval_dir = Path(self.eval_dir) if self.eval_dir is not None else None


# ------------------------------------------------------------------------------------------------ measurements


def copy_bandwidth(mib: int = 512, repeats: int = 5) -> float:
    """Bytes per second of the best of ``repeats`` copies between two ``mib`` MiB float32 arrays, counting the
    bytes read and the bytes written (STREAM's convention)."""
    import torch

    a = torch.ones(mib * 2**20 // 4, device="cpu")  # the CPU's memory bandwidth
    b = torch.empty_like(a)
    b.copy_(a)  # touch every page first
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        b.copy_(a)
        best = min(best, time.perf_counter() - t0)
    return 2 * a.numel() * a.element_size() / best


def end_masked(lm: Any) -> Any:
    """A logits processor that sets the end-of-sequence logits to -inf: a session given it computes its token,
    log-probability and entropy with torch's ops (how ``decode_step_ms`` decoded before 2026-12-03)."""
    eos = sorted(lm.eos_token_ids)

    def processor(ids: Sequence[int], logits: Any) -> Any:
        if eos:
            logits[eos] = float("-inf")
        return logits

    return processor


def decode_step_ms(lm: Any, prompts: Sequence[Sequence[int]], tokens: int, *, greedy: bool = False,
                   logits_processor: Any = None) -> float:
    """Milliseconds per decode step with ``len(prompts)`` sessions decoding together (prefill not timed), greedy as
    a user's session decodes (the token, log-probability and entropy from the step's one summary). An end-of-sequence
    token is decoded on as any other, as the llama.cpp side of ``bench --suite llamacpp`` does (a logits processor
    that masked it would send every step through torch's ops over the vocabulary), or with ``greedy`` it ends the
    session (an end of sequence before ``tokens`` raises). ``logits_processor``: applied by every session (for
    example :func:`end_masked`), which then reads the logits with torch's ops."""
    from active_rag.evaluation.bench_runs import _no_eos

    runner = lm if greedy else _no_eos(lm, prefix_cache=True)[0]
    sessions = [runner.session(list(p)) for p in prompts]
    barrier = threading.Barrier(len(sessions) + 1)
    errors: list[BaseException] = []

    def work(session: Any) -> None:
        try:
            barrier.wait()
            steps = sum(1 for _ in session.generate(tokens, logits_processor=logits_processor))
            if steps != tokens:
                raise RuntimeError(f"decoded {steps} tokens, expected {tokens}")
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(s,), daemon=True) for s in sessions]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return 1000 * seconds / tokens


def prefill_tokens_per_s(lm: Any, ids: Sequence[int], repeats: int) -> float:
    """Prompt tokens per second of the best of ``repeats`` prefills of ``ids`` with the prefix cache off."""
    cache, lm.prefix_cache = lm.prefix_cache, None
    try:
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            lm.session(list(ids))
            best = min(best, time.perf_counter() - t0)
    finally:
        lm.prefix_cache = cache
    return len(ids) / best


def _prefill_prompt(lm: Any, n: int) -> list[int]:
    from active_rag.retrieval.bm25 import demo_corpus_path, read_jsonl_passages

    text = " ".join(p.text for p in read_jsonl_passages(demo_corpus_path()))
    ids = lm.prompt_ids(text)
    while len(ids) < n:
        ids = ids + ids
    return ids[:n]


def measure_option(model: str, weights: str, config: WeightsBenchConfig, questions: Sequence[str]) -> dict[str, Any]:
    """Load ``model`` with ``weights`` on the CPU and time decode and prefill (see the module docstring)."""
    from active_rag.decoding.model import ActiveLM
    from active_rag.models.quantized import model_weight_bytes

    t0 = time.perf_counter()
    lm = ActiveLM.load(model, weights=weights, device="cpu")
    load_s = time.perf_counter() - t0
    prompts = [lm.prompt_ids(q) for q in questions]
    decode_step_ms(lm, prompts[:1], 4)  # warm-up: first-call allocations
    row: dict[str, Any] = {"model": model, "weights": weights, "load_s": load_s,
                           "weight_bytes": model_weight_bytes(lm.model), "decode_ms": {}}
    for b in config.batch_sizes:
        batch = [prompts[i % len(prompts)] for i in range(b)]
        times = [decode_step_ms(lm, batch, config.tokens) for _ in range(config.repeats)]
        row["decode_ms"][str(b)] = statistics.median(times)
    row["prefill_tok_s"] = prefill_tokens_per_s(lm, _prefill_prompt(lm, config.prefill_tokens), config.repeats)
    del lm
    gc.collect()
    return row


# ------------------------------------------------------------------------------------------------ agreement


def _rows(path: Path) -> dict[str, dict[str, Any]]:
    from active_rag.evaluation.store import read_rows_file

    if not path.is_file():
        return {}
    values, _, _ = read_rows_file(path)
    return {str(r["id"]): r for r in values if isinstance(r, dict) and "id" in r}


def _decisions(row: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(r.get("position"), r.get("query"), tuple(r.get("passage_ids") or ())) for r in row.get("trace") or []]


def agreement(float_dir: Path, packed_dir: Path, methods: Sequence[str], order: Sequence[str],
              same_n: int, f1_n: int) -> dict[str, Any]:
    """Per method: answers, texts and retrieval decisions identical on the first ``same_n`` questions of
    ``order`` that both folders answered, and F1 with the paired interval on the first ``f1_n``."""
    from active_rag.evaluation.paired import paired_bootstrap

    out: dict[str, Any] = {}
    for method in methods:
        base, mine = _rows(float_dir / f"{method}.jsonl"), _rows(packed_dir / f"{method}.jsonl")
        both = [i for i in order if i in base and i in mine]
        first = both[:same_n]
        scored = both[:f1_n]
        a = [float(mine[i]["metrics"]["f1"]) for i in scored]
        b = [float(base[i]["metrics"]["f1"]) for i in scored]
        ci = paired_bootstrap(a, b) if len(scored) >= 2 else None
        out[method] = {
            "questions": len(first),
            "same_answer": sum(mine[i].get("answer") == base[i].get("answer") for i in first),
            "same_text": sum(mine[i].get("prediction") == base[i].get("prediction") for i in first),
            "same_decisions": sum(_decisions(mine[i]) == _decisions(base[i]) for i in first),
            "f1_questions": len(scored),
            "f1": 100 * statistics.fmean(a) if a else None,
            "f1_float32": 100 * statistics.fmean(b) if b else None,
            "f1_difference": 100 * (statistics.fmean(a) - statistics.fmean(b)) if a else None,
            "f1_low": 100 * ci[0] if ci else None,
            "f1_high": 100 * ci[1] if ci else None,
            "seconds_per_question": statistics.fmean(float(mine[i].get("amortized_s") or mine[i]["wall_time_s"]) for i in scored) if scored else None,
            "seconds_per_question_float32": statistics.fmean(float(base[i].get("amortized_s") or base[i]["wall_time_s"]) for i in scored) if scored else None,
        }
    return out


def _question_order(config: WeightsBenchConfig) -> list[str]:
    from active_rag.evaluation.datasets import load_dataset

    limit = max(config.agreement_questions, config.f1_questions)
    return [e.id for e in load_dataset(config.dataset, None, limit=limit, resolve_gold_ids=False)]


# ------------------------------------------------------------------------------------------------ the suite


def weights_suite(config: WeightsBenchConfig, progress: bool = True) -> dict[str, Any]:
    """Run the suite; returns the result dictionary (see :func:`format_weights_table`)."""
    import torch
    import transformers
    from tqdm.auto import tqdm

    from active_rag.evaluation.bench import bench_questions
    from active_rag.evaluation.scoring import _safe_name

    bandwidth = copy_bandwidth()
    questions = bench_questions(max(config.batch_sizes))
    jobs = [(m, w) for m in config.models for w in config.weights]
    rows = [measure_option(m, w, config, questions) for m, w in tqdm(jobs, desc="weights", disable=not progress)]
    bandwidth = max(bandwidth, copy_bandwidth())  # once more at the end: the machine's best
    for row in rows:
        base = next((r for r in rows if r["model"] == row["model"] and r["weights"] == "float32"), None)
        row["limit_ms"] = 1000 * row["weight_bytes"] / bandwidth
        row["ratio_to_limit"] = row["decode_ms"][str(config.batch_sizes[0])] / row["limit_ms"]
        if base is not None:
            row["decode_speedup"] = {b: base["decode_ms"][b] / row["decode_ms"][b] for b in row["decode_ms"]}
            row["prefill_vs_float32"] = row["prefill_tok_s"] / base["prefill_tok_s"]
    result: dict[str, Any] = {
        "suite": "weights",
        "environment": {"python": platform.python_version(), "torch": torch.__version__,
                        "transformers": transformers.__version__, "threads": torch.get_num_threads(),
                        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                        "machine": platform.machine()},
        "config": {**asdict(config), "out_dir": str(config.out_dir), "eval_dir": str(config.eval_dir)},
        "copy_bandwidth_gb_s": bandwidth / 1e9,
        "rows": rows,
        "agreement": {},
        "missing": [],
    }
    if config.eval_dir is not None and any(w != "float32" for w in config.weights):
        order = _question_order(config)
        for model in config.models:
            base_dir = config.eval_dir / config.dataset / _safe_name(model)
            for w in config.weights:
                packed_dir = base_dir.with_name(f"{base_dir.name}-{w}")
                if w == "float32":
                    continue
                if not any((packed_dir / f"{m}.jsonl").is_file() for m in config.methods):
                    result["missing"].append(
                        f"active-rag eval --dataset {config.dataset} --model {model} --limit {config.f1_questions} "
                        f"--methods {','.join(config.methods)} --weights {w} --out {config.eval_dir}")
                    continue
                result["agreement"][f"{model}/{w}"] = agreement(
                    base_dir, packed_dir, config.methods, order, config.agreement_questions, config.f1_questions)
    return result


def _f(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_weights_table(result: dict[str, Any]) -> str:
    env = result["environment"]
    batches = list(result["rows"][0]["decode_ms"]) if result["rows"] else []
    lines = [
        f"# active-rag bench --suite weights ({env['cpu_capability']}, {env['threads']} threads, torch {env['torch']})",
        "",
        f"Copy bandwidth (STREAM-like, read + write): {result['copy_bandwidth_gb_s']:.1f} GB/s. Decode: ms per step "
        "(every sequence of the batch gets one token); x limit: batch-1 decode / (weight bytes per token / copy bandwidth).",
        "",
        "| Model | Weights | Weight MB/token | Limit ms | " + " | ".join(f"Decode ms (batch {b})" for b in batches)
        + " | x float32 (batch " + ", ".join(batches) + ") | x limit | Prefill tok/s | x float32 | Load s |",
        "|---|---|---:|---:|" + "---:|" * len(batches) + "---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        speed = r.get("decode_speedup") or {}
        lines.append(
            f"| {r['model']} | {r['weights']} | {r['weight_bytes'] / 1e6:.0f} | {r['limit_ms']:.1f} | "
            + " | ".join(_f(r["decode_ms"][b]) for b in batches)
            + " | " + ", ".join(_f(speed.get(b), 2) for b in batches)
            + f" | {_f(r['ratio_to_limit'], 2)} | {r['prefill_tok_s']:.0f} | {_f(r.get('prefill_vs_float32'), 2)} | {r['load_s']:.1f} |"
        )
    if result["agreement"]:
        cfg = result["config"]
        lines += ["", f"Agreement with float32 ({cfg['dataset']}; identical on the first {cfg['agreement_questions']} questions, "
                  f"F1 on the first {cfg['f1_questions']}; rows from `active-rag eval --weights ...`):", "",
                  "| Model / weights | Method | Same answer | Same text | Same retrievals | F1 | F1 float32 | Difference [95% CI] | s/q | s/q float32 |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for key, methods in result["agreement"].items():
            for method, a in methods.items():
                n = a["questions"]
                ci = "-" if a["f1_low"] is None else f"{a['f1_difference']:+.1f} [{a['f1_low']:+.1f}, {a['f1_high']:+.1f}]"
                lines.append(f"| {key} | {method} | {a['same_answer']}/{n} | {a['same_text']}/{n} | {a['same_decisions']}/{n} | "
                             f"{_f(a['f1'])} | {_f(a['f1_float32'])} | {ci} (n={a['f1_questions']}) | "
                             f"{_f(a['seconds_per_question'])} | {_f(a['seconds_per_question_float32'])} |")
    if result.get("missing"):
        lines += ["", "No evaluation rows to compare for these options yet; make them with (float32 rows: the same without --weights int8/int4 "
                  "but with --weights float32):", ""] + [f"    {command}" for command in result["missing"]]
    return "\n".join(lines) + "\n"


def write_bench(out_dir: Path, name: str, result: dict[str, Any]) -> None:
    """``bench-NAME.json`` (the whole result) and ``bench-NAME.md`` (its ``table``) in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"bench-{name}.json").write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
    (out_dir / f"bench-{name}.md").write_text(result["table"], encoding="utf-8")


def run_weights_bench(config: WeightsBenchConfig, progress: bool = True) -> dict[str, Any]:
    """Run the suite and write ``bench-weights.json`` and ``bench-weights.md`` to ``config.out_dir``."""
    result = weights_suite(config, progress)
    result["table"] = format_weights_table(result)
    write_bench(config.out_dir, "weights", result)
    return result


__all__ = [
    "WeightsBenchConfig",
    "agreement",
    "copy_bandwidth",
    "decode_step_ms",
    "end_masked",
    "format_weights_table",
    "measure_option",
    "prefill_tokens_per_s",
    "run_weights_bench",
    "weights_suite",
    "write_bench",
]
