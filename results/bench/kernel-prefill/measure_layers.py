"""One prefill's product on the 1.5B and 0.5B models' MLP shapes, both ways: the dense product a prefill runs where
the CPU has AMX (dequantise the int4 weight, multiply in the prefill dtype) and the packed kernel a decode step runs
(activations quantised to int8). ``python results/bench/kernel-prefill/measure_layers.py [ROWS]`` (939 by default;
2 threads, best of 3, random int4 weights). Hold the CPU below AMX with ``ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16``, or
act as an AVX2 CPU with ``ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2
ACTIVE_RAG_KERNEL_ISA=avx2``."""

from __future__ import annotations

import os
import sys
import time

import torch

from active_rag import kernels
from active_rag.kernels.layout import pack_int4
from active_rag.models.quantized import prefill_dtype


def main(rows: int) -> None:
    torch.set_num_threads(2)
    isa = os.environ.get("ACTIVE_RAG_KERNEL_ISA") or kernels.default_isa()
    dtype = prefill_dtype()
    for n, k in ((8960, 1536), (1536, 8960), (4864, 896)):
        codes = torch.randint(0, 16, (n, k), dtype=torch.uint8)
        tiles, scales = pack_int4(codes, torch.rand(n, k // 32) * 0.01, torch.rand(n, k // 32) * 0.01)
        x = torch.randn(rows, k)
        buffer = torch.empty(n, k, dtype=dtype)

        def dense() -> torch.Tensor:
            weight = kernels.int4_dequant(tiles, scales, buffer)
            return torch.nn.functional.linear(x.to(torch.bfloat16).to(dtype), weight)

        def packed() -> torch.Tensor:
            return kernels.int4_linear(x, tiles, scales, n, None, isa)

        cells = []
        for name, run in (("dense", dense), ("kernel", packed)):
            run()
            best = float("inf")
            for _ in range(3):
                t0 = time.perf_counter()
                run()
                best = min(best, time.perf_counter() - t0)
            cells.append(f"{name} {best * 1e3:.1f} ms ({2 * rows * n * k / best / 1e9:.0f} GFLOP/s)")
        print(f"{n} x {k}, {rows} rows, dense in {str(dtype).removeprefix('torch.')}, kernel {isa}: " + " | ".join(cells),
              flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 939)
