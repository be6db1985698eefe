"""``python -m active_rag.kernels.bench``: GB/s of the decode kernels against torch's on the 1.5B model's layer shapes.

A decode step streams every weight once, so a kernel's figure of merit is the bytes of weights (and scales) it reads
per second, set against the machine's copy bandwidth (STREAM's convention: bytes read plus bytes written). Each
shape's weights are replicated until they fill several times the last-level cache, and the calls rotate over the
copies, so every call reads its weights from memory as a model's layers do (a single layer called in a loop would
be served from the cache and flatter every kernel).

Shapes: Qwen2.5-1.5B's MLP (8960 x 1536 gate/up, 1536 x 8960 down) and its output head (151936 x 1536), at 1 row (a
decode step) and 8 rows (the batch-8 step), with ``--threads`` threads (2 by default).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from . import available, default_isa, int4_gemm, int8_gemm, pack_int4, pack_int8

SHAPES = ((8960, 1536, "MLP gate/up"), (1536, 8960, "MLP down"), (151936, 1536, "output head"))
"""``(out_features, in_features, name)`` of Qwen2.5-1.5B's largest layers."""

STREAM_BYTES = 256 * 2**20
"""Bytes of weights each shape rotates over: several times a server's last-level cache."""


def _torch_int4(codes: torch.Tensor, step: torch.Tensor, zero: torch.Tensor) -> tuple[Callable[[torch.Tensor], torch.Tensor], int]:
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.to(torch.int32), 1)
    scales_and_zeros = torch.stack([step.t(), zero.t()], dim=-1).to(torch.bfloat16).contiguous()
    size = packed.numel() * packed.element_size() + scales_and_zeros.numel() * 2
    return (lambda x: torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, 32, scales_and_zeros)), size


def _ours_int4(codes: torch.Tensor, step: torch.Tensor, zero: torch.Tensor) -> tuple[Callable[[torch.Tensor], torch.Tensor], int]:
    tiles, scales = pack_int4(codes, step, zero)
    n = codes.shape[0]
    return (lambda x: int4_gemm(x, tiles, scales, n)), tiles.numel() + scales.numel() * 2


def _torch_int8(q: torch.Tensor, s: torch.Tensor) -> tuple[Callable[[torch.Tensor], torch.Tensor], int]:
    q, scales = q.contiguous(), s.to(torch.bfloat16)
    return (lambda x: torch.ops.aten._weight_int8pack_mm(x, q, scales)), q.numel() + scales.numel() * 2


def _ours_int8(q: torch.Tensor, s: torch.Tensor) -> tuple[Callable[[torch.Tensor], torch.Tensor], int]:
    tiles, scales = pack_int8(q), s.float().contiguous()
    n = q.shape[0]
    return (lambda x: int8_gemm(x, tiles, scales, n)), tiles.numel() + scales.numel() * 4


