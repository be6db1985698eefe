"""``active-rag bench --suite batch`` and ``--suite prefix``: many questions at once, and reading the shared
prompt once. Every figure is a ratio measured in the same run, on the same prompts.

**batch**. Generated tokens per second of the DRAGIN and FLARE loops at several batch sizes
(:meth:`~active_rag.engine.loop.ActiveRAG.run_batch`: one batched forward per step through the decode scheduler),
with retrieval disabled and signals on, exactly N tokens per question (as ``active-rag bench``'s loop
overhead), against ``model.generate`` on the same prompt ids at the same batch size (left-padded, greedy,
exactly N tokens) and against the batch-1 loop. Peak RSS growth per batch size (Linux ``VmHWM``).
The prefix cache is off here, so both sides prefill every prompt.

**prefix**. Seconds per question and prompt tokens prefilled per question for ``wo-rag``,
``sr-rag``, ``flare`` and ``dragin`` on the first questions of a dev slice, with the evaluation prompts
(the same engines as ``active-rag eval``), once with the prefix cache off and once on (cold at the start of
each method), then with the cache and a batch of 8. Reports the speed-ups, how many answers are identical
and how many traces make the same decisions (:func:`trace_agreement`). Resumable per pass and method.
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from active_rag.decoding.model import ActiveLM

__all__ = ["ThroughputConfig", "batch_suite", "prefix_suite", "format_batch_table", "format_prefix_table", "run_throughput"]

SUITES = ("batch", "prefix")


@dataclass
class ThroughputConfig:
    """Settings of ``active-rag bench --suite batch|prefix``."""

    suite: str = "batch"
    model: str = "qwen2.5-coder-0.5b"
    batch_sizes: list[int] = field(default_factory=lambda: [1, 4, 8, 16])
    tokens: int = 32
    methods: list[str] = field(default_factory=lambda: ["dragin", "flare"])
    prefix_methods: list[str] = field(default_factory=lambda: ["wo-rag", "sr-rag", "flare", "dragin"])
    questions: int = 10
    dataset: str = "hotpotqa"
    data_dir: Path | None = None
    prefix_batch: int = 8
    max_new_tokens: int | None = None  # None: as `active-rag eval` (the dataset profile's generation length)
    prompt_mode: str = "auto"  # as `active-rag eval`: the model's own prompt mode
    out_dir: Path = Path("runs/bench")

    def __post_init__(self) -> None:
        if self.suite not in SUITES:
            raise ValueError(f"Unknown bench suite {self.suite!r}: choose from overhead, {', '.join(SUITES)}.")
        if not self.batch_sizes or any(b < 1 for b in self.batch_sizes):
            raise ValueError(f"batch sizes must be positive integers, got {self.batch_sizes}.")
        self.out_dir = Path(self.out_dir)


def _rss_peak_reset() -> tuple[bool, float]:
    from active_rag.evaluation.bench import _malloc_trim, _proc_status_kb, _reset_peak

    gc.collect()
    _malloc_trim()
    ok = _reset_peak()
    return ok, (_proc_status_kb("VmRSS") or 0) / 1024


def _rss_peak_delta(ok: bool, before: float) -> float | None:
    from active_rag.evaluation.bench import _proc_status_kb

    return max((_proc_status_kb("VmHWM") or 0) / 1024 - before, 0.0) if ok else None


def _loop_batch(lm: ActiveLM, method: str, questions: Sequence[str], n: int) -> tuple[float, list[list[int]]]:
    """The ``method`` loop on ``questions`` at once, retrieval off, exactly ``n`` tokens each: (seconds, the
    prompt ids of each question's first session, for ``model.generate``)."""
    import threading

    from active_rag.evaluation.bench import LOOP_METHODS, _no_eos, _NoRetriever
    from active_rag.engine import ActiveRAG
    from active_rag.components.triggers import make_trigger

    clone, _ = _no_eos(lm)
    first: dict[int, list[int]] = {}  # thread -> prompt of its first session (one question per thread)
    opener = clone.session

    def session(ids: Sequence[int], *, capture_attention: bool = False) -> Any:
        first.setdefault(threading.get_ident(), list(ids))
        return opener(ids, capture_attention=capture_attention)

    clone.session = session  # type: ignore[method-assign]
    trigger, theta = LOOP_METHODS[method]
    rag = ActiveRAG.from_preset(method, clone, _NoRetriever(), trigger=make_trigger(trigger, theta=theta),
                                max_new_tokens=n, initial_retrieval=False,
                                stop_when_answered=False, repetition_guard=False)  # exactly n tokens, like generate
    t0 = time.perf_counter()
    results = rag.run_batch(list(questions), batch_size=len(questions))
    seconds = time.perf_counter() - t0
    for r in results:
        if isinstance(r, BaseException) or len(r.tokens) != n or r.retrievals:
            raise RuntimeError(f"{method} loop in a batch did not produce exactly {n} tokens without retrieval: {r!r}")
    return seconds, list(first.values())


def _generate_batch(lm: ActiveLM, prompts: Sequence[Sequence[int]], n: int) -> float:
    """``model.generate`` on ``prompts`` as one left-padded batch, greedy, exactly ``n`` new tokens each."""
    import torch

    from active_rag.evaluation.bench import _generate_kwargs

    kwargs = _generate_kwargs(lm)
    width = max(len(p) for p in prompts)
    pad = int(kwargs["pad_token_id"])
    ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts], dtype=torch.long, device=lm.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], dtype=torch.long, device=lm.device)
    with torch.inference_mode():
        t0 = time.perf_counter()
        out = lm.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, **kwargs)
        seconds = time.perf_counter() - t0
    if out.shape[1] - width != n:
        raise RuntimeError(f"model.generate produced {out.shape[1] - width} tokens, expected {n}")
    return seconds


