"""A decode step's small ops in active-rag's kernels' library against torch's: ``python results/bench/step-ops/measure.py``.

1. Per call, the models' shapes (qwen2.5-coder-0.5b: width 896, 14 query heads and 2 key/value heads of 64; 1.5B:
   1536, 12 and 2 of 128; a vocabulary of 151,936), float32, 2 threads, in a thread other than the main one (as the
   engine decodes); microseconds a call, best of 5 runs: a residual add and RMS norm (torch's add and ``rms_norm``
   against ``add_rms_norm``), the heads' rotation (the step's views, transposes and four ops a tensor against
   ``rope_heads``) and a greedy step's token, log-probability and entropy (torch's ops against ``greedy_summary``);
   whether the first two give torch's bits and how far the third is from a float64 computation.
2. Through the engine (``mixed`` weights, 2 threads, a 900-token prompt, batch 1 and 8): ms a decode step with
   torch's small ops (the step built without the kernels' norm and rotation ops, ``ACTIVE_RAG_DECODE_ATTENTION=grouped``,
   ``ACTIVE_RAG_STEP_SUMMARY=torch``) and with the kernels' ops, each in its own process (the ops are chosen when the
   step is built), alternating, 3 processes each (5 runs of 24 steps, medians), and whether the 128 greedy tokens
   of batch 1 are the same."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import threading
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

ROUNDS = 3
SHAPES = {"0.5B": (896, 14, 2, 64), "1.5B": (1536, 12, 2, 128)}


def per_call_us(fn: object, calls: int = 1000) -> float:
    for _ in range(50):
        fn()  # type: ignore[operator]
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()  # type: ignore[operator]
        best = min(best, (time.perf_counter() - t0) / calls * 1e6)
    return best


def op_rows() -> None:
    from active_rag import kernels
    from active_rag.decoding.graph_step import greedy_summary
    from active_rag.decoding.lean_step import _Rotary
    from active_rag.decoding.step_norms import _LANES

    assert kernels.available(), "active-rag's kernels are not built here"
    generator = torch.Generator().manual_seed(0)
    for label, (width, heads, kv, dim) in SHAPES.items():
        for rows in (1, 8):
            x, d = torch.randn(rows, 1, width, generator=generator), torch.randn(rows, 1, width, generator=generator)
            w = torch.randn(width, generator=generator)  # a norm's weight
            lanes = next(n for n in _LANES if torch.equal(torch.ops.active_rag.rms_norm(x * 3, w, 1e-6, n),
                                                          torch.nn.functional.rms_norm(x * 3, (width,), w, 1e-6)))
            same = all(torch.equal(torch.ops.active_rag.add_rms_norm(a, b, w, 1e-6, lanes)[1],
                                   torch.nn.functional.rms_norm(a + b, (width,), w, 1e-6))
                       for a, b in ((torch.randn(rows, 1, width) * s, torch.randn(rows, 1, width)) for s in (0.1, 1, 9)))
            theirs = per_call_us(lambda: torch.nn.functional.rms_norm(x + d, (width,), w, 1e-6))
            ours = per_call_us(lambda: torch.ops.active_rag.add_rms_norm.default(x, d, w, 1e-6, lanes))
            print(f"| {label} | {rows} | add + RMS norm | {theirs:.1f} | {ours:.1f} | {ours / theirs:.2f} | "
                  f"{'same bits' if same else 'OTHER BITS'} |", flush=True)
            wide = torch.randn(rows, 1, (heads + 2 * kv) * dim, generator=generator)
            q, k = wide[..., : heads * dim], wide[..., heads * dim : (heads + kv) * dim]
            angle = torch.rand(rows, 1, dim, generator=generator) * 6
            rope = _Rotary()
            rotation = rope.prepare(angle.cos(), angle.sin())

            def step_ops() -> tuple[torch.Tensor, torch.Tensor]:
                return rope(q.view(rows, 1, -1, dim).transpose(1, 2), k.view(rows, 1, -1, dim).transpose(1, 2),
                            rotation)

            same = all(torch.equal(a, b) for a, b in zip(torch.ops.active_rag.rope_heads(q, k, rotation[0],
                                                                                         rotation[1], dim), step_ops()))
            theirs = per_call_us(step_ops)
            ours = per_call_us(lambda: torch.ops.active_rag.rope_heads.default(q, k, rotation[0], rotation[1], dim))
            print(f"| {label} | {rows} | heads and rotation | {theirs:.1f} | {ours:.1f} | {ours / theirs:.2f} | "
                  f"{'same bits' if same else 'OTHER BITS'} |", flush=True)
    for rows in (1, 8):
        logits = torch.randn(rows, 151936, generator=generator) * 4
        exact = greedy_summary(logits.double())
        torch_err = (greedy_summary(logits).double() - exact)[:, 1:].abs().max().item()
        op_err = (torch.ops.active_rag.greedy_summary(logits).double() - exact)[:, 1:].abs().max().item()
        theirs = per_call_us(lambda: greedy_summary(logits), calls=100)
        ours = per_call_us(lambda: torch.ops.active_rag.greedy_summary.default(logits, 0), calls=100)
        print(f"| vocabulary 151,936 | {rows} | token, log-probability, entropy | {theirs:.1f} | {ours:.1f} | "
              f"{ours / theirs:.2f} | from float64: torch {torch_err:.1e}, op {op_err:.1e} |", flush=True)


def engine(name: str, mode: str) -> None:
    """One process: ``mode`` ``torch`` builds the step with torch's small ops."""
    from active_rag.decoding import lean_step, step_norms
    from active_rag.decoding.model import ActiveLM

    if mode == "torch":
        step_norms._kernel_lanes = lambda module: None  # type: ignore[assignment]
        lean_step._kernel_rope = lambda rope, model: None  # type: ignore[assignment]
        os.environ["ACTIVE_RAG_DECODE_ATTENTION"] = "grouped"
        os.environ["ACTIVE_RAG_STEP_SUMMARY"] = "torch"
    torch.set_num_threads(2)
    lm = ActiveLM.load(name, weights="mixed", device="cpu")
    ids = lm.prompt_ids("Tell me a long story about the history of Python packaging. " * 40)[:900]
    from active_rag.evaluation.bench_weights import decode_step_ms

    out: list[object] = []

    def work() -> None:
        session = lm.session(ids)
        tokens = [s.id for s in session.generate(8)]
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            tokens += [s.id for s in session.generate(24)]
            times.append((time.perf_counter() - t0) / 24 * 1000)
        batch8 = statistics.median(decode_step_ms(lm, [ids] * 8, 24) for _ in range(3))
        out.extend([statistics.median(times), batch8, tokens])

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    print(f"{out[0]:.2f} {out[1]:.2f} {','.join(map(str, out[2]))}")  # type: ignore[index]


