"""The decode scheduler's step through ``model(...)`` against the lean step (active_rag.decoding.lean_step), in one
process on the same sessions' prompts: ``python results/bench/lean-step/measure.py MODEL [MODEL ...]``.

For each model (``mixed`` weights, 2 threads): the median ms a step at batch 1 and 8 (the prompts of ``bench --suite
llamacpp``, 48 tokens a run), the two paths interleaved run by run (7 runs each after a warm-up), and whether the
greedy tokens of a run are the same both ways."""

from __future__ import annotations

import os
import statistics
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from active_rag.decoding.model import ActiveLM
from active_rag.evaluation.bench_llamacpp_sides import QUESTIONS
from active_rag.evaluation.bench_weights import decode_step_ms

torch.set_num_threads(2)
RUNS, TOKENS = 7, 48


def tokens_of(lm: ActiveLM, ids: list[int]) -> list[int]:
    return [s.id for s in lm.session(ids).generate(TOKENS)]


def main(models: list[str]) -> None:
    print("| Model | batch | model(...) ms | lean ms | lean / model(...) | same tokens |")
    print("|---|---:|---:|---:|---:|---|")
    for name in models:
        lm = ActiveLM.load(name, weights="mixed", device="cpu")
        assert lm.scheduler is not None and lm.scheduler.step_path == "lean"
        lean = lm.scheduler._lean
        questions = [lm.prompt_ids(q) for q in QUESTIONS]
        decode_step_ms(lm, questions[:1], 4)
        same = tokens_of(lm, questions[1])
        lm.scheduler._lean = None
        same = same == tokens_of(lm, questions[1])
        for b in (1, 8):
            batch = [questions[i % len(questions)] for i in range(b)]
            times: dict[str, list[float]] = {"model": [], "lean": []}
            for _ in range(RUNS):
                for path in ("model", "lean"):
                    lm.scheduler._lean = lean if path == "lean" else None
                    times[path].append(decode_step_ms(lm, batch, TOKENS))
            m, le = statistics.median(times["model"]), statistics.median(times["lean"])
            print(f"| {name} | {b} | {m:.1f} | {le:.1f} | {le / m:.3f} | {'yes' if same else 'NO'} |", flush=True)
        lm.scheduler._lean = lean


if __name__ == "__main__":
    main(sys.argv[1:] or ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
