"""Decode with the KV cache written in place (GrowingLayer) against transformers' concatenation (DynamicLayer).

Each way runs in its own process (peak resident memory is per process): load the model, open ``--batch`` sessions
on prompts of about ``--prompt`` tokens (each a little longer than the one before) and decode ``--tokens`` tokens
together; it reports the milliseconds a step, the peak RSS after loading and at the end, and the ratios.

    python results/bench/kv-layer/measure.py --model qwen2.5-coder-0.5b --batch 8 --prompt 1400 --tokens 200
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def one(way: str, model: str, batch: int, prompt: int, tokens: int) -> dict[str, float]:
    import active_rag.decoding.model as engine
    from active_rag.decoding.model import ActiveLM
    from active_rag.evaluation.bench_weights import _prefill_prompt, decode_step_ms

    if way == "concatenate":
        from transformers import DynamicCache

        engine.growing_cache = lambda config: DynamicCache(config=config)  # transformers' own layer
    lm = ActiveLM.load(model, weights="mixed", device="cpu")
    ids = _prefill_prompt(lm, prompt + 20 * batch)
    loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    ms = decode_step_ms(lm, [ids[: prompt + 20 * i] for i in range(batch)], tokens)
    return {"step_ms": ms, "rss_loaded_mb": loaded, "rss_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "seconds": time.perf_counter() - t0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=1400)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--way", choices=("in-place", "concatenate"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.way:
        print(json.dumps(one(args.way, args.model, args.batch, args.prompt, args.tokens)))
        return 0
    rows = {}
    for way in ("concatenate", "in-place"):
        out = subprocess.run([sys.executable, __file__, "--way", way, "--model", args.model, "--batch", str(args.batch),
                              "--prompt", str(args.prompt), "--tokens", str(args.tokens)],
                             check=True, capture_output=True, text=True).stdout
        rows[way] = json.loads(out.strip().splitlines()[-1])
    print(f"{args.model} mixed, batch {args.batch}, prompts of {args.prompt}-{args.prompt + 20 * (args.batch - 1)} "
          f"tokens, {args.tokens} decode steps\n")
    print("| KV cache | ms a step | peak RSS after load (MB) | peak RSS at the end (MB) |")
    print("|---|---:|---:|---:|")
    for way, r in rows.items():
        print(f"| {way} | {r['step_ms']:.1f} | {r['rss_loaded_mb']:.0f} | {r['rss_peak_mb']:.0f} |")
    a, b = rows["concatenate"], rows["in-place"]
    print(f"\nin place / concatenate: step {b['step_ms'] / a['step_ms']:.2f}x, "
          f"peak RSS {b['rss_peak_mb'] / a['rss_peak_mb']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
