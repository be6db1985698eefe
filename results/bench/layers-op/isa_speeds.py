"""Each packed layer kind of qwen2.5-coder-1.5b ``mixed`` on the kernels' AVX2 and AVX512-VNNI paths, batch 1:
``python results/bench/layers-op/isa_speeds.py`` (2 threads, in a thread other than the main one; microseconds a call
and GB/s of its tiles and scales, the mean over the model's layers of that kind, 5 rounds after 3 of warm-up)."""

from __future__ import annotations

import os
import threading
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import active_rag  # noqa: F401 - before torch: OpenMP's passive wait policy, as the command line runs

import torch

from active_rag import kernels
from active_rag.decoding.model import ActiveLM
from active_rag.models.quantized import PackedLinear

ISAS = ("avx2", "avx512-vnni")


def seconds_a_call(layers: list[PackedLinear], isa: str, x: torch.Tensor, rounds: int) -> float:
    """Each layer's decode op on ``isa`` once a round; the mean seconds a call."""
    op, code = kernels.linear_op(layers[0].kind, isa)
    t0 = time.perf_counter()
    for _ in range(rounds):
        for layer in layers:
            op(x, layer._buffers["tiles"], layer._buffers[layer._scales_buffer], layer.out_features,
               layer._parameters.get("bias"), code)
    return (time.perf_counter() - t0) / rounds / len(layers)


def main() -> None:
    torch.set_num_threads(2)
    lm = ActiveLM.load("qwen2.5-coder-1.5b", weights="mixed", device="cpu")
    kinds: dict[tuple[str, str], list[PackedLinear]] = {}
    for name, module in lm.model.named_modules():
        if isinstance(module, PackedLinear) and module.uses_kernel:
            kinds.setdefault((module.kind, name.split(".")[-1]), []).append(module)

    def work() -> None:
        for key, layers in sorted(kinds.items()):
            first = layers[0]
            size = sum(t.numel() * t.element_size() for t in (first._buffers["tiles"],
                                                               first._buffers[first._scales_buffer]))
            x = torch.randn(1, first.in_features)
            cells = []
            for isa in ISAS:
                seconds_a_call(layers, isa, x, 3)  # warm-up
                seconds = seconds_a_call(layers, isa, x, 5)
                cells.append(f"{isa} {seconds * 1e6:.0f} us {size / seconds / 1e9:.1f} GB/s")
            print(key, len(layers), f"{size / 1e6:.1f} MB", " | ".join(cells), flush=True)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()


if __name__ == "__main__":
    main()
