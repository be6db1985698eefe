"""GB/s of the decode kernels at batch 1 on the layer shapes of qwen2.5-coder-0.5B and 1.5B, each shape's weights
replicated to 256 MB and rotated (every call reads from memory, as a step does): ``python
results/bench/prefetch/measure_kernels.py [LABEL]`` prints one line (best of 7 passes a shape). Run it alternately
on two builds of ``active_rag/kernels/csrc`` (``ab.sh``) to compare them."""

from __future__ import annotations

import sys
import time

import torch

from active_rag import kernels
from active_rag.kernels.layout import pack_int4, pack_int5

SHAPES = (("int5", 4864, 896), ("int5", 896, 896), ("int4", 4864, 896), ("int4", 896, 4864),
          ("int8", 8960, 1536), ("int8", 1536, 8960))
STREAM = 256 * 2**20


def layer(kind: str, n: int, k: int) -> tuple[tuple[torch.Tensor, torch.Tensor], int]:
    if kind == "int8":
        tiles, scales = kernels.pack_int8(torch.randint(-127, 128, (n, k), dtype=torch.int8)), torch.rand(n)
        return (tiles, scales), tiles.numel() + scales.numel() * 4
    codes = torch.randint(0, 32 if kind == "int5" else 16, (n, k), dtype=torch.uint8)
    step, zero = torch.rand(n, k // 32) * 0.01, torch.rand(n, k // 32) * 0.01
    tiles, scales = (pack_int5 if kind == "int5" else pack_int4)(codes, step, zero)
    return (tiles, scales), tiles.numel() + scales.numel() * 2


def main(label: str) -> None:
    torch.set_num_threads(2)
    cells = []
    for kind, n, k in SHAPES:
        (tiles, scales), size = layer(kind, n, k)
        copies = [(tiles.clone(), scales.clone()) for _ in range(max(1, STREAM // size))]
        op = {"int4": kernels.int4_linear, "int5": kernels.int5_linear, "int8": kernels.int8_linear}[kind]
        x = torch.randn(1, k)
        for t, s in copies:
            op(x, t, s, n, None)
        best = float("inf")
        for _ in range(7):
            t0 = time.perf_counter()
            for t, s in copies:
                op(x, t, s, n, None)
            best = min(best, (time.perf_counter() - t0) / len(copies))
        cells.append(f"{kind} {n}x{k} {size / best / 1e9:.1f}")
    print(f"{label}: " + " | ".join(cells) + " GB/s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else kernels.describe())
