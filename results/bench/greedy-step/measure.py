"""The decode step ``bench`` times, with end-of-sequence masked by a logits processor (``end_masked``: as
``decode_step_ms`` decoded before 2026-12-03) and decoded on as any other token (as it does now, and as the llama.cpp
side does):
``python results/bench/greedy-step/measure.py [MODEL ...]``.

``mixed`` weights, 2 threads, the bench's four question prompts (``bench_llamacpp_sides.QUESTIONS``), batch 1 and 8,
48 steps a timing; the two ways alternate in one process (``ROUNDS`` rounds), so the machine's drift falls on both.
Prints each round and the medians.
"""

from __future__ import annotations

import os
import statistics
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import active_rag  # noqa: F401  (before torch: the kernels' library and thread settings)
import torch

from active_rag.decoding.model import ActiveLM
from active_rag.evaluation.bench_llamacpp_sides import QUESTIONS
from active_rag.evaluation.bench_runs import _no_eos
from active_rag.evaluation.bench_weights import decode_step_ms, end_masked

ROUNDS = 6
STEPS = 48


def main(models: list[str]) -> None:
    torch.set_num_threads(2)
    for model in models:
        lm = ActiveLM.load(model, weights="mixed", device="cpu")
        questions = [lm.prompt_ids(q) for q in QUESTIONS]
        decode_step_ms(lm, questions[:1], 4)
        for batch in (1, 8):
            prompts = [questions[i % len(questions)] for i in range(batch)]
            before, now = [], []
            for r in range(ROUNDS):
                before.append(decode_step_ms(lm, prompts, STEPS, logits_processor=end_masked(lm)))
                now.append(decode_step_ms(lm, prompts, STEPS))
                print(f"{model} batch {batch} round {r}: masked {before[-1]:.1f} ms, decoded on {now[-1]:.1f} ms",
                      flush=True)
            b, n = statistics.median(before), statistics.median(now)
            pairs = sorted(x / y for x, y in zip(now, before, strict=True))
            print(f"{model} batch {batch}: masked {b:.1f} ms a step, decoded on {n:.1f} ({n / b:.3f}x; "
                  f"per-round ratios {pairs[0]:.3f}-{pairs[-1]:.3f})", flush=True)
        # the prompts' greedy tokens are the same both ways until the first end of sequence
        ids = questions[0]
        plain = [s.id for s in lm.session(list(ids)).generate(STEPS)]
        clone = _no_eos(lm, prefix_cache=True)[0]
        onward = [s.id for s in clone.session(list(ids)).generate(STEPS)]
        print(f"{model}: greedy tokens until the end of sequence the same: {onward[:len(plain)] == plain} "
              f"({len(plain)} tokens, then {STEPS - len(plain)} more decoded on)", flush=True)
        del lm


if __name__ == "__main__":
    main(sys.argv[1:] or ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
