"""Where an `eval` of `sr-rag-choose` spends its time: a py-spy raw profile (README.md) summed by what each sample was
doing. Samples of threads that wait (a condition, an event, the model lock, a yield) are left out; since prefills and
decode steps run one at a time under the model lock, the prefill and decode shares are shares of the model's time.

    python results/bench/sr-rag-choose-profile/aggregate.py PROFILE.txt
"""

from __future__ import annotations

import sys
from collections import Counter

WAITING = {"Condition.wait", "Event.wait", "wait", "PyThread_acquire_lock_timed", "pthread_cond_timedwait"}


def prefill_part(stack: str, names: list[str]) -> str:
    """The part of a prefill a sample is in (oneDNN's JIT code has no symbols: its samples end in a packed layer's
    ``_dense``)."""
    if any(k in stack for k in ("int4_row_avx512", "int8_row_avx512", "dequant", "_dense_weight", "int8_unpack")):
        return "dequantisation"
    if any(k in stack for k in ("flash_attention", "sgemm", "scaled_dot_product")):
        return "attention (float32)"
    if "_dense" in stack and ("dnnl" in stack or "brgemm" in stack or names[-1].endswith("_dense")
                              or (names[-1].startswith("0x") and any(n.endswith("_dense") for n in names[-3:]))):
        return "bfloat16 products (oneDNN)"
    if "reduced_float_copy" in stack or "copy_" in stack:
        return "float32/bfloat16 conversions"
    if any(k in stack for k in ("silu", "mul_kernel", "add_kernel")):
        return "elementwise (SiLU, products, sums)"
    if "norm" in stack.lower():
        return "norms"
    if "rotary" in stack.lower() or "rope" in stack.lower():
        return "rotary"
    return "other"


def main(path: str) -> None:
    kind: Counter[str] = Counter()
    part: Counter[str] = Counter()
    for line in open(path, encoding="utf-8"):
        stack, _, count = line.rstrip().rpartition(" ")
        names = [f.split(" (")[0] for f in stack.split(";")]
        if WAITING.intersection(names) or "sched_yield" in names[-1]:
            continue
        joined = ";".join(names)
        if "DecodingSession.__post_init__" in joined:
            kind["prefill"] += int(count)
            part[prefill_part(joined, names)] += int(count)
        elif "DecodeScheduler._forward" in joined:
            kind["decode steps"] += int(count)
        elif len(names) > 3:
            kind["outside the model (retrieval, names, tokenizer, answers)"] += int(count)
    total = sum(kind.values())
    print("| Where | samples | share |\n|---|---:|---:|")
    for k, v in kind.most_common():
        print(f"| {k} | {v} | {100 * v / total:.1f}% |")
    prefill = kind["prefill"]
    print("\n| Prefill: where | samples | share of prefill |\n|---|---:|---:|")
    for k, v in part.most_common():
        print(f"| {k} | {v} | {100 * v / prefill:.1f}% |")


if __name__ == "__main__":
    main(sys.argv[1])
