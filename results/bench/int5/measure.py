"""qwen2.5-coder-0.5B's Q5_0 tensors in 5 bits (active_rag.models.int5_linear) against int8, in one process:
``python results/bench/int5/measure.py [MODEL]``.

Loads the model twice with ``mixed`` weights, ``ACTIVE_RAG_INT5=off`` (the 5-bit tensors in int8, as before) and on,
and prints each one's packed layers and bytes a step, how many of 48 greedy tokens after a 900-token prompt agree,
and the median ms a decode step at batch 1 (that prompt) and 8 (the prompts of ``bench --suite llamacpp``), the two
interleaved run by run (7 runs of 32 steps each); then the kernels alone on a 4864 x 896 layer (the 0.5B's gate and up
projections), 24 copies so that the weights come from memory, best of 5."""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from collections import Counter

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from active_rag import kernels
from active_rag.decoding.model import ActiveLM
from active_rag.evaluation.bench_llamacpp_sides import QUESTIONS
from active_rag.evaluation.bench_weights import decode_step_ms
from active_rag.models.quantized import model_weight_bytes, packed_layers
from active_rag.models.weights import INT5_VARIABLE

torch.set_num_threads(2)


def model_rows(name: str) -> None:
    lms = {}
    print("| layout | packed layers | MB a step |")
    print("|---|---|---:|")
    for mode in ("off", "on"):
        os.environ[INT5_VARIABLE] = mode
        lm = ActiveLM.load(name, weights="mixed", device="cpu")
        kinds = Counter(layer.kind for _, layer in packed_layers(lm.model))
        print(f"| {'int8' if mode == 'off' else 'int5'} | {dict(sorted(kinds.items()))} | {model_weight_bytes(lm.model) / 1e6:.0f} |")
        lms[mode] = lm
    ids = lms["on"].prompt_ids("Tell me a long story about the history of Python packaging. " * 40)[:900]
    tokens = {mode: [s.id for s in lm.session(ids).generate(48)] for mode, lm in lms.items()}
    same = next((i for i, (a, b) in enumerate(zip(tokens["off"], tokens["on"])) if a != b), 48)
    print(f"\nGreedy tokens: the first {same} of 48 agree.\n")
    print("| batch | int8 ms | int5 ms | int5 / int8 |")
    print("|---:|---:|---:|---:|")
    for b in (1, 8):
        prompts = [ids] if b == 1 else [lms["on"].prompt_ids(q) for q in (list(QUESTIONS) * 8)[:8]]
        times: dict[str, list[float]] = {mode: [] for mode in lms}
        for _ in range(7):
            for mode, lm in lms.items():
                times[mode].append(decode_step_ms(lm, prompts, 32))
        old, new = statistics.median(times["off"]), statistics.median(times["on"])
        print(f"| {b} | {old:.2f} | {new:.2f} | {new / old:.3f} |", flush=True)


def kernel_rows() -> None:
    n, k, copies = 4864, 896, 24
    codes = torch.randint(0, 32, (n, k), dtype=torch.uint8)
    step, zero = torch.rand(n, k // 32) * 0.01, torch.randn(n, k // 32) * 0.01
    layers = {
        "int8": (kernels.int8_gemm, [(kernels.pack_int8(torch.randint(-127, 128, (n, k), dtype=torch.int8)), torch.rand(n))
                                     for _ in range(copies)]),
        "int5": (kernels.int5_gemm, [kernels.pack_int5(codes, step, zero) for _ in range(copies)]),
        "int4": (kernels.int4_gemm, [kernels.pack_int4(codes & 15, step, zero) for _ in range(copies)]),
    }
    print("\n| rows | int8 us | int5 us | int4 us |")
    print("|---:|---:|---:|---:|")
    for rows in (1, 2, 4, 8):
        x = torch.randn(rows, k)
        cells = []
        for function, copies_of in layers.values():
            for tiles, scales in copies_of:
                function(x, tiles, scales, n)
            best = float("inf")
            for _ in range(5):
                start = time.perf_counter()
                for tiles, scales in copies_of:
                    function(x, tiles, scales, n)
                best = min(best, (time.perf_counter() - start) / copies)
            cells.append(f"{best * 1e6:.0f}")
        print(f"| {rows} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    model_rows(sys.argv[1] if len(sys.argv) > 1 else "qwen2.5-coder-0.5b")
    thread = threading.Thread(target=kernel_rows)  # as a session decodes: in a worker thread
    thread.start()
    thread.join()
