"""A prompt's attention after a cached prefix in chunks over the key blocks each sees
(active_rag/decoding/prefill_attention.py) against the model's masked sdpa call: ``python
results/bench/prefill-attention/prefill_attention.py [MODEL ...]`` (2 threads).

1. One layer's attention of each model's shape (float32, transformers' call: ``repeat_kv``'s copies, the whole
   boolean mask) against the chunked call, for prompts of ``N`` tokens after ``P`` cached ones, alternated, median
   of 7 after a warm-up; whether the outputs are equal bit for bit.
2. Each model (``mixed`` weights, as ``eval`` loads it): a 720-token prompt after 629 cached tokens (the length of
   ``sr-rag-choose``'s prompts on HotpotQA after its cached instruction), the whole forward with
   ``ACTIVE_RAG_PREFILL_ATTENTION=sdpa`` and without, alternated in one process, median of 7; whether the logits
   of every position and the cache are equal bit for bit.
"""

from __future__ import annotations

import copy
import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import active_rag  # noqa: F401 - before torch: OpenMP's passive wait policy, as the command line runs

import torch
import torch.nn.functional as F

from active_rag.decoding import prefill_attention as prefill

SHAPES = {"qwen2.5-coder-0.5b": (14, 2, 64), "qwen2.5-coder-1.5b": (12, 2, 128)}
PROMPTS = [(629, 720), (150, 700), (400, 1000), (1000, 1000), (1500, 300)]


def _timed(fn, rounds: int = 7) -> tuple[float, float]:
    """Medians in ms of ``fn(False)`` and ``fn(True)``, alternated."""
    fn(False), fn(True)
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(rounds):
        for chunked in (False, True):
            t0 = time.perf_counter()
            fn(chunked)
            times[chunked].append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times[False]), statistics.median(times[True])


def layers(model: str) -> None:
    heads, kv_heads, dim = SHAPES[model]
    for prefix, rows in PROMPTS:
        torch.manual_seed(0)
        q = torch.randn(1, heads, rows, dim)
        k, v = torch.randn(1, kv_heads, prefix + rows, dim), torch.randn(1, kv_heads, prefix + rows, dim)
        mask = torch.ones(rows, prefix + rows, dtype=torch.bool).tril(prefix)[None, None]
        times = heads // kv_heads

        def call(chunked: bool) -> torch.Tensor:
            if chunked:
                out = prefill.prefill_attention(q, k, v, mask)
                assert out is not None
                return out
            return F.scaled_dot_product_attention(q, torch.repeat_interleave(k, times, 1),
                                                  torch.repeat_interleave(v, times, 1),
                                                  attn_mask=mask).transpose(1, 2).contiguous()

        same = torch.equal(call(False), call(True))
        whole, chunked = _timed(call)
        print(f"{model} layer  P={prefix:5d} N={rows:5d} chunks={len(prefill.chunks(prefix, rows))}: sdpa "
              f"{whole:6.1f} ms, chunked {chunked:6.1f} ms ({chunked / whole:.2f}x), equal bit for bit: {same}",
              flush=True)


def forward(model_name: str, prefix: int = 629, rows: int = 720) -> None:
    from active_rag.decoding.model import ActiveLM

    model = ActiveLM.load(model_name, weights="mixed", device="cpu").model
    ids = torch.randint(100, 20000, (1, prefix + rows), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        past = model(ids[:, :prefix], use_cache=True).past_key_values

        def rest(chunked: bool, keep: int = 1):
            os.environ[prefill.VARIABLE] = "" if chunked else "sdpa"
            cache = copy.deepcopy(past)
            return model(ids[:, prefix:], past_key_values=cache, use_cache=True, logits_to_keep=keep).logits, cache

        (a, ca), (b, cb) = rest(False, 0), rest(True, 0)
        same = torch.equal(a, b) and all(torch.equal(x.keys, y.keys) and torch.equal(x.values, y.values)
                                         for x, y in zip(ca.layers, cb.layers))
        whole, chunked = _timed(rest)
    print(f"{model_name} forward P={prefix} N={rows}: sdpa {whole / 1e3:.2f} s ({rows / whole * 1e3:.0f} tok/s), "
          f"chunked {chunked / 1e3:.2f} s ({rows / chunked * 1e3:.0f} tok/s, {chunked / whole:.2f}x), "
          f"logits and cache equal bit for bit: {same}", flush=True)


def main() -> None:
    torch.set_num_threads(2)
    models = sys.argv[1:] or list(SHAPES)
    for model in models:
        layers(model)
    for model in models:
        forward(model)


if __name__ == "__main__":
    main()
