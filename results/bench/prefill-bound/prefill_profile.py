"""Where a prompt's prefill goes on this CPU: ``python results/bench/prefill-bound/prefill_profile.py [MODEL]`` (default
qwen2.5-coder-1.5b, ``mixed`` weights, 2 threads).

The shape of ``sr-rag-choose``'s prompt on HotpotQA: 629 tokens read from a session (the instruction and exemplars
every question shares), then 720 more (the six passages and the question) in one call, as the engine's session
prefills them. Prints the 720 tokens' rate (three runs) and ``torch.profiler``'s table of a fourth run."""

from __future__ import annotations

import active_rag  # noqa: F401  (before torch)

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from active_rag.decoding.model import ActiveLM

torch.set_num_threads(2)
PREFIX, PROMPT = 629, 720


def prefill(lm: ActiveLM, ids: list[int], profile: bool = False) -> float:
    """Seconds to prefill ``ids[PREFIX:]`` after a session has read ``ids[:PREFIX]``."""
    session = lm.session(ids[:PREFIX])
    start = time.perf_counter()
    if profile:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as p:
            session.extend(ids[PREFIX:])
        print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
    else:
        session.extend(ids[PREFIX:])
    return time.perf_counter() - start


def main() -> None:
    lm = ActiveLM.load(sys.argv[1] if len(sys.argv) > 1 else "qwen2.5-coder-1.5b", weights="mixed", device="cpu")
    text = (Path(active_rag.__file__).parent / "data" / "demo_corpus.jsonl").read_text()
    ids = lm.encode(text)[: PREFIX + PROMPT]
    prefill(lm, ids)
    rates = [PROMPT / prefill(lm, ids) for _ in range(3)]
    print(f"{PROMPT} tokens after {PREFIX}: " + ", ".join(f"{r:.0f}" for r in rates) + " tokens a second")
    prefill(lm, ids, profile=True)


if __name__ == "__main__":
    main()
