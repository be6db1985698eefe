"""The decode attention op alone: ``python results/bench/kv-length/op.py``.

224 calls of ``torch.ops.active_rag.decode_attention`` (a batch-8 step's 28 layers x 8 sequences of
qwen2.5-coder-1.5b's shape: 12 query heads over 2 key/value heads of 128, 1,640 keys each), each over a cache of its
own (752 MB in all, read from memory), then 224 calls over one cache (3.4 MB, held in L3); 2 threads (``T=1`` for
one), three rounds each, GB/s of keys and values read. To compare two builds of the kernels, run it once per build in
alternating processes (``active_rag.kernels.build.build_key`` patched to each build's key, as the README says).
"""

from __future__ import annotations

import os
import time

import active_rag  # noqa: F401  (before torch)
import torch

import active_rag.kernels as kernels

LAYERS, SEQUENCES, KV_HEADS, HEADS, DIM, KEYS = 28, 8, 2, 12, 128, 1640


def rate(ks: list[torch.Tensor], vs: list[torch.Tensor], q: torch.Tensor, calls: int) -> tuple[float, float]:
    """Seconds for ``calls`` calls cycling through the caches, and GB/s of keys and values read."""
    op = torch.ops.active_rag.decode_attention
    t0 = time.perf_counter()
    for i in range(calls):
        op(q, ks[i % len(ks)], vs[i % len(vs)], DIM**-0.5, 0)
    seconds = time.perf_counter() - t0
    return seconds, calls * ks[0].numel() * 4 * 2 / 1e9 / seconds


def main() -> None:
    if not kernels.loaded():
        raise SystemExit("op.py: active-rag's kernels are not built here (python -m active_rag.kernels.build)")
    torch.set_num_threads(int(os.environ.get("T", "2")))
    calls = LAYERS * SEQUENCES
    ks = [torch.randn(1, KV_HEADS, KEYS, DIM) for _ in range(calls)]
    vs = [torch.randn(1, KV_HEADS, KEYS, DIM) for _ in range(calls)]
    q = torch.randn(1, HEADS, 1, DIM)
    for _ in range(3):
        seconds, gbs = rate(ks, vs, q, calls)
        print(f"from memory: {seconds * 1000:.1f} ms for {calls} calls, {gbs:.1f} GB/s", flush=True)
    for _ in range(3):
        seconds, gbs = rate(ks[:1], vs[:1], q, calls)
        print(f"one cache in L3: {seconds * 1000:.1f} ms for {calls} calls, {gbs:.1f} GB/s", flush=True)


if __name__ == "__main__":
    main()
