"""A decode step's attention over a long cache: sdpa over the model's query heads (``enable_gqa``) against sdpa over
the heads grouped by the key/value head they share (active_rag.decoding.one_token_attention), in one process: ``python results/bench/decode-attention/measure.py``.

1. One layer's attention of one query position, the two models' shapes (qwen2.5-coder-1.5b: 12 query heads sharing
   2 key/value heads of 128; 0.5B: 14 sharing 2 of 64), float32, 2 threads: microseconds a call (best of 5 runs of
   200 calls), from 128 to 4,000 cached keys, in the main thread and in another one (where the engine decodes:
   every call that opens an OpenMP parallel region there pays for waking its team).
2. Through the engine (``mixed`` weights, 2 threads): ms a decode step at batch 1 and 8 after a prompt of about 400
   (under :data:`~active_rag.decoding.one_token_attention.MIN_KEYS`: the fused kernel both ways), 1,000, 2,000 and
   4,000 tokens (the same prompt for every sequence of a batch: the prefix cache prefills it once), the
   two paths interleaved run by run (``ACTIVE_RAG_DECODE_ATTENTION=sdpa`` for the fused kernel; 5 runs of 24 tokens
   each, medians), and whether the greedy tokens are the same both ways."""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import torch.nn.functional as F

from active_rag.decoding import one_token_attention as one_token
from active_rag.decoding.model import ActiveLM
from active_rag.evaluation.bench_weights import decode_step_ms

torch.set_num_threads(2)
RUNS, TOKENS = 5, 24
TEXT = ("The package requires Python 3.9 or later and depends on typing-extensions, which is described as "
        "Backported and Experimental Type Hints for Python 3.9+. Its author is the Python Packaging Authority. ")


def per_call_us(fn: object, calls: int = 200) -> float:
    for _ in range(20):
        fn()  # type: ignore[operator]
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()  # type: ignore[operator]
        best = min(best, (time.perf_counter() - t0) / calls * 1e6)
    return best


def layer_rows(thread: str) -> None:
    for heads, kv_heads, dim, label in ((12, 2, 128, "1.5B: 12 / 2 x 128"), (14, 2, 64, "0.5B: 14 / 2 x 64")):
        for keys in (128, 256, 512, 900, 2000, 4000):
            q = torch.randn(1, heads, 1, dim)
            k, v = torch.randn(1, kv_heads, keys, dim), torch.randn(1, kv_heads, keys, dim)
            sdpa = per_call_us(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
            grouped = per_call_us(lambda: one_token.one_token_attention(q, k, v))
            print(f"| {label} | {thread} | {keys} | {sdpa:.0f} | {grouped:.0f} | {grouped / sdpa:.2f} |", flush=True)


def layer_table() -> None:
    print("| shape (heads / kv heads x dim) | thread | keys | sdpa (GQA) us | heads grouped us | grouped / sdpa |")
    print("|---|---|---:|---:|---:|---:|")
    layer_rows("main")
    worker = threading.Thread(target=layer_rows, args=("another",))
    worker.start()
    worker.join()


def engine_table(models: list[str]) -> None:
    print("\n| Model | prompt tokens | batch | sdpa ms a step | grouped ms a step | ratio | same tokens |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for name in models:
        lm = ActiveLM.load(name, weights="mixed", device="cpu")
        for target in (400, 1000, 2000, 4000):
            ids = lm.prompt_ids(TEXT * (target // 40))
            while len(ids) > target:
                ids = ids[:target]
            os.environ[one_token.VARIABLE] = "sdpa"
            fused_tokens = [s.id for s in lm.session(ids).generate(TOKENS)]
            os.environ.pop(one_token.VARIABLE)
            same = fused_tokens == [s.id for s in lm.session(ids).generate(TOKENS)]
            for batch in (1, 8):
                times: dict[str, list[float]] = {"sdpa": [], "grouped": []}
                for _ in range(RUNS):
                    for path in ("sdpa", "grouped"):
                        if path == "sdpa":
                            os.environ[one_token.VARIABLE] = "sdpa"
                        else:
                            os.environ.pop(one_token.VARIABLE, None)
                        times[path].append(decode_step_ms(lm, [ids] * batch, TOKENS))
                os.environ.pop(one_token.VARIABLE, None)
                s, p = statistics.median(times["sdpa"]), statistics.median(times["grouped"])
                print(f"| {name} | {len(ids)} | {batch} | {s:.1f} | {p:.1f} | {p / s:.2f} | {'yes' if same else 'NO'} |",
                      flush=True)


if __name__ == "__main__":
    layer_table()
    engine_table(sys.argv[1:] or ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