def _layers(kind: str, out_features: int, in_features: int, ours: bool, copies: int) -> tuple[list[Callable[[torch.Tensor], torch.Tensor]], int]:
    calls, size = [], 0
    for _ in range(copies):
        if kind == "int4":
            codes = torch.randint(0, 16, (out_features, in_features), dtype=torch.uint8)
            step = (torch.rand(out_features, in_features // 32) * 0.01).to(torch.bfloat16).float()
            zero = (torch.randn(out_features, in_features // 32) * 0.01).to(torch.bfloat16).float()
            call, size = (_ours_int4 if ours else _torch_int4)(codes, step, zero)
        else:
            q = torch.randint(-127, 128, (out_features, in_features), dtype=torch.int8)
            s = torch.rand(out_features) * 0.01
            call, size = (_ours_int8 if ours else _torch_int8)(q, s)
        calls.append(call)
    return calls, size


def _seconds_per_call(calls: list[Callable[[torch.Tensor], torch.Tensor]], x: torch.Tensor, passes: int) -> float:
    """The best of ``passes`` rotations through every copy, per call (the best: other processes on the machine only
    ever slow a pass down)."""
    for call in calls:  # warm up (and page in) every copy
        call(x)
    times = []
    for _ in range(passes):
        started = time.perf_counter()
        for call in calls:
            call(x)
        times.append((time.perf_counter() - started) / len(calls))
    return min(times)


def copy_gbs() -> float:
    """The machine's copy bandwidth in GB/s (bytes read + written, best of 5 copies of 512 MiB)."""
    a = torch.ones(512 * 2**20 // 4)
    b = torch.empty_like(a)
    b.copy_(a)
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        b.copy_(a)
        best = min(best, time.perf_counter() - started)
    return 2 * a.numel() * 4 / best / 1e9


def run(threads: int = 2, rows: tuple[int, ...] = (1, 8), passes: int = 5, shapes: tuple[tuple[int, int, str], ...] = SHAPES,
        print_row: Callable[[str], None] = print) -> list[dict[str, float | int | str]]:
    """Measure and print a Markdown table; return its rows."""
    if not available():
        raise SystemExit("The active-rag kernel is not built or not usable here (python -m active_rag.kernels.build).")
    torch.set_num_threads(threads)
    copy = copy_gbs()
    print_row(f"threads {threads}, kernel {default_isa()}, torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()}), "
              f"copy bandwidth {copy:.1f} GB/s\n")
    print_row("| layer | out x in | weights | rows | torch ms | torch GB/s | active-rag ms | active-rag GB/s | speed-up | of copy bw |")
    print_row("|---|---|---|---|---|---|---|---|---|---|")
    results: list[dict[str, float | int | str]] = []
    for out_features, in_features, name in shapes:
        for kind in ("int4", "int8"):
            per_copy = out_features * in_features // (2 if kind == "int4" else 1)
            copies = max(1, -(-STREAM_BYTES // per_copy))
            measured = {}
            for ours in (False, True):
                calls, size = _layers(kind, out_features, in_features, ours, copies)
                for n_rows in rows:
                    x = torch.randn(n_rows, in_features).to(torch.bfloat16)
                    seconds = _seconds_per_call(calls, x, passes)
                    measured[(ours, n_rows)] = (seconds, size / seconds / 1e9)
                del calls
            for n_rows in rows:
                (t_s, t_gbs), (o_s, o_gbs) = measured[(False, n_rows)], measured[(True, n_rows)]
                row = {"layer": name, "out": out_features, "in": in_features, "weights": kind, "rows": n_rows,
                       "torch_ms": 1e3 * t_s, "torch_gbs": t_gbs, "ours_ms": 1e3 * o_s, "ours_gbs": o_gbs, "copy_gbs": copy}
                results.append(row)
                print_row(f"| {name} | {out_features} x {in_features} | {kind} | {n_rows} | {1e3 * t_s:.2f} | {t_gbs:.1f} | "
                          f"{1e3 * o_s:.2f} | {o_gbs:.1f} | {t_s / o_s:.2f}x | {o_gbs / copy:.0%} |")
    return results


def main(argv: list[str] | None = None) -> int:
    """``python -m active_rag.kernels.bench [--threads 1,2] [--rows 1,8] [--out FILE]``: one table per thread count,
    printed and, with ``--out``, appended to ``FILE`` (Markdown)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--threads", default="2", help="comma-separated thread counts (default 2)")
    parser.add_argument("--rows", default="1,8", help="comma-separated row counts (default 1,8)")
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--no-head", action="store_true", help="skip the 151936 x 1536 output head")
    parser.add_argument("--out", default=None, help="append the tables to this Markdown file")
    args = parser.parse_args(argv)
    shapes = tuple(s for s in SHAPES if not (args.no_head and s[0] > 100_000))
    lines: list[str] = []

    def emit(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    for threads in (int(t) for t in args.threads.split(",")):
        run(threads, tuple(int(r) for r in args.rows.split(",")), args.passes, shapes, emit)
        emit("")
    if args.out:
        with open(args.out, "a", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
