"""An ``active-rag eval`` with the wall time of its prefills and batched decode steps added up:
``python results/bench/prefill-bound/eval_timing.py eval --dataset hotpotqa ...`` (the CLI's arguments).

Prefill: each call of a session's forward over more than one token (it holds the model's lock; other sessions wait).
Decode: each batched step of the scheduler, including its wait for that lock, so the two overlap and their sum can
pass the wall time. Printed to stderr at exit as ``TIMING``."""

from __future__ import annotations

import active_rag  # noqa: F401  (before torch)

import atexit
import sys
import threading
import time
from collections import Counter, defaultdict

from active_rag.decoding import decode_scheduler, model

_LOCK = threading.Lock()
_SECONDS: defaultdict[str, float] = defaultdict(float)
_CALLS: Counter[str] = Counter()
_TOKENS: Counter[str] = Counter()
_START = time.perf_counter()


def _count(kind: str, seconds: float, tokens: int) -> None:
    with _LOCK:
        _SECONDS[kind] += seconds
        _CALLS[kind] += 1
        _TOKENS[kind] += tokens


_session_forward = model.DecodingSession._forward
_scheduler_forward = decode_scheduler.DecodeScheduler._forward


def _timed_session_forward(self, new_ids, capture, *, alone=False):  # type: ignore[no-untyped-def]
    if len(new_ids) < 2:
        return _session_forward(self, new_ids, capture, alone=alone)
    start = time.perf_counter()
    try:
        return _session_forward(self, new_ids, capture, alone=alone)
    finally:
        _count("prefill", time.perf_counter() - start, len(new_ids))


def _timed_scheduler_forward(self, batch):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    try:
        return _scheduler_forward(self, batch)
    finally:
        _count("decode", time.perf_counter() - start, len(batch))


def _report() -> None:
    parts = [f"{kind} {_SECONDS[kind]:.1f} s, {_CALLS[kind]} calls, {_TOKENS[kind]} tokens" for kind in _SECONDS]
    print(f"TIMING wall {time.perf_counter() - _START:.1f} s; " + "; ".join(parts), file=sys.stderr)


model.DecodingSession._forward = _timed_session_forward  # type: ignore[method-assign]
decode_scheduler.DecodeScheduler._forward = _timed_scheduler_forward  # type: ignore[method-assign]
atexit.register(_report)

if __name__ == "__main__":
    from active_rag.cli.commands import main

    sys.exit(main(sys.argv[1:]))
