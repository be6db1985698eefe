"""Prefill speed of a 939-token prompt: ``python results/bench/amx-prefill/measure_prefill.py MODEL`` (``mixed``
weights, 2 threads, no prefix cache, best of 3; prints tokens a second). Run it alternately with two builds of the
kernel library to compare them (README.md)."""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from active_rag.decoding.model import ActiveLM


def main(name: str) -> None:
    torch.set_num_threads(2)
    lm = ActiveLM.load(name, weights="mixed", device="cpu", prefix_cache=False)
    ids = lm.prompt_ids("Tell me a long story about the history of Python packaging. " * 80)[:939]
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        session = lm.session(ids)
        list(session.generate(1))
        best = min(best, time.perf_counter() - t0)
    print(f"{name}: {len(ids) / best:.0f} tok/s")


if __name__ == "__main__":
    main(sys.argv[1])