def engine_table(models: list[str]) -> None:
    print("\n| Model | batch | torch's small ops, ms a step | the kernels' ops | ratio | same greedy tokens (batch 1) |")
    print("|---|---:|---:|---:|---:|---|")
    for name in models:
        times: dict[str, list[tuple[float, float]]] = {"torch": [], "ops": []}
        tokens: dict[str, set[str]] = {"torch": set(), "ops": set()}
        for _ in range(ROUNDS):
            for mode in ("torch", "ops"):
                line = subprocess.run([sys.executable, __file__, "--engine", name, mode], check=True,
                                      capture_output=True, text=True).stdout.strip().splitlines()[-1]
                one, eight, ids = line.split(" ", 2)
                times[mode].append((float(one), float(eight)))
                tokens[mode].add(ids)
        same = len(tokens["torch"] | tokens["ops"]) == 1
        for i, batch in enumerate((1, 8)):
            t = [v[i] for v in times["torch"]]
            o = [v[i] for v in times["ops"]]
            tm, om = statistics.median(t), statistics.median(o)
            print(f"| {name} | {batch} | {tm:.1f} ({', '.join(f'{v:.1f}' for v in t)}) | {om:.1f} "
                  f"({', '.join(f'{v:.1f}' for v in o)}) | {om / tm:.2f} | {('yes' if same else 'no') if batch == 1 else ''} |",
                  flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--engine"]:
        engine(sys.argv[2], sys.argv[3])
        sys.exit(0)
    torch.set_num_threads(2)
    print("| shape | rows | op | torch us | kernels' op us | ratio | outputs |")
    print("|---|---:|---|---:|---:|---:|---|")
    worker = threading.Thread(target=op_rows)
    worker.start()
    worker.join()
    engine_table(sys.argv[1:] or ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
