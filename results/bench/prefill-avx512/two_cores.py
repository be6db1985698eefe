"""One thread's int4 layer op (AVX512-VNNI) at a prefill's size, alone and beside a copy of itself on the other core:
``taskset -c 0 python results/bench/prefill-avx512/two_cores.py 8 alone``, then ``taskset -c 0 python ... 8 both0 &
taskset -c 1 python ... 8 both1`` (seconds, label). A q_proj of the 1.5B model (1536 -> 1536, random codes) over 168
rows (a row block), one thread; the median MAC/ns over 20-call rounds."""

from __future__ import annotations

import statistics
import sys
import time

import active_rag  # noqa: F401 - before torch

import torch

from active_rag import kernels
from active_rag.kernels import layout


def main() -> None:
    seconds, label = float(sys.argv[1]), sys.argv[2]
    torch.set_num_threads(1)
    op, code = kernels.linear_op("int4", "avx512-vnni")
    k = n = 1536
    rows = 168
    codes = torch.randint(0, 16, (n, k), dtype=torch.uint8)
    tiles, scales = layout.pack_int4(codes, torch.rand(n, k // 32) * 0.01, torch.rand(n, k // 32) * 0.01)
    x = torch.randn(rows, k)
    rates, end = [], time.time() + seconds
    while time.time() < end:
        t0 = time.perf_counter()
        for _ in range(20):
            op(x, tiles, scales, n, None, code)
        rates.append(rows * k * n * 20 / (time.perf_counter() - t0) / 1e9)
    print(f"{label}: {statistics.median(rates):.1f} MAC/ns (median of {len(rates)} rounds)")


if __name__ == "__main__":
    main()
