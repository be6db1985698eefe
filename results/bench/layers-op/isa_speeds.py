"""Each packed layer kind of qwen2.5-coder-1.5b ``mixed`` on the kernels' AVX2 and AVX512-VNNI paths, batch 1:
``python results/bench/layers-op/isa_speeds.py`` (2 threads, in a thread other than the main one; microseconds a call
and GB/s of its tiles and scales, the mean over the model's layers of that kind, 5 rounds after 3 of warm-up)."""

import os
import threading
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import active_rag  # noqa: F401 - before torch: OpenMP's passive wait policy
import torch

torch.set_num_threads(2)
from active_rag import kernels
from active_rag.models.quantized import PackedLinear
from active_rag.decoding.model import ActiveLM
lm = ActiveLM.load("qwen2.5-coder-1.5b", weights="mixed", device="cpu")
mods = {}
for n, m in lm.model.named_modules():
    if isinstance(m, PackedLinear) and m.uses_kernel:
        key = (m.kind, n.split(".")[-1])
        mods.setdefault(key, []).append(m)
out = {}
def work():
    for key, ms in sorted(mods.items()):
        m = ms[0]
        b = sum(t.numel()*t.element_size() for t in (m._buffers["tiles"], m._buffers[m._scales_buffer]))
        x = torch.randn(1, m.in_features)
        res = []
        for isa in ("avx2", "avx512-vnni"):
            op, code = kernels.linear_op(m.kind, isa)
            layers = ms[:min(len(ms), 28)]
            for _ in range(3):
                for l in layers: op(x, l._buffers["tiles"], l._buffers[l._scales_buffer], l.out_features, l._parameters.get("bias"), code)
            t0 = time.perf_counter(); reps = 5
            for _ in range(reps):
                for l in layers: op(x, l._buffers["tiles"], l._buffers[l._scales_buffer], l.out_features, l._parameters.get("bias"), code)
            dt = (time.perf_counter() - t0) / reps / len(layers)
            res.append(f"{isa} {dt*1e6:.0f} us {b/dt/1e9:.1f} GB/s")
        print(key, len(ms), f"{b/1e6:.1f} MB", " | ".join(res), flush=True)
t = threading.Thread(target=work); t.start(); t.join()
