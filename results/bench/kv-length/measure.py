"""What a decode step pays for the length of its sequences' caches: ``python results/bench/kv-length/measure.py``.

qwen2.5-coder-1.5b ``mixed``, 2 threads; ms a decode step (``bench_weights.decode_step_ms``: the sessions decode
together, 16 steps, an end of sequence decoded on) at batch 1 and 8, after prompts of about 40 tokens (as ``bench
--suite llamacpp`` decodes) and of about 1,300 (a RAG prompt: ``sr-rag-choose`` reads 1,300-2,000), each sequence its
own prompt. Prints the bytes the keys and values of those caches hold (float32) beside the weights' bytes a step
reads, and the step's time at each length, so that what the cache's bytes cost can be read against the weights'.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import active_rag  # noqa: F401  (before torch: the kernels' library and thread settings)
import torch

from active_rag.decoding.model import ActiveLM
from active_rag.evaluation.bench_weights import decode_step_ms
from active_rag.models.quantized import model_weight_bytes

TOPICS = ["Python packaging", "the history of Unix", "relational databases", "compilers", "the HTTP protocol",
          "garbage collection", "version control", "operating system schedulers"]


def prompts(lm: ActiveLM, batch: int, long: bool) -> list[list[int]]:
    out = []
    for topic in TOPICS[:batch]:
        text = f"Write a very long essay about {topic}."
        if long:
            text = (f"Here are notes about {topic}. " + " ".join(f"Note {i}: {topic} has many parts worth a paragraph."
                                                                for i in range(110)) + "\n" + text)
        out.append(lm.prompt_ids(text))
    return out


def main(model: str = "qwen2.5-coder-1.5b") -> None:
    torch.set_num_threads(2)
    lm = ActiveLM.load(model, weights="mixed", device="cpu")
    config = lm.model.config
    kv_per_token = 2 * config.num_hidden_layers * config.num_key_value_heads * (config.hidden_size // config.num_attention_heads) * 4
    weights = model_weight_bytes(lm.model)
    print(f"{model}: weights read a step {weights / 1e6:.0f} MB; keys and values {kv_per_token / 1e3:.1f} kB a token (float32)")
    for batch in (1, 8):
        rows = []
        for long in (False, True):
            ps = prompts(lm, batch, long)
            tokens = sum(len(p) for p in ps) / len(ps)
            ms = min(decode_step_ms(lm, ps, 16) for _ in range(2))
            cache = batch * (tokens + 16) * kv_per_token
            rows.append((tokens, ms, cache))
            print(f"batch {batch}: prompts of {tokens:.0f} tokens: {ms:.1f} ms a step; caches {cache / 1e6:.0f} MB", flush=True)
        (t0, m0, c0), (t1, m1, c1) = rows
        rate = f"{(c1 - c0) / (m1 - m0) / 1e6:.1f} GB/s" if m1 > m0 else "no time to read it in: a noisy run"
        print(f"batch {batch}: {m1 / m0:.2f}x the short prompts' step; {m1 - m0:+.1f} ms for {(c1 - c0) / 1e6:.0f} MB more "
              f"cache ({rate})", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
