"""The lean decode step with the projections of one input in one kernel call (active_rag.models.fused_projections)
and its norms through torch's ``rms_norm`` op (where the bits are the module's) against the same step as it was
before (a call per projection, each norm module's ``forward``), in one process on the same prompts:
``python results/bench/fused-projections/measure.py MODEL [MODEL ...]``.

For each model (``mixed`` weights, 2 threads): the median ms a step at batch 1 and 8 (the prompts of ``bench --suite
llamacpp``, 48 tokens a run), the two steps interleaved run by run (7 runs each after a warm-up), and whether the
greedy tokens and log-probabilities of a run are the same both ways. The step before is the lean step built with
each projection alone and the norms' own ``forward`` (the layers still hold their views of the fused weights: the
same bytes)."""

from __future__ import annotations

import os
import statistics
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from active_rag.decoding import lean_step as lean_module
from active_rag.decoding.model import ActiveLM
from active_rag.evaluation.bench_llamacpp_sides import QUESTIONS
from active_rag.evaluation.bench_weights import decode_step_ms
from active_rag.models import fused_projections

torch.set_num_threads(2)
RUNS, TOKENS = 7, 48


def tokens_of(lm: ActiveLM, ids: list[int]) -> tuple[list[int], list[float]]:
    steps = list(lm.session(ids).generate(TOKENS))
    return [s.id for s in steps], [s.logprob for s in steps]


def separate(layers):  # each projection its own call, as before the fusion
    parts = [fused_projections._alone(layer) for layer in layers]
    return lambda x: [y for part in parts for y in part(x)]


def main(models: list[str]) -> None:
    print("| Model | batch | before, ms | fused, ms | fused / before | same tokens and log-probabilities |")
    print("|---|---:|---:|---:|---:|---|")
    for name in models:
        lm = ActiveLM.load(name, weights="mixed", device="cpu")
        assert lm.scheduler is not None and lm.scheduler.step_path == "lean"
        fused = lm.scheduler._lean
        original = lean_module.fuse_projections, lean_module._norm
        lean_module.fuse_projections, lean_module._norm = separate, lambda module: module.forward
        try:
            alone = lean_module.lean_step(lm.model)
        finally:
            lean_module.fuse_projections, lean_module._norm = original
        questions = [lm.prompt_ids(q) for q in QUESTIONS]
        decode_step_ms(lm, questions[:1], 4)
        same = tokens_of(lm, questions[1])
        lm.scheduler._lean = alone
        same = same == tokens_of(lm, questions[1])
        for b in (1, 8):
            batch = [questions[i % len(questions)] for i in range(b)]
            times: dict[str, list[float]] = {"alone": [], "fused": []}
            for _ in range(RUNS):
                for path in ("alone", "fused"):
                    lm.scheduler._lean = fused if path == "fused" else alone
                    times[path].append(decode_step_ms(lm, batch, TOKENS))
            a, f = statistics.median(times["alone"]), statistics.median(times["fused"])
            print(f"| {name} | {b} | {a:.1f} | {f:.1f} | {f / a:.3f} | {'yes' if same else 'NO'} |", flush=True)
        lm.scheduler._lean = fused


if __name__ == "__main__":
    main(sys.argv[1:] or ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
