"""``active-rag bench --endpoint URL`` (the ``endpoint`` suite): seconds per question of the methods that run on an
OpenAI-compatible server, one question at a time and with many in flight (``--batch-sizes``, default 1,8: that many
concurrent requests, :meth:`ActiveRAG.run_batch`), on the bundled HotpotQA demo questions and the demo corpus.

Every number is wall-clock time on the client, server time included; ``bench.json``-style output goes to
``--out/bench-endpoint.json``. With ``--endpoint`` the default methods are wo-rag, sr-rag and flare (the overhead
suite's default, dragin, needs attention and a local model).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["cmd_bench_endpoint", "format_endpoint_table", "run_endpoint_bench"]

DEFAULT_METHODS = ("wo-rag", "sr-rag", "flare")


def run_endpoint_bench(lm: Any, methods: Sequence[str], questions: Sequence[str], batch_sizes: Sequence[int],
                       max_new_tokens: int = 64, repeats: int = 1) -> dict[str, Any]:
    """Seconds per question of every method at every batch size (the best of ``repeats``), with retrievals and
    generated tokens per question."""
    from active_rag import ActiveRAG, BM25Index
    from active_rag.components.remote_check import check_remote_method
    from active_rag.components.presets import PRESETS

    for m in methods:
        if m not in PRESETS:
            from active_rag.errors import UnknownNameError

            raise UnknownNameError("method", m, PRESETS)
        check_remote_method(PRESETS[m].trigger, PRESETS[m].query, m)
    index = BM25Index.demo()
    rows = []
    for method in methods:
        rag = ActiveRAG.from_preset(method, lm, index, max_new_tokens=max_new_tokens)
        for b in batch_sizes:
            best = None
            results: list[Any] = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                results = rag.run_batch(list(questions), batch_size=b)
                elapsed = time.perf_counter() - t0
                best = elapsed if best is None else min(best, elapsed)
            assert best is not None
            n = max(len(questions), 1)
            rows.append({
                "method": method, "batch_size": b, "questions": len(questions), "seconds": best, "s_per_q": best / n,
                "retrievals_per_q": sum(len(r.retrievals) for r in results) / n,
                "tokens_per_q": sum(r.generated_tokens for r in results) / n,
            })
    return {"suite": "endpoint", "endpoint": lm.describe(), "max_new_tokens": max_new_tokens, "rows": rows}


def format_endpoint_table(result: dict[str, Any]) -> str:
    lines = [f"Endpoint {result['endpoint']['endpoint']} (model {result['endpoint']['model']}, "
             f"{result['endpoint']['api']} API), max {result['max_new_tokens']} new tokens", "",
             "| method | batch | s/q | retrievals/q | tokens/q |", "|---|---:|---:|---:|---:|"]
    for r in result["rows"]:
        lines.append(f"| {r['method']} | {r['batch_size']} | {r['s_per_q']:.2f} | {r['retrievals_per_q']:.2f} | {r['tokens_per_q']:.1f} |")
    return "\n".join(lines)


def cmd_bench_endpoint(args: argparse.Namespace) -> int:
    """The ``endpoint`` suite from ``bench``'s flags; one-line errors, exit code 2."""
    from active_rag.errors import ActiveRAGError, InvalidOptionError
    from active_rag.evaluation.bench import bench_questions
    from active_rag.cli.model_flags import endpoint_options, given, load_endpoint
    from active_rag.validation import check_int

    try:
        options = endpoint_options(args)
        if options is None:
            raise InvalidOptionError("--suite endpoint measures a served model: add --endpoint URL.")
        methods = list(args.methods)
        if methods == ["dragin", "flare"]:  # the overhead suite's default
            methods = list(DEFAULT_METHODS)
        batch_sizes = [check_int("--batch-sizes", b, minimum=1) for b in (args.batch_sizes or [1, 8])]
        tokens = check_int("--tokens", (args.tokens or [64])[0], minimum=1)
        lm = load_endpoint(given(args.model), **options)
        result = run_endpoint_bench(lm, methods, bench_questions(args.prompts), batch_sizes, tokens, args.repeats or 1)
    except (ActiveRAGError, ValueError) as exc:
        print(f"active-rag bench: error: {exc}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "bench-endpoint.json"
    path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(format_endpoint_table(result))
    print(f"Results in {path}")
    return 0
