"""A decode step's attention as active-rag's kernels' op (``csrc/attention.cpp``) against the grouped sdpa call it
replaces (``ACTIVE_RAG_DECODE_ATTENTION=grouped``), in one process: ``python results/bench/decode-attention-op/measure.py``.

1. One layer's attention of one query position, the two models' shapes (qwen2.5-coder-1.5b: 12 query heads sharing
   2 key/value heads of 128; 0.5B: 14 sharing 2 of 64), float32, 2 threads, in a thread other than the main one (as
   the engine decodes): microseconds a call, best of 5 runs of 200 calls, with the keys in cache ("hot") and read from
   memory ("cold": 64 sets of keys and values cycled, 0.5-2 MB each).
2. Through the engine (``mixed`` weights, 2 threads): ms a decode step at batch 1 and 8 after prompts of about 100,
   1,000, 2,000 and 4,000 tokens, the two paths interleaved run by run (5 runs of 24 tokens, medians), and whether
   the greedy tokens of 24 steps are the same both ways."""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from active_rag.decoding import one_token_attention as one_token
from active_rag.decoding.model import ActiveLM
from active_rag.evaluation.bench_weights import decode_step_ms

torch.set_num_threads(2)
RUNS, TOKENS, SETS = 5, 24, 64
TEXT = ("The package requires Python 3.9 or later and depends on typing-extensions, which is described as "
        "Backported and Experimental Type Hints for Python 3.9+. Its author is the Python Packaging Authority. ")


def per_call_us(fn: object, calls: int = 200) -> float:
    for i in range(20):
        fn(i)  # type: ignore[operator]
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for i in range(calls):
            fn(i)  # type: ignore[operator]
        best = min(best, (time.perf_counter() - t0) / calls * 1e6)
    return best


def use(path: str) -> None:
    os.environ[one_token.VARIABLE] = "grouped" if path == "grouped" else ""


def layer_rows() -> None:
    for heads, kv_heads, dim, label in ((12, 2, 128, "1.5B: 12 / 2 x 128"), (14, 2, 64, "0.5B: 14 / 2 x 64")):
        for keys in (100, 512, 1000, 2000, 4000):
            q = torch.randn(1, heads, 1, dim)
            sets = [(torch.randn(1, kv_heads, keys, dim), torch.randn(1, kv_heads, keys, dim)) for _ in range(SETS)]
            row = [label, str(keys)]
            for cold in (False, True):
                for path in ("grouped", "kernel"):
                    use(path)
                    row.append(f"{per_call_us(lambda i: one_token.one_token_attention(q, *sets[i % SETS if cold else 0])):.0f}")
            print(f"| {' | '.join(row)} | {float(row[3]) / float(row[2]):.2f} | {float(row[5]) / float(row[4]):.2f} |",
                  flush=True)


def layer_table() -> None:
    print("| shape (heads / kv heads x dim) | keys | grouped sdpa hot us | op hot us | grouped sdpa cold us | op cold us "
          "| op / sdpa hot | op / sdpa cold |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    worker = threading.Thread(target=layer_rows)
    worker.start()
    worker.join()


def engine_table(models: list[str]) -> None:
    print("\n| Model | prompt tokens | batch | grouped sdpa ms a step | op ms a step | ratio | same tokens |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for name in models:
        lm = ActiveLM.load(name, weights="mixed", device="cpu")
        for target in (100, 1000, 2000, 4000):
            ids = lm.prompt_ids(TEXT * max(1, target // 40))[:target]
            use("grouped")
            grouped_tokens = [s.id for s in lm.session(ids).generate(TOKENS)]
            use("kernel")
            same = grouped_tokens == [s.id for s in lm.session(ids).generate(TOKENS)]
            for batch in (1, 8):
                times: dict[str, list[float]] = {"grouped": [], "kernel": []}
                for _ in range(RUNS):
                    for path in ("grouped", "kernel"):
                        use(path)
                        times[path].append(decode_step_ms(lm, [ids] * batch, TOKENS))
                g, k = statistics.median(times["grouped"]), statistics.median(times["kernel"])
                print(f"| {name} | {len(ids)} | {batch} | {g:.1f} | {k:.1f} | {k / g:.2f} | {'yes' if same else 'NO'} |",
                      flush=True)


if __name__ == "__main__":
    layer_table()
    engine_table(sys.argv[1:] or ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
