"""Ragged attention bench: one batched decode step with the per-sequence attention loop against the padded
call (:mod:`active_rag.decoding.ragged_attention`), at several batch sizes, in one run, reported as ratios.

    python -m active_rag.evaluation.bench_ragged --model smollm2 --batch-sizes 8 32 --out results/bench/ragged-smollm2

For each batch size ``B``: ``B`` sessions whose prompts have different lengths (``--min-tokens`` to
``--max-tokens``, evenly spread, so the padding wastes what a real batch wastes) are prefilled; then, in rounds,
every mode (``loop``, ``padded``, ``auto``) advances all ``B`` sequences by one token through the decode scheduler's
batched forward (the same call a serving batch makes), in an order that alternates between rounds so that both
see the same cache lengths and machine load. Reported: median milliseconds per step per mode, the ratio
``loop / padded`` (above 1: padding is faster) and the path ``auto`` takes there; the captured layer's rows are on
(DRAGIN's case) unless ``--no-capture``. The sequences' greedy tokens are checked identical between the modes. Timing uses one torch
thread unless ``--threads`` (the machine is shared; a ratio taken in one run is what carries over).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MODES = ("loop", "padded")


@dataclass
class RaggedRow:
    batch: int
    min_tokens: int
    max_tokens: int
    steps: int
    ms: dict[str, float] = field(default_factory=dict)
    loop_over_padded: float = 0.0
    auto_path: str = ""
    same_tokens: bool = True


def _prompt(lm: Any, n: int, seed: int) -> list[int]:
    """``n`` token ids of plain text (the bundled demo corpus' words), different per ``seed``."""
    words = ("Peter Schmeichel was voted the IFFHS World's Best Goalkeeper in 1992 and 1993 . His son Kasper plays "
             "for Denmark . Ed Wood was an American filmmaker and Scott Derrickson is a director .").split()
    text = " ".join(words[(seed * 7 + i) % len(words)] for i in range(n * 2))
    return lm.encode(text)[:n]


def _step(scheduler: Any, sessions: Sequence[Any], tokens: Sequence[int], capture: bool) -> tuple[float, list[int]]:
    """One batched forward advancing every session by its token; seconds and the next greedy tokens."""
    from active_rag.decoding.decode_scheduler import _Request

    requests = [_Request(s._cache, int(t), s._fed, capture) for s, t in zip(sessions, tokens, strict=True)]
    start = time.perf_counter()
    scheduler._run(requests)
    seconds = time.perf_counter() - start
    for s, r in zip(sessions, requests, strict=True):
        if r.error is not None:
            raise r.error
        s._fed += 1
    return seconds, [int(r.logits.argmax()) for r in requests]  # type: ignore[union-attr]


def bench_batch(lm: Any, batch: int, *, min_tokens: int, max_tokens: int, steps: int, capture: bool) -> RaggedRow:
    """The row of one batch size (see the module docstring)."""
    from active_rag.decoding.ragged_attention import use_padded

    scheduler = lm.scheduler
    lengths = [min_tokens + (max_tokens - min_tokens) * i // max(batch - 1, 1) for i in range(batch)]
    sessions = {mode: [lm.session(_prompt(lm, n, i)) for i, n in enumerate(lengths)] for mode in MODES}
    tokens = {mode: [int(s._next_logits.argmax()) for s in sessions[mode]] for mode in MODES}
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    history: dict[str, list[list[int]]] = {mode: [] for mode in MODES}
    for step in range(steps + 1):  # step 0 warms every path up
        order = MODES if step % 2 == 0 else tuple(reversed(MODES))
        for mode in order:
            scheduler.attention = mode
            seconds, tokens[mode] = _step(scheduler, sessions[mode], tokens[mode], capture)
            history[mode].append(tokens[mode])
            if step:
                times[mode].append(seconds)
    scheduler.attention = "auto"
    probe = type("Probe", (), {"_active_rag_inner": "sdpa"})()
    from active_rag.decoding.ragged_attention import RaggedBatch

    auto = use_padded(probe, RaggedBatch(caches=[None] * batch, capture=[False] * batch), [n + steps for n in lengths],  # type: ignore[arg-type]
                      lm.device.type)
    ms = {mode: 1000 * statistics.median(times[mode]) for mode in MODES}
    return RaggedRow(batch=batch, min_tokens=min_tokens, max_tokens=max_tokens, steps=steps, ms=ms,
                     loop_over_padded=ms["loop"] / ms["padded"], auto_path="padded" if auto else "loop",
                     same_tokens=history["loop"] == history["padded"])


def format_table(rows: Sequence[RaggedRow]) -> str:
    lines = ["| batch | prompt tokens | loop ms/step | padded ms/step | loop / padded | auto takes | same greedy tokens |",
             "|---:|---|---:|---:|---:|---|---|"]
    for r in rows:
        lines.append(f"| {r.batch} | {r.min_tokens}-{r.max_tokens} | {r.ms['loop']:.1f} | {r.ms['padded']:.1f} | "
                     f"{r.loop_over_padded:.2f}x | {r.auto_path} | {'yes' if r.same_tokens else 'NO'} |")
    return "\n".join(lines)


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--min-tokens", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-capture", action="store_true")
    parser.add_argument("--weights", default="auto")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, ...: where to measure")
    parser.add_argument("--dtype", default=None, help="default: float32 on the CPU, bfloat16 on a CUDA GPU")
    parser.add_argument("--out", type=Path, default=None, help="writes OUT.json and OUT.md")
    args = parser.parse_args(argv)

    import torch

    from active_rag.decoding.model import ActiveLM

    torch.set_num_threads(args.threads)
    lm = ActiveLM.load(args.model, device=args.device, dtype=args.dtype, weights=args.weights, prefix_cache=False,
                       max_batch=max(args.batch_sizes))
    rows = [bench_batch(lm, b, min_tokens=args.min_tokens, max_tokens=args.max_tokens, steps=args.steps,
                        capture=not args.no_capture) for b in args.batch_sizes]
    report = {
        "bench": "ragged-attention",
        "model": args.model,
        "weights": lm.weights,
        "dtype": str(lm.dtype),
        "device": str(lm.device),
        "threads": args.threads,
        "capture": not args.no_capture,
        "machine": f"{platform.machine()}, {platform.processor() or platform.system()}",
        "torch": torch.__version__,
        "command": "python -m active_rag.evaluation.bench_ragged " + " ".join(argv or []),
        "rows": [asdict(r) for r in rows],
    }
    table = format_table(rows)
    print(table)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
        args.out.with_suffix(".md").write_text(
            f"# Ragged attention: per-sequence loop vs one padded call\n\n{args.model} ({lm.weights} weights, {lm.dtype}) on "
            f"{lm.device}, {args.threads} torch thread(s), attention capture {'on' if not args.no_capture else 'off'}, median of "
            f"{args.steps} steps.\n\n`{report['command']}`\n\n{table}\n")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    import sys

    report = run(sys.argv[1:] if argv is None else argv)
    return 0 if all(r["same_tokens"] for r in report["rows"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