def batch_suite(config: ThroughputConfig, lm: ActiveLM, progress: bool = True) -> dict[str, Any]:
    """Tokens per second of the loops and of ``model.generate`` per batch size (see the module docstring)."""
    from tqdm.auto import tqdm

    from active_rag.evaluation.bench import bench_questions

    questions = bench_questions(max(config.batch_sizes))
    while len(questions) < max(config.batch_sizes):  # fewer demo questions than the largest batch: repeat them
        questions += questions[: max(config.batch_sizes) - len(questions)]
    _loop_batch(lm, config.methods[0], questions[:1], 4)  # warm-up: imports, punkt, spaCy stop words
    rows: list[dict[str, Any]] = []
    jobs = [(m, b) for m in config.methods for b in config.batch_sizes]
    for method, b in tqdm(jobs, desc="batch sizes", disable=not progress):
        ok, before = _rss_peak_reset()
        calls0 = lm.scheduler.forward_calls if lm.scheduler else 0
        loop_s, prompts = _loop_batch(lm, method, questions[:b], config.tokens)
        loop_mem = _rss_peak_delta(ok, before)
        calls = (lm.scheduler.forward_calls - calls0) if lm.scheduler else None
        ok, before = _rss_peak_reset()
        gen_s = _generate_batch(lm, prompts, config.tokens)
        gen_mem = _rss_peak_delta(ok, before)
        tokens = b * config.tokens
        rows.append({"method": method, "batch": b, "tokens": tokens, "loop_s": loop_s, "generate_s": gen_s,
                     "loop_tok_s": tokens / loop_s, "generate_tok_s": tokens / gen_s, "loop_vs_generate": loop_s / gen_s,
                     "forward_calls": calls, "loop_peak_mib": loop_mem, "generate_peak_mib": gen_mem,
                     "prompt_tokens": sum(len(p) for p in prompts)})
    for row in rows:
        base = next(r for r in rows if r["method"] == row["method"] and r["batch"] == min(config.batch_sizes))
        row["speedup_vs_batch1"] = row["loop_tok_s"] / base["loop_tok_s"]
    return {"suite": "batch", "rows": rows}


def _prefix_pass(worker: Any, name: str, examples: Sequence[Any], batch: int) -> list[dict[str, Any]]:
    from active_rag.evaluation.runner import _answer_all

    t0 = time.perf_counter()
    rows = list(_answer_all(worker, name, examples, batch))
    seconds = time.perf_counter() - t0
    for row in rows:
        row["pass_seconds"] = seconds
    order = [e.id for e in examples]
    return sorted(rows, key=lambda r: order.index(r["id"]))


