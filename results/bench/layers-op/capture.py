"""The layers op with the attention row captured at every step, as DRAGIN decodes:
``python results/bench/layers-op/capture.py MODEL`` (default qwen2.5-coder-0.5b).

``mixed`` weights, 2 threads, a 130-token prompt, sessions with ``capture_attention=True`` (the captured layer runs
in the lean step's Python loop, the layers before and after it as the kernels' op): 8 rounds of 24 steps, the op on
and off (:attr:`LeanStep.layers_op`) alternating, medians; and whether 24 tokens, their log-probabilities, entropies
and attention rows are the same both ways."""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import active_rag  # noqa: F401 - before torch: OpenMP's passive wait policy, as the command line runs

import torch

from active_rag.decoding.model import ActiveLM


def main(name: str) -> None:
    torch.set_num_threads(2)
    lm = ActiveLM.load(name, weights="mixed", device="cpu")
    lean = lm.scheduler._lean  # type: ignore[union-attr]
    assert lean is not None and lean.layers_op, "the layers do not run as one op here"
    ids = lm.prompt_ids("Tell me a long story about the history of Python packaging. " * 10)
    times: dict[bool, list[float]] = {True: [], False: []}
    steps: dict[bool, list] = {}

    def work() -> None:
        for on in (True, False):
            lean.layers_op = on
            steps[on] = [(s.id, s.logprob, s.entropy, s.attention) for s in
                         lm.session(ids, capture_attention=True).generate(24)]
        for r in range(8):
            for on in ((True, False) if r % 2 else (False, True)):
                lean.layers_op = on
                session = lm.session(ids, capture_attention=True)
                list(session.generate(2))
                t0 = time.perf_counter()
                list(session.generate(24))
                times[on].append((time.perf_counter() - t0) / 24 * 1000)
        lean.layers_op = True

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    same = all(a[:3] == b[:3] and a[3] is not None and torch.equal(a[3], b[3])
               for a, b in zip(steps[True], steps[False], strict=True))
    print(f"{name}, attention captured at every step: one op {statistics.median(times[True]):.1f} ms a step, Python "
          f"loop {statistics.median(times[False]):.1f}; 24 tokens, signals and rows {'the same' if same else 'DIFFERENT'}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "qwen2.5-coder-0.5b")
