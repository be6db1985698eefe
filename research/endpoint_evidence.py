"""The server against the local engine, from evaluation rows (the endpoint evidence).

``active-rag eval --endpoint URL`` writes its rows to ``<dir>/b<B>/<dataset>/<model>-endpoint/`` beside the local
engine's ``<dir>/b<B>/<dataset>/<model>/`` (``--out <dir>/b<B>`` for batch size ``B``). For every method and batch
size this reads both and reports, on the questions both answered:

- F1 of each, the paired difference (server - local) with its 95% bootstrap interval;
- how many retrieval decisions agree: the **first check** (fired or not: the first look-ahead is written from the
  same prompt by both, so only the weights and the server's numerics differ), the **number of retrievals**, and
  every retrieval identical (position, query and passages, :func:`~active_rag.evaluation.bench_weights.agreement`);
  identical extracted answers;
- seconds per question (``amortized_s``: wall time shared by the questions in flight).

``python research/endpoint_evidence.py --dir results/endpoint-evidence`` prints the table as markdown.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["endpoint_evidence", "format_evidence"]


def _first_fired(row: dict[str, Any]) -> bool | None:
    segments = row.get("segments") or []
    return bool(segments[0].get("fired")) if segments else None


def endpoint_evidence(root: Path, dataset: str, model: str, methods: Sequence[str],
                      batch_sizes: Sequence[int]) -> list[dict[str, Any]]:
    """One dict per (batch size, method) with both rows present (see the module docstring)."""
    from active_rag.evaluation.bench_weights import _rows, agreement

    out = []
    for b in batch_sizes:
        local_dir = root / f"b{b}" / dataset / model
        server_dir = root / f"b{b}" / dataset / f"{model}-endpoint"
        for method in methods:
            local, server = _rows(local_dir / f"{method}.jsonl"), _rows(server_dir / f"{method}.jsonl")
            both = [i for i in local if i in server]
            if not both:
                continue
            agree = agreement(local_dir, server_dir, [method], both, len(both), len(both))[method]
            checked = [i for i in both if _first_fired(local[i]) is not None or _first_fired(server[i]) is not None]
            out.append({
                "batch_size": b,
                "method": method,
                **agree,
                # None: the method never checks (sr-rag retrieves once, before the first token)
                "same_first_check": sum(_first_fired(local[i]) == _first_fired(server[i]) for i in checked) if checked else None,
                "same_retrievals": sum(local[i]["metrics"].get("retrievals") == server[i]["metrics"].get("retrievals")
                                       for i in both),
                "retrievals_local": statistics.fmean(float(local[i]["metrics"].get("retrievals", 0)) for i in both),
                "retrievals_server": statistics.fmean(float(server[i]["metrics"].get("retrievals", 0)) for i in both),
            })
    return out


def format_evidence(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as a markdown table."""
    lines = [
        "| Batch | Method | n | F1 local | F1 server | Server - local [95% CI] | Same answer | Same first check "
        "| Same no. of retrievals | All retrievals identical | Ret/q local / server | s/q local | s/q server | server / local |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        n = r["questions"]
        ratio = r["seconds_per_question"] / r["seconds_per_question_float32"]
        first_check = "-" if r["same_first_check"] is None else f"{r['same_first_check']}/{n}"
        lines.append(
            f"| {r['batch_size']} | {r['method']} | {n} | {r['f1_float32']:.1f} | {r['f1']:.1f} | "
            f"{r['f1_difference']:+.1f} [{r['f1_low']:+.1f}, {r['f1_high']:+.1f}] | {r['same_answer']}/{n} | "
            f"{first_check} | {r['same_retrievals']}/{n} | {r['same_decisions']}/{n} | "
            f"{r['retrievals_local']:.2f} / {r['retrievals_server']:.2f} | {r['seconds_per_question_float32']:.1f} | "
            f"{r['seconds_per_question']:.1f} | {ratio:.2f}x |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python research/endpoint_evidence.py", description=__doc__.split("\n")[0])
    parser.add_argument("--dir", type=Path, required=True, help="the folder holding b1/, b8/, ... (eval --out)")
    parser.add_argument("--dataset", default="hotpotqa")
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--methods", default="flare,sr-rag")
    parser.add_argument("--batch-sizes", default="1,8")
    args = parser.parse_args(argv)
    if not args.dir.is_dir():
        parser.error(f"--dir {str(args.dir)!r} is not a folder: give the --out folder of the eval runs")
    rows = endpoint_evidence(args.dir, args.dataset, args.model, args.methods.split(","),
                             [int(b) for b in args.batch_sizes.split(",")])
    if not rows:
        parser.error(f"no method has both local and server rows under {args.dir}: run the evaluations first")
    print(format_evidence(rows))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