def _floats_close(a: Any, b: Any, rtol: float, atol: float) -> tuple[bool, float]:
    """Whether two JSON values are equal except for floats within ``rtol``/``atol``; and the largest float gap."""
    if isinstance(a, float) or isinstance(b, float):
        if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
            return False, float("inf")
        gap = abs(float(a) - float(b))
        return gap <= atol + rtol * abs(float(b)), gap
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return False, float("inf")
        pairs = [(a[k], b[k]) for k in a]
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return False, float("inf")
        pairs = list(zip(a, b, strict=True))
    else:
        return a == b, 0.0
    ok, worst = True, 0.0
    for x, y in pairs:
        same, gap = _floats_close(x, y, rtol, atol)
        ok, worst = ok and same, max(worst, gap)
    return ok, worst


def trace_agreement(a: list[dict[str, Any]], b: list[dict[str, Any]], rtol: float = 1e-3, atol: float = 1e-4) -> dict[str, Any]:
    """Compare two per-question traces: ``exact`` (byte-identical JSON), ``decisions`` (the same positions,
    tokens, queries and passages, with every score within ``rtol``/``atol``) and the largest score gap.

    A prompt read in two pieces (cached prefix, then the rest) sums its matrix products in another order than
    one read whole, so float32 scores differ in their last digits; only the decisions are expected to match."""
    close, gap = _floats_close(a, b, rtol, atol)
    return {"exact": json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True), "decisions": close, "max_score_gap": gap}


_PREFIX_PASSES = ("no cache, batch 1", "cache, batch 1", "cache, batch {b}")


def _pass_file(out_dir: Path, label: str, method: str) -> Path:
    slug = label.replace(", ", "-").replace(" ", "")
    return out_dir / "prefix-passes" / f"{slug}--{method}.json"


def prefix_suite(config: ThroughputConfig, lm: ActiveLM, progress: bool = True) -> dict[str, Any]:
    """Seconds and prefilled tokens per question with the prefix cache off, on, and on with a batch.

    Each method runs with a cold cache of its own (what a user running that one method sees), so no method
    profits from another's prompts. Each (pass, method) is written to ``<out>/prefix-passes/`` as soon as it
    ends and is read back instead of rerun when the same model, dataset and questions ask for it again, so an
    interrupted bench resumes where it stopped."""
    from active_rag.evaluation.runner import EvalConfig, EvalWorker, plan_eval
    from active_rag.decoding.model import ActiveLM as _ActiveLM

    eval_config = EvalConfig(dataset=config.dataset, data_dir=config.data_dir, methods=list(config.prefix_methods),
                             limit=config.questions, max_new_tokens=config.max_new_tokens, plots=False,
                             prompt_mode=config.prompt_mode)
    _, data_dir, examples = plan_eval(eval_config)
    key = {"model": lm.name, "dataset": config.dataset, "ids": [e.id for e in examples],
           "max_new_tokens": config.max_new_tokens, "prompt_mode": config.prompt_mode}
    passes = [(label.format(b=config.prefix_batch), cache, batch)
              for label, cache, batch in zip(_PREFIX_PASSES, (False, True, True), (1, 1, config.prefix_batch), strict=True)]
    results: dict[str, dict[str, list[dict[str, Any]]]] = {label: {} for label, _, _ in passes}
    for name in config.prefix_methods:
        for label, cache, batch in passes:
            path = _pass_file(config.out_dir, label, name)
            if path.exists():
                saved = json.loads(path.read_text(encoding="utf-8"))
                if saved.get("key") == key:
                    results[label][name] = saved["rows"]
                    if progress:
                        print(f"[prefix bench] {name}, {label}: read back from {path}", flush=True)
                    continue
            view = _ActiveLM(lm.model, lm.tokenizer, name=lm.name, prefix_cache=cache)  # a cold cache per method
            worker = EvalWorker(eval_config, view, data_dir=data_dir)
            if progress:
                print(f"[prefix bench] {name}, {label}: {len(examples)} questions", flush=True)
            rows = _prefix_pass(worker, name, examples, batch)
            results[label][name] = rows
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"key": key, "rows": rows}, default=str) + "\n", encoding="utf-8")
            tmp.replace(path)
            del view, worker
            gc.collect()
    rows = []
    base_label, cache_label, batch_label = (p[0] for p in passes)
    for name in config.prefix_methods:
        base, cached, batched = results[base_label][name], results[cache_label][name], results[batch_label][name]
        n = len(base)

        def per_q(rows: list[dict[str, Any]], key: str) -> float:
            return sum((r.get("prompt_tokens") or {}).get(key, 0) for r in rows) / max(len(rows), 1)

        base_s = base[0]["pass_seconds"] / n
        cache_s = cached[0]["pass_seconds"] / n
        batch_s = batched[0]["pass_seconds"] / n
        agree = [trace_agreement(a["trace"], b["trace"]) for a, b in zip(base, cached, strict=True)]
        rows.append({
            "method": name, "questions": n,
            "s_per_q_no_cache": base_s, "s_per_q_cache": cache_s, "speedup_cache": base_s / cache_s,
            "prefilled_per_q_no_cache": per_q(base, "prefilled"), "prefilled_per_q_cache": per_q(cached, "prefilled"),
            "cached_per_q_cache": per_q(cached, "cached"),
            "generated_per_q": sum(r["metrics"].get("generated_tokens", 0) for r in base) / max(n, 1),
            "identical_answers": sum(a["prediction"] == b["prediction"] for a, b in zip(base, cached, strict=True)) / n,
            "identical_traces": sum(x["exact"] for x in agree) / n,
            "same_decisions": sum(x["decisions"] for x in agree) / n,
            "max_score_gap": max((x["max_score_gap"] for x in agree), default=0.0),
            "s_per_q_cache_batch": batch_s, "speedup_cache_batch_vs_plain": base_s / batch_s,
            "identical_answers_batch": sum(a["prediction"] == b["prediction"] for a, b in zip(base, batched, strict=True)) / n,
        })
    return {"suite": "prefix", "dataset": config.dataset, "batch": config.prefix_batch, "prompt_mode": config.prompt_mode,
            "rows": rows}


