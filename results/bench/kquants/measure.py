"""A GGUF's Q4_K and Q6_K tensors as the file stores them (active_rag.models.gguf_layers) against the layouts before,
in one process: ``python results/bench/kquants/measure.py [MODEL]`` (default qwen2.5-coder-1.5b).

Loads the model twice with ``mixed`` weights, ``ACTIVE_RAG_KQUANTS=off`` (Q4_K in bfloat16 steps and zeros, Q6_K in
int8, as before) and on, and prints each one's packed layers and bytes a step, how many of 48 greedy tokens after a
900-token prompt agree, the median ms a decode step at batch 1 (that prompt) and 8 (the prompts of ``bench --suite
llamacpp``) and the prompt's prefill in tokens a second, the two interleaved run by run (7 runs); then the kernels
alone on the model's output head and down projection shapes, copies enough that the weights come from memory, best
of 5."""

from __future__ import annotations

import active_rag  # noqa: F401  (before torch)

import os
import statistics
import sys
import time
from collections import Counter

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch

from active_rag.decoding.model import ActiveLM
from active_rag.evaluation.bench_llamacpp_sides import QUESTIONS
from active_rag.evaluation.bench_weights import decode_step_ms
from active_rag.models.quantized import model_weight_bytes, packed_layers
from active_rag.models.weights import KQUANTS_VARIABLE
from kernel_isas import SHAPES, best_us, random_layers  # this folder's

torch.set_num_threads(2)


def prefill_tokens_per_s(lm: ActiveLM, ids: list[int]) -> float:
    start = time.perf_counter()
    with torch.inference_mode():
        lm.model(torch.tensor([ids]), use_cache=True)
    return len(ids) / (time.perf_counter() - start)


def model_rows(name: str) -> None:
    lms = {}
    print("| layout | packed layers | MB a step |")
    print("|---|---|---:|")
    for mode in ("off", "on"):
        os.environ[KQUANTS_VARIABLE] = mode
        lm = ActiveLM.load(name, weights="mixed", device="cpu")
        kinds = Counter(layer.kind for _, layer in packed_layers(lm.model))
        print(f"| {'before' if mode == 'off' else 'k-quants'} | {dict(sorted(kinds.items()))} | {model_weight_bytes(lm.model) / 1e6:.0f} |")
        lms[mode] = lm
    ids = lms["on"].prompt_ids("Tell me a long story about the history of Python packaging. " * 40)[:900]
    tokens = {mode: [s.id for s in lm.session(ids).generate(48)] for mode, lm in lms.items()}
    same = next((i for i, (a, b) in enumerate(zip(tokens["off"], tokens["on"])) if a != b), 48)
    print(f"\nGreedy tokens: the first {same} of 48 agree.\n")
    print("| measure | before | k-quants | k-quants / before |")
    print("|---|---:|---:|---:|")
    for b in (1, 8):
        prompts = [ids] if b == 1 else [lms["on"].prompt_ids(q) for q in (list(QUESTIONS) * 8)[:8]]
        times: dict[str, list[float]] = {mode: [] for mode in lms}
        for _ in range(7):
            for mode, lm in lms.items():
                times[mode].append(decode_step_ms(lm, prompts, 32))
        old, new = statistics.median(times["off"]), statistics.median(times["on"])
        print(f"| decode ms, batch {b} | {old:.2f} | {new:.2f} | {new / old:.3f} |", flush=True)
    rates: dict[str, list[float]] = {mode: [] for mode in lms}
    for _ in range(5):
        for mode, lm in lms.items():
            rates[mode].append(prefill_tokens_per_s(lm, ids))
    old, new = statistics.median(rates["off"]), statistics.median(rates["on"])
    print(f"| prefill tok/s, {len(ids)} tokens | {old:.1f} | {new:.1f} | {new / old:.3f} |", flush=True)


def kernel_rows() -> None:
    rng = np.random.default_rng(0)
    print("\n| shape | rows | int8 us | int6k us | int4 us | int4k us |")
    print("|---|---:|---:|---:|---:|---:|")
    for n, k, copies in SHAPES:
        layers = random_layers(n, k, copies, rng)
        for rows in (1, 8, 64) if n > 100000 else (1, 8, 64, 512):
            x = torch.randn(rows, k)
            cells = [f"{best_us(function, copies_of, x, n):.0f}" for function, copies_of in layers.values()]
            print(f"| {n} x {k} | {rows} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    model_rows(sys.argv[1] if len(sys.argv) > 1 else "qwen2.5-coder-1.5b")
    kernel_rows()
