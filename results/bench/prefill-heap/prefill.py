"""One process: load MODEL (``mixed``, CPU, 2 threads), prefill a 939-token prompt 4 times with the prefix cache
off, print tokens a second of each and the process's peak resident set. ``ACTIVE_RAG_HEAP`` chooses the heap
policy (``active_rag/decoding/host_memory.py``); ``ab.sh`` alternates the two."""

from __future__ import annotations

import os
import resource
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from active_rag.decoding.model import ActiveLM
from active_rag.evaluation.bench_weights import _prefill_prompt


def main(name: str) -> None:
    torch.set_num_threads(2)
    lm = ActiveLM.load(name, weights="mixed", device="cpu")
    lm.prefix_cache = None
    ids = _prefill_prompt(lm, 939)
    speeds = []
    for _ in range(4):
        t0 = time.perf_counter()
        lm.session(list(ids))
        speeds.append(len(ids) / (time.perf_counter() - t0))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(f"{name} heap={os.environ.get('ACTIVE_RAG_HEAP', 'hold')}: prefill tok/s "
          + " ".join(f"{s:.0f}" for s in speeds) + f" (best {max(speeds):.0f}); peak RSS {peak} MB", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
