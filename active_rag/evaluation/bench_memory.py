"""Peak memory of one ``active-rag bench`` run (:mod:`active_rag.evaluation.bench`), on Linux: ``VmHWM`` reset through
``/proc/self/clear_refs``, measured in this process or in a fresh subprocess, and the power-law fit of its growth."""

from __future__ import annotations

import gc
import json
import math
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from active_rag.evaluation.bench_runs import (
    generate_run,
    loop_run,
    naive_segment_run,
    naive_token_run,
)

if TYPE_CHECKING:  # pragma: no cover
    from active_rag.decoding.model import ActiveLM

__all__ = ["measure_memory"]


def _proc_status_kb(key: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _malloc_trim() -> bool:
    """Give glibc's free heap pages back to the OS, so that later growth shows in RSS instead of reusing memory
    freed while loading the model or warming up."""
    try:
        import ctypes

        return bool(ctypes.CDLL("libc.so.6").malloc_trim(0) or True)
    except (OSError, AttributeError):
        return False


def _run_mode(lm: ActiveLM, mode: str, question: str, ids: Sequence[int], n: int) -> None:
    if mode.startswith("loop-"):
        loop_run(lm, mode.removeprefix("loop-"), question, n)
    elif mode == "generate":
        generate_run(lm, ids, n)
    elif mode == "naive-token":
        naive_token_run(lm, ids, n)
    elif mode == "naive-segment":
        naive_segment_run(lm, ids, n)
    else:
        raise ValueError(f"unknown mode {mode!r}")


def measure_memory(lm: ActiveLM, mode: str, question: str, ids: Sequence[int], n: int) -> dict[str, Any]:
    """Peak RSS growth (MiB) of one ``mode`` run of ``n`` tokens in this process, after a warm-up (imports, NLTK
    punkt and spaCy stop words, lazy initialisation) and ``malloc_trim``."""
    from active_rag.text import split_sentences

    split_sentences("Warm up. Done.")  # loads punkt, which FLARE's look-ahead needs at its first sentence end
    _run_mode(lm, mode, question, ids, min(32, n))
    gc.collect()
    trimmed = _malloc_trim()
    if not _reset_peak():
        return {"mode": mode, "tokens": n, "peak_delta_mib": None, "method": "unavailable (needs Linux /proc/self/clear_refs)"}
    before = _proc_status_kb("VmRSS") or 0
    _run_mode(lm, mode, question, ids, n)
    peak = _proc_status_kb("VmHWM") or 0
    return {"mode": mode, "tokens": n, "rss_before_mib": before / 1024, "peak_mib": peak / 1024,
            "peak_delta_mib": max(peak - before, 0) / 1024,
            "method": "VmHWM reset via /proc/self/clear_refs" + (", after malloc_trim" if trimmed else "")}


def _memory_subprocess(model: str, mode: str, question: str, ids: Sequence[int], n: int, threads: int | None,
                       weights: str = "auto") -> dict[str, Any]:
    payload = json.dumps({"model": model, "mode": mode, "question": question, "ids": list(ids), "tokens": n,
                          "threads": threads, "weights": weights})
    env = {**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"), "TOKENIZERS_PARALLELISM": "false"}
    # the worker's entry point is `python -m active_rag.evaluation.bench`, which calls _memory_worker below
    proc = subprocess.run([sys.executable, "-m", "active_rag.evaluation.bench", "--memory-worker", payload],
                          capture_output=True, text=True, env=env, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"memory worker failed ({proc.returncode}): {proc.stderr[-2000:]}")
    out = json.loads(lines[-1])
    out["process"] = "fresh subprocess"
    return out


def _memory_worker(payload: str) -> int:
    from active_rag.decoding.model import ActiveLM

    args = json.loads(payload)
    if args.get("threads"):
        import torch

        torch.set_num_threads(int(args["threads"]))
    lm = ActiveLM.load(args["model"], weights=args.get("weights", "auto"))
    print(json.dumps(measure_memory(lm, args["mode"], args["question"], args["ids"], int(args["tokens"]))))
    return 0


def _power_fit(xs: Sequence[float], ys: Sequence[float | None]) -> float | None:
    """Least-squares slope of log(y) on log(x): the exponent k of y ~ x^k (None without two positive points)."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys, strict=True) if y is not None and y > 0 and x > 0]
    if len(pts) < 2 or len({p[0] for p in pts}) < 2:
        return None
    mx = statistics.fmean(p[0] for p in pts)
    my = statistics.fmean(p[1] for p in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)


def _kv_bytes_per_token(lm: ActiveLM) -> float:
    cfg = lm.model.config
    layers = getattr(cfg, "num_hidden_layers", 0)
    heads = getattr(cfg, "num_key_value_heads", None) or getattr(cfg, "num_attention_heads", 0)
    dim = getattr(cfg, "head_dim", None) or (getattr(cfg, "hidden_size", 0) // max(getattr(cfg, "num_attention_heads", 1), 1))
    size = next(lm.model.parameters()).element_size()
    return float(2 * layers * heads * dim * size)
