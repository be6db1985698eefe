"""Each packed layer kind of a ``mixed`` model in a prefill-sized call (939 rows, as the bench's prompt), on the
kernels' AVX512-VNNI path: ``python results/bench/prefill-avx512/layer_speeds.py [MODEL] [ROWS]`` (2 threads; the mean
over the model's layers of that kind, best of 3 rounds after one of warm-up), in milliseconds a call and multiply-adds
a nanosecond, beside the sum over a forward's layers."""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import active_rag  # noqa: F401 - before torch: OpenMP's passive wait policy, as the command line runs

import torch

from active_rag import kernels
from active_rag.decoding.model import ActiveLM
from active_rag.models.quantized import PackedLinear


def main() -> None:
    model = sys.argv[1] if len(sys.argv) > 1 else "qwen2.5-coder-1.5b"
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 939
    isa = sys.argv[3] if len(sys.argv) > 3 else "avx512-vnni"
    torch.set_num_threads(2)
    lm = ActiveLM.load(model, weights="mixed", device="cpu")
    kinds: dict[tuple[str, str], list[PackedLinear]] = {}
    for name, module in lm.model.named_modules():
        if isinstance(module, PackedLinear) and module.uses_kernel and "lm_head" not in name:
            kinds.setdefault((module.kind, name.split(".")[-1]), []).append(module)
    total_s = total_mac = 0.0
    for (kind, name), layers in sorted(kinds.items()):
        op, code = kernels.linear_op(kind, isa)
        x = torch.randn(rows, layers[0].in_features)
        best = float("inf")
        for round_ in range(4):
            t0 = time.perf_counter()
            for layer in layers:
                op(x, layer._buffers["tiles"], layer._buffers[layer._scales_buffer], layer.out_features,
                   layer._parameters.get("bias"), code)
            if round_:
                best = min(best, (time.perf_counter() - t0) / len(layers))
        mac = rows * layers[0].in_features * layers[0].out_features
        total_s += best * len(layers)
        total_mac += mac * len(layers)
        print(f"{kind:5s} {name:10s} x{len(layers):2d} {layers[0].in_features:5d}->{layers[0].out_features:5d} "
              f"{best * 1e3:7.2f} ms {mac / best / 1e9:6.1f} MAC/ns", flush=True)
    print(f"all layers: {total_s * 1e3:.0f} ms a forward of {rows} rows, {total_mac / total_s / 1e9:.1f} MAC/ns "
          f"({rows / total_s:.0f} tokens a second if nothing else ran)")


if __name__ == "__main__":
    main()
