"""Load test of the Ray Serve recipe (``integrations/ray_serve_active_rag.py``): concurrent streaming clients on
127.0.0.1 for a bounded time; stops by itself.

    python integrations/ray_serve_load.py --clients 32 --seconds 120 --out results/bench/serve-load-smollm2
    python integrations/ray_serve_load.py --url http://127.0.0.1:8000/active-rag --clients 8 --seconds 30

Without ``--url`` it starts a local Ray (``--ray-cpus``), serves the recipe on a free loopback port (SmolLM2,
DRAGIN with theta 0.25, ``--max-new-tokens``), runs the load and shuts Serve and Ray down whatever happens.

Each client posts ``/stream`` requests one after the other (questions from the bundled demo corpus) until
``--seconds`` have passed, then finishes the request in flight; a request gets at most ``--request-timeout``
seconds. Every request ends as exactly one of:

- ``complete``: HTTP 200 and the stream ends with ``result`` then ``done``, no ``error`` event, the ``token``
  events join to the result's answer;
- ``error``: HTTP 200 and the stream ends with ``error`` then ``done`` (a failure the server reported clearly);
- ``refused``: an HTTP error status (503 when the replica and Ray's queue are full) with a non-empty message,
  within ``--refuse-within`` seconds; the client then waits for ``Retry-After`` (default 1 s) before its next;
- ``slow-refusal``, ``partial`` (a stream that stops without ``result``/``error`` + ``done``), ``hung`` (past
  ``--request-timeout``), ``lost`` (the connection failed): the failures this test exists to catch.

The replica's resident memory (``/proc/PID/status`` ``VmRSS``, the pid from ``/health``) is sampled every half
second. The stated bound: ``idle RSS (after one warm-up request: runtime + model) + prefix cache bound + margin``,
the margin being the KV of every request the replica runs at once at its longest (``max_ongoing x
--max-seq-tokens x KV bytes per token``) twice over (a decode step concatenates into new tensors) plus
``--slack-mb`` (allocator and Python objects). Reported: counts per outcome, latency p50/p99 (complete requests,
from sending to ``done``), time to first token p50/p99, refusal time p99, throughput (complete requests and
streamed tokens per second over the run), peak RSS against the bound. Exit status 0 when no request failed in one
of the five ways above and the bound held, else 1.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import logging
import math
import os
import socket
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

RECIPE = Path(__file__).resolve().parent / "ray_serve_active_rag.py"
QUESTIONS = [
    "What was the father of Kasper Schmeichel voted to be by the IFFHS in 1992?",
    "Who was the father of Kasper Schmeichel?",
    "Were Scott Derrickson and Ed Wood of the same nationality?",
    "What position does Kasper Schmeichel play?",
    "Which club did Peter Schmeichel play for?",
    "What year did Guns N Roses perform a promo for a movie starring Arnold Schwarzenegger?",
    "Who directed the film Ed Wood?",
    "Is Kasper Schmeichel Danish?",
]
FAILURES = ("slow-refusal", "partial", "hung", "lost")


@dataclass
class Outcome:
    kind: str
    seconds: float
    status: int | None = None
    first_token_s: float | None = None
    tokens: int = 0
    message: str = ""


@dataclass
class LoadReport:
    clients: int
    seconds: float
    wall_s: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)
    latency_p50_s: float | None = None
    latency_p99_s: float | None = None
    first_token_p50_s: float | None = None
    first_token_p99_s: float | None = None
    refusal_p99_s: float | None = None
    requests_per_s: float = 0.0
    tokens_per_s: float = 0.0
    rss_idle_mb: float | None = None
    rss_peak_mb: float | None = None
    rss_bound_mb: float | None = None
    rss_timeline_mb: list[tuple[float, float]] = field(default_factory=list)
    """``(seconds since the load started, RSS)`` every 5 s: whether memory levels off or keeps growing."""
    server: dict[str, Any] = field(default_factory=dict)
    refusal_messages: list[str] = field(default_factory=list)
    error_messages: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


def _percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0-100)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def _rss_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _events(buffer: str) -> tuple[list[tuple[str, Any]], str]:
    """Complete SSE events in ``buffer`` and the rest."""
    out: list[tuple[str, Any]] = []
    while "\n\n" in buffer:
        block, buffer = buffer.split("\n\n", 1)
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in fields:
            out.append((fields["event"], json.loads(fields.get("data", "null"))))
    return out, buffer


async def one_request(client: Any, url: str, question: str, *, timeout_s: float, refuse_within_s: float) -> Outcome:
    """Stream one answer and classify how it ended (see the module docstring)."""
    import httpx

    start = time.perf_counter()
    elapsed = lambda: time.perf_counter() - start  # noqa: E731
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream("POST", f"{url}/stream", json={"question": question}) as response:
                if response.status_code != 200:
                    body = (await response.aread()).decode("utf-8", "replace").strip()
                    kind = "refused" if body and elapsed() <= refuse_within_s else "slow-refusal"
                    return Outcome(kind, elapsed(), response.status_code, message=body[:300])
                buffer, kinds, tokens, result, first = "", [], [], None, None
                async for text in response.aiter_text():
                    events, buffer = _events(buffer + text)
                    for kind, data in events:
                        kinds.append(kind)
                        if kind == "token":
                            first = first if first is not None else elapsed()
                            tokens.append(data["token"])
                        elif kind in ("result", "error"):
                            result = data
            if kinds[-2:] == ["result", "done"] and "error" not in kinds and "".join(tokens) == (result or {}).get("answer"):
                return Outcome("complete", elapsed(), 200, first, len(tokens))
            if kinds[-2:] == ["error", "done"]:
                return Outcome("error", elapsed(), 200, first, len(tokens), str((result or {}).get("error"))[:300])
            return Outcome("partial", elapsed(), 200, first, len(tokens), f"events: {kinds[-5:]}")
    except (TimeoutError, httpx.TimeoutException):
        return Outcome("hung", elapsed(), message=f"no end after {elapsed():.0f} s")
    except httpx.HTTPError as exc:
        return Outcome("lost", elapsed(), message=f"{type(exc).__name__}: {exc}"[:300])


async def run_load(url: str, *, clients: int, seconds: float, timeout_s: float = 300.0, refuse_within_s: float = 2.0,
                   max_seq_tokens: int = 1024, slack_mb: float = 512.0) -> LoadReport:
    """The load (see the module docstring) against a served recipe at ``url``."""
    import httpx

    report = LoadReport(clients=clients, seconds=seconds)
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=10.0), limits=limits) as client:
        info = (await client.get(f"{url}/health")).json()
        warm = await one_request(client, url, QUESTIONS[0], timeout_s=timeout_s, refuse_within_s=refuse_within_s)
        if warm.kind != "complete":
            report.failures.append(f"the warm-up request did not complete: {warm.kind} {warm.message}")
        pid = int(info["pid"])
        idle = _rss_mb(pid)
        report.server, report.rss_idle_mb = info, idle
        outcomes: list[Outcome] = []
        samples: list[tuple[float, float]] = []
        deadline = time.perf_counter() + seconds
        stop = asyncio.Event()

        async def sample() -> None:
            while not stop.is_set():
                rss = _rss_mb(pid)
                if rss is not None:
                    samples.append((time.perf_counter() - start, rss))
                await asyncio.sleep(0.5)

        async def worker(index: int) -> None:
            n = index
            while time.perf_counter() < deadline:
                outcome = await one_request(client, url, QUESTIONS[n % len(QUESTIONS)], timeout_s=timeout_s,
                                            refuse_within_s=refuse_within_s)
                outcomes.append(outcome)
                n += clients
                if outcome.kind == "refused":
                    await asyncio.sleep(1.0)  # as a polite client honouring Retry-After would

        start = time.perf_counter()
        sampler = asyncio.create_task(sample())
        await asyncio.gather(*(worker(i) for i in range(clients)))
        report.wall_s = time.perf_counter() - start
        stop.set()
        await sampler
    _summarise(report, outcomes, samples, max_seq_tokens=max_seq_tokens, slack_mb=slack_mb)
    return report


def _summarise(report: LoadReport, outcomes: list[Outcome], samples: list[tuple[float, float]], *, max_seq_tokens: int,
               slack_mb: float) -> None:
    kinds = ("complete", "error", "refused", *FAILURES)
    report.counts = {k: sum(o.kind == k for o in outcomes) for k in kinds}
    done = [o for o in outcomes if o.kind == "complete"]
    report.latency_p50_s = _percentile([o.seconds for o in done], 50)
    report.latency_p99_s = _percentile([o.seconds for o in done], 99)
    firsts = [o.first_token_s for o in done if o.first_token_s is not None]
    report.first_token_p50_s, report.first_token_p99_s = _percentile(firsts, 50), _percentile(firsts, 99)
    report.refusal_p99_s = _percentile([o.seconds for o in outcomes if o.kind == "refused"], 99)
    report.requests_per_s = len(done) / report.wall_s if report.wall_s else 0.0
    report.tokens_per_s = sum(o.tokens for o in done) / report.wall_s if report.wall_s else 0.0
    report.refusal_messages = sorted({f"{o.status}: {o.message}" for o in outcomes if o.kind == "refused"})[:3]
    report.error_messages = sorted({o.message for o in outcomes if o.kind != "complete" and o.kind != "refused"})[:5]
    for kind in FAILURES:
        if report.counts[kind]:
            report.failures.append(f"{report.counts[kind]} request(s) {kind}")
    if not done:
        report.failures.append("no request completed")
    server = report.server
    if samples and report.rss_idle_mb is not None:
        report.rss_peak_mb = max(rss for _, rss in samples)
        step = max(1, round(5 / 0.5))
        report.rss_timeline_mb = [(round(t, 1), round(rss)) for t, rss in samples[::step]]
        kv = (server.get("kv_bytes_per_token") or 0) * server.get("max_ongoing_requests", report.clients) * max_seq_tokens
        report.rss_bound_mb = report.rss_idle_mb + float(server.get("prefix_cache_max_mb", 0.0)) + 2 * kv / 2**20 + slack_mb
        if report.rss_peak_mb > report.rss_bound_mb:
            report.failures.append(f"resident memory {report.rss_peak_mb:.0f} MiB above the bound {report.rss_bound_mb:.0f} MiB")


def format_report(report: LoadReport) -> str:
    f = lambda v, d=2: "-" if v is None else f"{v:.{d}f}"  # noqa: E731
    c = report.counts
    return "\n".join([
        "| clients | seconds | complete | error events | refused (503) | partial / hung / lost / slow refusals | "
        "latency p50 / p99 (s) | first token p50 / p99 (s) | refusal p99 (s) | requests/s | tokens/s | "
        "RSS idle / peak / bound (MiB) |",
        "|---:|---:|---:|---:|---:|---|---|---|---:|---:|---:|---|",
        f"| {report.clients} | {report.seconds:.0f} | {c.get('complete', 0)} | {c.get('error', 0)} | {c.get('refused', 0)} | "
        f"{c.get('partial', 0)} / {c.get('hung', 0)} / {c.get('lost', 0)} / {c.get('slow-refusal', 0)} | "
        f"{f(report.latency_p50_s)} / {f(report.latency_p99_s)} | {f(report.first_token_p50_s)} / {f(report.first_token_p99_s)} | "
        f"{f(report.refusal_p99_s, 3)} | {report.requests_per_s:.3f} | {report.tokens_per_s:.2f} | "
        f"{f(report.rss_idle_mb, 0)} / {f(report.rss_peak_mb, 0)} / {f(report.rss_bound_mb, 0)} |",
    ])


def _recipe() -> ModuleType:
    spec = importlib.util.spec_from_file_location("recipe_ray_serve_active_rag", RECIPE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_serve(serve: ModuleType, attempts: int = 5) -> int:
    """Start Serve's proxy on a free 127.0.0.1 port, chosen after Ray has opened its own ports; a port taken between
    the choice and the bind (Ray's workers open ports too) is retried with another. Returns the port."""
    tries = 0
    while True:
        port = _free_port()
        try:
            serve.start(http_options={"host": "127.0.0.1", "port": port})
            return port
        except Exception as error:  # noqa: BLE001 - Ray wraps the proxy's bind error in its task error
            tries += 1
            if "Failed to bind" not in str(error) or tries == attempts:
                raise
            serve.shutdown()


@contextmanager
def serve_recipe(*, model: str = "smollm2", max_new_tokens: int = 32, theta: float = 0.25, max_ongoing: int = 16,
                 max_queued: int = 8, prefix_cache_mb: float | None = None, ray_cpus: int = 2) -> Iterator[str]:
    """The recipe served on a free 127.0.0.1 port of a local Ray; yields its URL; shuts Serve and Ray down after."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import ray
    from ray import cloudpickle, serve

    recipe = _recipe()
    cloudpickle.register_pickle_by_value(recipe)  # the replicas cannot import integrations/ by name
    ray.init(num_cpus=ray_cpus, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    try:
        port = _start_serve(serve)
        serve.run(recipe.build_app(model, max_new_tokens=max_new_tokens, theta=theta, max_ongoing_requests=max_ongoing,
                                   max_queued_requests=max_queued, prefix_cache_mb=prefix_cache_mb),
                  name="active-rag", route_prefix=recipe.ROUTE_PREFIX)
        yield f"http://127.0.0.1:{port}{recipe.ROUTE_PREFIX}"
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Load test of the Ray Serve recipe (loopback only, bounded in time).")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--url", default=None, help="a served recipe (default: start one on 127.0.0.1)")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--max-ongoing", type=int, default=16, help="requests the replica runs at once")
    parser.add_argument("--max-queued", type=int, default=8, help="requests Ray queues beyond those; more get 503")
    parser.add_argument("--prefix-cache-mb", type=float, default=None)
    parser.add_argument("--ray-cpus", type=int, default=2)
    parser.add_argument("--request-timeout", type=float, default=300.0)
    parser.add_argument("--refuse-within", type=float, default=2.0)
    parser.add_argument("--max-seq-tokens", type=int, default=1024, help="longest sequence assumed by the memory bound")
    parser.add_argument("--slack-mb", type=float, default=512.0)
    parser.add_argument("--out", type=Path, default=None, help="writes OUT.json and OUT.md")
    args = parser.parse_args(argv)
    if args.clients < 1 or args.seconds <= 0:
        parser.error("--clients must be at least 1 and --seconds positive")
    load = lambda url: asyncio.run(run_load(url, clients=args.clients, seconds=args.seconds,  # noqa: E731
                                            timeout_s=args.request_timeout, refuse_within_s=args.refuse_within,
                                            max_seq_tokens=args.max_seq_tokens, slack_mb=args.slack_mb))
    if args.url:
        report = load(args.url.rstrip("/"))
    else:
        with serve_recipe(model=args.model, max_new_tokens=args.max_new_tokens, max_ongoing=args.max_ongoing,
                          max_queued=args.max_queued, prefix_cache_mb=args.prefix_cache_mb, ray_cpus=args.ray_cpus) as url:
            report = load(url)
    table = format_report(report)
    print(table)
    print("OK" if report.ok else "FAILED: " + "; ".join(report.failures))
    if args.out is not None:
        command = "python integrations/ray_serve_load.py " + " ".join(sys.argv[1:] if argv is None else argv)
        data = {**asdict(report), "ok": report.ok, "command": command, "max_new_tokens": args.max_new_tokens}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(data, indent=2) + "\n")
        args.out.with_suffix(".md").write_text(
            f"# Load test of the Ray Serve recipe\n\n`{command}`\n\n{table}\n\n"
            f"Server: {json.dumps(report.server)}\n\nRefusals: {report.refusal_messages or 'none'}\n\n"
            f"Replica RSS over the run (s, MiB): {report.rss_timeline_mb}\n\n"
            f"Result: {'OK' if report.ok else 'FAILED: ' + '; '.join(report.failures)}\n")
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