def _f(value: Any, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_batch_table(result: dict[str, Any]) -> str:
    lines = ["| method | batch | loop tok/s | generate tok/s | loop / generate time | vs batch 1 | forward calls | loop peak MiB | generate peak MiB |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        lines.append(f"| {r['method']} | {r['batch']} | {_f(r['loop_tok_s'])} | {_f(r['generate_tok_s'])} | "
                     f"{_f(r['loop_vs_generate'])} | {_f(r['speedup_vs_batch1'])}x | {r['forward_calls']} | "
                     f"{_f(r['loop_peak_mib'], 0)} | {_f(r['generate_peak_mib'], 0)} |")
    return "\n".join(lines) + "\n"


def format_prefix_table(result: dict[str, Any]) -> str:
    b = result["batch"]
    lines = [f"| method | s/q no cache | s/q cache | speed-up | prefilled tok/q (no cache -> cache) | generated tok/q | "
             f"identical answers | same decisions (exact traces) | s/q cache + batch {b} | speed-up vs no cache, batch 1 |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        lines.append(f"| {r['method']} | {_f(r['s_per_q_no_cache'], 1)} | {_f(r['s_per_q_cache'], 1)} | "
                     f"{_f(r['speedup_cache'])}x | {r['prefilled_per_q_no_cache']:.0f} -> {r['prefilled_per_q_cache']:.0f} | "
                     f"{r.get('generated_per_q', 0):.0f} | {100 * r['identical_answers']:.0f}% | "
                     f"{100 * r.get('same_decisions', r['identical_traces']):.0f}% ({100 * r['identical_traces']:.0f}%) | "
                     f"{_f(r['s_per_q_cache_batch'], 1)} | "
                     f"{_f(r['speedup_cache_batch_vs_plain'])}x |")
    return "\n".join(lines) + "\n"


def run_throughput(config: ThroughputConfig, lm: ActiveLM | None = None, progress: bool = True,
                   model_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run the suite, write ``bench-<suite>.json`` and ``.md`` to ``config.out_dir`` and return the results."""
    import platform

    import torch

    from active_rag.decoding.model import ActiveLM as _ActiveLM

    if lm is None:
        lm = _ActiveLM.load(config.model, **(model_options or {}))
    result = batch_suite(config, lm, progress) if config.suite == "batch" else prefix_suite(config, lm, progress)
    result["config"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(config).items()}
    result["environment"] = {"model": lm.name, "device": str(lm.device), "dtype": str(next(lm.model.parameters()).dtype),
                             "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
                             "machine": platform.machine(), "cpu_count": __import__("os").cpu_count()}
    table = format_batch_table(result) if config.suite == "batch" else format_prefix_table(result)
    result["table"] = table
    config.out_dir.mkdir(parents=True, exist_ok=True)
    (config.out_dir / f"bench-{config.suite}.json").write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
    (config.out_dir / f"bench-{config.suite}.md").write_text(table, encoding="utf-8")
    return result
