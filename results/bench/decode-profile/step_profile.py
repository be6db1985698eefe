"""Where a batch-1 decode step goes: ``python results/bench/decode-profile/step_profile.py MODEL`` (``mixed`` weights,
2 threads, a 900-token cache, the step run by the engine's session in a worker thread as ``bench`` runs it).

Prints the wall time a step and torch.profiler's self CPU time a step by op over 16 steps; what the ops do not
account for is Python (the engine's, transformers', the packed layers' ``forward``)."""

from __future__ import annotations

import os
import sys
import threading
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from torch.profiler import ProfilerActivity, profile

from active_rag.decoding.model import ActiveLM

STEPS = 16


def main(name: str) -> None:
    torch.set_num_threads(2)
    lm = ActiveLM.load(name, weights="mixed", device="cpu")
    ids = lm.prompt_ids("Tell me a long story about the history of Python packaging. " * 40)[:900]
    out: dict[str, object] = {}

    def work() -> None:
        session = lm.session(ids)
        list(session.generate(8))
        t0 = time.perf_counter()
        list(session.generate(32))
        out["ms"] = (time.perf_counter() - t0) / 32 * 1000
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            list(session.generate(STEPS))
        out["prof"] = prof

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    prof = out["prof"]
    rows = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in rows) / 1000 / STEPS
    print(f"{name}: {out['ms']:.1f} ms a step (wall, unprofiled); ops' self CPU time {total:.1f} ms a step (profiled)")
    print("| op | ms a step | calls a step |")
    print("|---|---:|---:|")
    for e in rows[:10]:
        print(f"| {e.key} | {e.self_cpu_time_total / 1000 / STEPS:.2f} | {e.count / STEPS:.0f} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "qwen2.5-coder-1.5b")
