"""The packed products of a prefill through the ops, one thread and two: ``python
results/bench/prefill-bound/products.py``. Random layers of the 1.5B's gate projection shape (1536 -> 8960) in each
layout (``kquants/kernel_isas.random_layers``), 512 rows, best of 5 calls (``kernel_isas.best_us``), the two thread counts alternated three
times; GMAC/s (multiply-adds, 1e9 a second)."""

from __future__ import annotations

import active_rag  # noqa: F401  (before torch)

import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "kquants"))
from kernel_isas import best_us, random_layers  # noqa: E402

ROWS, N, K = 512, 8960, 1536


def main() -> None:
    layers = random_layers(N, K, 1, np.random.default_rng(0))
    x = torch.randn(ROWS, K)
    print(f"| layout | {ROWS} x {K} -> {N}, 1 thread | 2 threads |")
    print("|---|---|---|")
    for name, (function, copies) in layers.items():
        rates: dict[int, list[float]] = {1: [], 2: []}
        for _ in range(3):
            for threads in (1, 2):
                torch.set_num_threads(threads)
                rates[threads].append(ROWS * N * K / best_us(function, copies, x, N) / 1e3)
        print(f"| {name} | " + " | ".join(", ".join(f"{r:.0f}" for r in rates[t]) for t in (1, 2)) + " |", flush=True)


if __name__ == "__main__":
    main()
