"""The decode step's layers as the kernels' one op against the lean step's Python loop:
``python results/bench/layers-op/measure.py [MODEL ...]`` (default qwen2.5-coder-0.5b and 1.5B).

``mixed`` weights, 2 threads, through the engine as ``bench --suite llamacpp`` decodes (``decode_step_ms``: sessions
in their own threads, an end of sequence decoded on, the prefill not timed), batch 1 and 8, short chat prompts,
one process: the two ways alternate round by round (10 rounds of 32 steps each, the order flipped every round, the
op turned off by :attr:`LeanStep.layers_op`), medians and the ratio. Then 48 greedy tokens of a 900-token prompt each
way: whether the tokens, log-probabilities and entropies are the same."""

from __future__ import annotations

import os
import statistics
import sys
import threading

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import active_rag  # noqa: F401 - before torch: OpenMP's passive wait policy, as the command line runs

import torch

from active_rag.decoding.model import ActiveLM
from active_rag.evaluation.bench_llamacpp_sides import QUESTIONS
from active_rag.evaluation.bench_weights import decode_step_ms

ROUNDS, STEPS = 10, 32


def measure(name: str) -> None:
    torch.set_num_threads(2)
    lm = ActiveLM.load(name, weights="mixed", device="cpu")
    lean = lm.scheduler._lean  # type: ignore[union-attr]
    assert lean is not None and lean.layers_op, "the layers do not run as one op here"
    questions = [lm.prompt_ids(q) for q in QUESTIONS]
    for batch in (1, 8):
        prompts = [questions[i % len(questions)] for i in range(batch)]
        decode_step_ms(lm, prompts, 4)  # warm-up
        times: dict[bool, list[float]] = {True: [], False: []}
        for r in range(ROUNDS):
            for on in ((True, False) if r % 2 else (False, True)):
                lean.layers_op = on
                times[on].append(decode_step_ms(lm, prompts, STEPS))
        lean.layers_op = True
        one, loop = statistics.median(times[True]), statistics.median(times[False])
        print(f"| {name} | {batch} | {loop:.1f} | {one:.1f} | {one / loop:.2f} |", flush=True)
    ids = lm.prompt_ids("Tell me a long story about the history of Python packaging. " * 40)[:900]
    out: dict[bool, list] = {}

    def greedy(on: bool) -> None:
        lean.layers_op = on
        out[on] = [(s.id, s.logprob, s.entropy) for s in lm.session(ids).generate(48)]

    for on in (True, False):
        thread = threading.Thread(target=greedy, args=(on,))
        thread.start()
        thread.join()
    lean.layers_op = True
    print(f"{name}: 48 greedy tokens of a 900-token prompt {'the same' if out[True] == out[False] else 'DIFFERENT'} "
          "(ids, log-probabilities, entropies)", flush=True)


if __name__ == "__main__":
    print("| Model | Batch | Python loop, ms a step | one op, ms a step | one op / loop |")
    print("|---|---:|---:|---:|---:|")
    for model in sys.argv[1:] or ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]:
        measure(model)
