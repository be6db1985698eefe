"""Where a 939-token prefill's time goes, and how near the CPU's multiply throughput the packed products run.

``python results/bench/prefill-avx2/profile_prefill.py [MODEL]`` (qwen2.5-coder-0.5b by default; ``mixed`` weights,
2 threads): torch's profiler over one prefill (after a warm-up), the ops by self CPU time; then the MACs the packed
layers multiplied (rows x in x out, summed over the layers the prefill ran) per second of their ops' time. Set the
second figure against ``ub`` (``ub.cpp``: vpmaddubsw and vfmadd231ps a nanosecond on one core) to read the bound.
"""

from __future__ import annotations

import sys
import time

import active_rag  # noqa: F401  (first: it sets OpenMP's PASSIVE wait policy before torch loads libgomp)
import torch
from torch.profiler import ProfilerActivity, profile

from active_rag.decoding.model import ActiveLM
from active_rag.evaluation.bench_weights import _prefill_prompt
from active_rag.models.quantized import PackedLinear


def main(model: str) -> None:
    torch.set_num_threads(2)
    lm = ActiveLM.load(model, weights="mixed", device="cpu")
    lm.prefix_cache = None
    ids = _prefill_prompt(lm, 939)
    lm.session(list(ids))
    macs: dict[str, int] = {}
    for name, module in lm.model.named_modules():
        if isinstance(module, PackedLinear) and not name.endswith("lm_head"):  # the head runs for one position
            macs[module.kind] = macs.get(module.kind, 0) + len(ids) * module.in_features * module.out_features
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        lm.session(list(ids))
    wall = time.perf_counter() - t0
    events = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in events) / 1e6
    print(f"{model}: {len(ids)} tokens in {wall:.2f} s under the profiler ({len(ids) / wall:.0f} tok/s); "
          f"ops' self time {total:.2f} s")
    for e in events[:12]:
        print(f"  {e.key:45s} {e.self_cpu_time_total / 1e6:7.3f} s  {100 * e.self_cpu_time_total / 1e6 / total:5.1f}%  x{e.count}")
    packed = sum(e.self_cpu_time_total for e in events if e.key.startswith("active_rag::")
                 and ("gemm" in e.key or "linear" in e.key)) / 1e6
    all_macs = sum(macs.values())
    print(f"packed layers' MACs {all_macs / 1e9:.2f} G ({', '.join(f'{k} {v / 1e9:.2f} G' for k, v in macs.items() if v)}); "
          f"their ops {packed:.2f} s: {all_macs / packed / 1e9:.0f} MAC/ns on 2 threads")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "qwen2.5-coder-0.5b")
