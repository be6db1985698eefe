"""The k-quant layers' kernels against the layouts before on each instruction-set path this CPU runs:
``python results/bench/kquants/kernel_isas.py``. Random weights of the 1.5B's output head and a down projection,
copies enough that they come from memory, best of 5, µs a call at 1 and 8 rows. On an AVX-512 machine the AVX2 path
is forced through the ops' ``isa`` argument (the same code an AVX2-only CPU runs, with this CPU's memory and caches)."""

from __future__ import annotations

import active_rag  # noqa: F401  (before torch)

import time

import numpy as np
import torch

from active_rag import kernels

torch.set_num_threads(2)


SHAPES = ((151936, 1536, 2), (1536, 8960, 24))
"""(outputs, inputs, copies): the 1.5B's output head and a down projection."""


def random_layers(n: int, k: int, copies: int, rng: np.random.Generator) -> dict[str, tuple]:
    """Each layout's op and ``copies`` random ``(tiles, scales)`` of an ``n x k`` layer."""
    codes = torch.from_numpy(rng.integers(0, 64, (n, k), dtype=np.uint8))
    sc = torch.from_numpy(rng.integers(-128, 128, (n, k // 16), dtype=np.int8))
    d = torch.full((n, k // 256), 1e-3, dtype=torch.float16)
    small = torch.from_numpy(rng.integers(0, 64, (n, k // 32), dtype=np.uint8))
    step, zero = torch.rand(n, k // 32) * 0.01, torch.randn(n, k // 32) * 0.01
    return {
        "int8": (kernels.int8_gemm, [(kernels.pack_int8(torch.randint(-127, 128, (n, k), dtype=torch.int8)), torch.rand(n))
                                     for _ in range(copies)]),
        "int6k": (kernels.int6_gemm, [kernels.pack_int6k(codes, sc, d) for _ in range(copies)]),
        "int4": (kernels.int4_gemm, [kernels.pack_int4(codes & 15, step, zero) for _ in range(copies)]),
        "int4k": (kernels.int4_gemm, [kernels.pack_int4k(codes & 15, small, small, d, d) for _ in range(copies)]),
    }


def best_us(function, copies_of: list, x: torch.Tensor, n: int, isa: str | None = None) -> float:
    """µs a call, the best of 5 passes over the copies (the first call warms the op)."""
    function(x, *copies_of[0], n, isa)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for tiles, scales in copies_of:
            function(x, tiles, scales, n, isa)
        best = min(best, (time.perf_counter() - start) / len(copies_of))
    return best * 1e6


def main() -> None:
    rng = np.random.default_rng(0)
    print("| isa | shape | rows | int8 us | int6k us | int6k / int8 | int4 us | int4k us | int4k / int4 |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for n, k, copies in SHAPES:
        layers = random_layers(n, k, copies, rng)
        for isa in [i for i in kernels.supported_isas() if i != "scalar"]:
            for rows in (1, 8):
                x = torch.randn(rows, k)
                us = {name: best_us(function, copies_of, x, n, isa) for name, (function, copies_of) in layers.items()}
                print(f"| {isa} | {n} x {k} | {rows} | {us['int8']:.0f} | {us['int6k']:.0f} | {us['int6k'] / us['int8']:.2f} | "
                      f"{us['int4']:.0f} | {us['int4k']:.0f} | {us['int4k'] / us['int4']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
