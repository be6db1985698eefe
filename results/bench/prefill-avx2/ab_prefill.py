"""A/B of two builds of the kernel library on a 939-token prefill, in alternating processes.

``python results/bench/prefill-avx2/ab_prefill.py MODEL LIB_A LIB_B [LIB_C ...] [ROUNDS]``: each round runs one
process per library (in the order given), each loading MODEL with ``mixed`` weights on 2 threads and printing the best of 3 prefills'
tokens a second (the prefix cache off), so both builds see the same minutes of a shared machine. A library is a
``libactive_rag_kernels.so`` under ``.venv/share/active-rag/kernels/<key>/`` (``python -m active_rag.kernels.build``
writes one per source).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

CHILD = """
import json, os, sys
from pathlib import Path
import active_rag.kernels.build as build  # before torch: active_rag sets OMP_WAIT_POLICY=PASSIVE, as for a user
import torch
build.find_library = lambda *a, **k: Path(os.environ["AB_LIBRARY"])
from active_rag.decoding.model import ActiveLM
from active_rag.evaluation.bench_weights import _prefill_prompt, prefill_tokens_per_s
torch.set_num_threads(2)
lm = ActiveLM.load(sys.argv[1], weights="mixed", device="cpu")
ids = _prefill_prompt(lm, 939)
lm.session(list(ids))
print("AB " + json.dumps(prefill_tokens_per_s(lm, ids, 3)))
"""


def main(model: str, libraries: list[str], rounds: int) -> None:
    seen: dict[str, list[float]] = {lib: [] for lib in libraries}
    for r in range(rounds):
        for lib in libraries:
            out = subprocess.run([sys.executable, "-c", CHILD, model], env={**os.environ, "AB_LIBRARY": lib},
                                 capture_output=True, text=True, check=True).stdout
            seen[lib].append(json.loads(next(line for line in out.splitlines() if line.startswith("AB "))[3:]))
            print(f"round {r + 1}: {lib}: {seen[lib][-1]:.1f} tok/s", flush=True)
    for lib, values in seen.items():
        print(f"{lib}: median {statistics.median(values):.1f} tok/s, best {max(values):.1f} ({', '.join(f'{v:.1f}' for v in values)})")


if __name__ == "__main__":
    rest = sys.argv[2:]
    rounds = int(rest.pop()) if rest and rest[-1].isdigit() else 3
    main(sys.argv[1], rest, rounds)
