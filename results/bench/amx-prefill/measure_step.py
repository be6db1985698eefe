"""A batch-1 decode step through the engine's session in a worker thread, as ``bench`` runs it:
``python results/bench/amx-prefill/measure_step.py MODEL [REPEATS]`` (``mixed`` weights, 2 threads, a 900-token
cache; prints the best of REPEATS x 32 steps, in ms a step). Run it alternately with and without
``OMP_WAIT_POLICY=PASSIVE`` to compare OpenMP's wait policies (README.md)."""

from __future__ import annotations

import os
import sys
import threading
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from active_rag.decoding.model import ActiveLM


def main(name: str, repeats: int) -> None:
    torch.set_num_threads(2)
    lm = ActiveLM.load(name, weights="mixed", device="cpu")
    ids = lm.prompt_ids("Tell me a long story about the history of Python packaging. " * 40)[:900]
    times: list[float] = []

    def work() -> None:
        session = lm.session(ids)
        list(session.generate(8))
        for _ in range(repeats):
            t0 = time.perf_counter()
            list(session.generate(32))
            times.append((time.perf_counter() - t0) / 32 * 1000)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    print(f"{name}: {min(times):.1f} ms a step")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 4)
