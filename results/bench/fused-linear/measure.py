"""Every packed layer of a model once at batch 1, as its decode forward is now (one op: input and output rounding
and the bias in active-rag's kernel) and as it was (the kernel, then a cast in, two casts out and a bias add).

    python results/bench/fused-linear/measure.py qwen2.5-coder-1.5b

Interleaved, 15 passes each after 3 warm-up passes; medians. Needs the kernel built (make setup)."""

from __future__ import annotations

import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from active_rag import ActiveLM, kernels
from active_rag.models import quantized as Q


def unfused(layer: Q.PackedLinear, x: torch.Tensor) -> torch.Tensor:
    """``PackedLinear.forward``'s decode path before the fused op, as it was."""
    shape = x.shape
    rows = x.reshape(-1, layer.in_features)
    limit = layer.packed_max_rows
    assert limit is None or rows.shape[0] <= limit
    layer.packed_calls += 1
    out = layer._kernel(rows.to(Q.KERNEL_DTYPE).contiguous())
    out = out.to(Q.KERNEL_DTYPE).to(x.dtype)
    if layer.bias is not None:
        out = out + layer.bias.to(x.dtype)
    return out.reshape(*shape[:-1], layer.out_features)


def main(name: str) -> None:
    torch.set_num_threads(2)
    assert kernels.available(), "the active-rag kernel is not built or not used: run make setup"
    lm = ActiveLM.load(name, weights="mixed", prefix_cache=False)
    layers = [m for m in lm.model.modules() if isinstance(m, Q.PackedLinear)]
    xs = [torch.randn(1, layer.in_features) for layer in layers]
    for layer, x in zip(layers, xs):
        assert torch.equal(layer(x), unfused(layer, x)), "the fused op must give the unfused values"

    def once(forward) -> float:
        start = time.perf_counter()
        with torch.inference_mode():
            for layer, x in zip(layers, xs):
                forward(layer, x)
        return (time.perf_counter() - start) * 1000

    times: dict[str, list[float]] = {"fused": [], "unfused": []}
    for _ in range(3):
        once(Q.PackedLinear.forward), once(unfused)
    for _ in range(15):
        times["fused"].append(once(Q.PackedLinear.forward))
        times["unfused"].append(once(unfused))
    f, u = statistics.median(times["fused"]), statistics.median(times["unfused"])
    print(f"{name}: {len(layers)} packed layers once at batch 1: fused {f:.1f} ms, unfused {u:.1f} ms "
          f"({f / u:.3f}x; {u - f:.1f} ms less a step); identical outputs")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "qwen2.5-coder-1.5b")
