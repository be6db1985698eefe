"""Recipe: serve the LangChain ``ActiveRAG`` runnable (DRAGIN by default) over HTTP with Ray Serve.

    python integrations/ray_serve_active_rag.py [--model smollm2] [--preset dragin] [--port 8000] [--replicas N]

    curl -s localhost:8000/active-rag/answer -H 'content-type: application/json' \\
         -d '{"question": "Who was the father of Kasper Schmeichel?"}'
    curl -sN localhost:8000/active-rag/stream -H 'content-type: application/json' \\
         -d '{"question": "Who was the father of Kasper Schmeichel?"}'

Endpoints (under the route prefix, default ``/active-rag``):

* ``POST /answer`` with ``{"question": str}``: ``{"answer", "trace", "documents", "route"?}`` (the runnable's
  output; documents as ``{"id", "page_content", "metadata"}``). 400 with ``{"error"}`` for a bad request.
* ``POST /stream``: server-sent events as the engine produces them (from the runnable's ``astream``):
  ``event: route`` (with a router), ``event: token`` (``{"token": text}``, the texts join to the answer),
  ``event: retrieval`` (trigger, position, token, score, query, passage ids and titles), then
  ``event: result`` (the ``/answer`` body) or ``event: error``, and ``event: done``.
* ``GET /health``: the model and method being served, the replica's process id and memory figures (model and
  prefix-cache MiB, KV bytes per token) and its request limits.

Overload: a replica runs at most ``max_ongoing_requests`` requests (``--max-ongoing``, default 8) and Ray queues at
most ``max_queued_requests`` more (``--max-queued``, default 32); beyond that a request is refused at once with
HTTP 503 and Ray's message "Request dropped due to backpressure (num_queued_requests=..., max_queued_requests=...)".
A request that fails after its stream started gets ``event: error`` then ``event: done``, never a cut stream.
Memory: the replica runs with ``MALLOC_ARENA_MAX=2`` and trims glibc's free pages after each request, so its
resident memory stays near model + prefix cache + the live requests' KV.
Load test: ``python integrations/ray_serve_load.py --clients 32 --seconds 120`` (``docs/scaling.md``).

Placement: one replica per GPU (``ray_actor_options={"num_gpus": 1}``) when the cluster has GPUs, else one
CPU replica (``--replicas`` overrides). Each replica loads the model once. Batching: a replica takes up to
``max_ongoing_requests`` requests at once and runs each in a worker thread (``ainvoke``/``astream`` of the
runnable); concurrent calls on one :class:`active_rag.ActiveLM` are batched by the engine itself, so no
batching code lives here. Ray is joined as ``ray.init()`` does: ``$RAY_ADDRESS`` for an existing cluster.
The retriever is BM25 over the bundled demo corpus (``--corpus`` for a JSONL file of your own).
"""

# No ``from __future__ import annotations``: FastAPI reads the route annotations (``request: Request``) at run time,
# in replicas that receive this module pickled by value.
import argparse
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from ray import serve

ROUTE_PREFIX = "/active-rag"
DEFAULT_QUESTION = "What was the father of Kasper Schmeichel voted to be by the IFFHS in 1992?"

app = FastAPI(title="active-rag")


def _documents(docs: list[Any]) -> list[dict[str, Any]]:
    return [{"id": getattr(d, "id", None), "page_content": d.page_content, "metadata": dict(d.metadata)} for d in docs]


def _jsonable(output: dict[str, Any]) -> dict[str, Any]:
    return {**output, "documents": _documents(output.get("documents") or [])}


def _sse(event: str, data: Any) -> str:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False, default=str)}\n\n"


def _load_lm(model: str, prefix_cache_mb: float | None = None) -> Any:
    """The model, on this replica's GPU when Ray assigned one: ``device="auto"`` takes the GPU Ray made visible
    (``CUDA_VISIBLE_DEVICES``), and a CPU replica sees none."""
    from active_rag import ActiveLM

    return ActiveLM.load(model, device="auto", prefix_cache_mb=prefix_cache_mb)


MALLOC_ENV = {"MALLOC_ARENA_MAX": "2"}
"""The replica's glibc malloc settings: at most two arenas. By default glibc gives each of the request threads an
arena of its own (up to 8 per core), each keeping the key/value tensors its thread freed; with 16 streams that
grew a CPU replica by 3.6 GiB in 2 minutes (``results/bench/serve-load-smollm2-run1.md``)."""


def _give_back_free_memory() -> None:
    """``malloc_trim(0)``: hand glibc's free pages back to the OS once a request ends (Linux; a no-op elsewhere)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _memory_info(lm: Any) -> dict[str, Any]:
    """What bounds this replica's memory: the model's tensors, the prefix cache's bound, KV bytes per token."""
    tensors = [*lm.model.parameters(), *lm.model.buffers()]
    cache = lm.prefix_cache
    return {
        "pid": os.getpid(),
        "malloc_arena_max": os.environ.get("MALLOC_ARENA_MAX"),
        "model_mb": round(sum(t.numel() * t.element_size() for t in tensors) / 2**20, 1),
        "prefix_cache_max_mb": round(cache.max_bytes / 2**20, 1) if cache is not None else 0.0,
        "kv_bytes_per_token": lm.scheduler.kv_bytes_per_token if lm.scheduler is not None else None,
    }


@serve.deployment(max_ongoing_requests=8)
@serve.ingress(app)
class ActiveRAGServer:
    """One replica: one model, one ``langchain_active_rag.ActiveRAG`` runnable over a BM25 retriever."""

    def __init__(self, model: str = "smollm2", preset: str = "dragin", corpus: str | None = None,
                 max_new_tokens: int = 64, top_k: int = 3, theta: float | None = None,
                 prefix_cache_mb: float | None = None, limits: dict[str, int] | None = None) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from active_rag import PRESETS, BM25Index, make_trigger
        from langchain_active_rag import ActiveRAG, BM25sRetriever

        index = BM25Index.demo() if corpus in (None, "demo") else BM25Index.from_jsonl(corpus)
        lm = _load_lm(model, prefix_cache_mb)
        trigger = make_trigger(PRESETS[preset].trigger, theta=theta) if theta is not None else None
        self.rag = ActiveRAG(lm, BM25sRetriever.from_index(index, k=top_k), preset=preset, trigger=trigger,
                             max_new_tokens=max_new_tokens, top_k=top_k)
        self.info = {"model": str(lm.name), "preset": preset, "max_new_tokens": max_new_tokens, "top_k": top_k,
                     **_memory_info(lm), **(limits or {})}

    @staticmethod
    async def _question(request: Request) -> str:
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"The body is not JSON ({exc}): send {{\"question\": \"...\"}}.") from exc
        question = body.get("question") if isinstance(body, dict) else None
        if not isinstance(question, str) or not question.strip():
            raise ValueError('The body needs a non-empty "question" string: send {"question": "Who wrote Hamlet?"}.')
        return question

    @app.get("/health")
    async def health(self) -> dict[str, Any]:
        return self.info

    @app.post("/answer")
    async def answer(self, request: Request) -> Any:
        try:
            question = await self._question(request)
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        start = time.perf_counter()
        try:
            output = await self.rag.ainvoke(question)  # runs in a worker thread; the engine batches concurrent calls
        finally:
            _give_back_free_memory()
        return {**_jsonable(output), "seconds": time.perf_counter() - start}

    @app.post("/stream")
    async def stream(self, request: Request) -> Any:
        try:
            question = await self._question(request)
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return StreamingResponse(self._events(question), media_type="text/event-stream")

    async def _events(self, question: str) -> AsyncIterator[str]:
        """The runnable's stream chunks (which add up to its output) as SSE events, then the summed output."""
        total: Any = None
        try:
            async for chunk in self.rag.astream(question):
                total = chunk if total is None else total + chunk
                if "route" in chunk:
                    yield _sse("route", chunk["route"])
                for item in chunk.get("trace") or []:  # one per retrieval
                    yield _sse("retrieval", item)
                if chunk.get("answer"):
                    yield _sse("token", {"token": chunk["answer"]})
            yield _sse("result", _jsonable({k: total[k] for k in ("answer", "documents", "trace", "route") if k in total}))
        except Exception as exc:  # noqa: BLE001 - reported to the client, the stream ends cleanly
            yield _sse("error", {"error": f"{type(exc).__name__}: {exc}"})
        finally:
            _give_back_free_memory()
        yield _sse("done", {})


def build_app(
    model: str = "smollm2",
    *,
    preset: str = "dragin",
    corpus: str | None = None,
    max_new_tokens: int = 64,
    top_k: int = 3,
    theta: float | None = None,
    num_replicas: int | None = None,
    max_ongoing_requests: int = 8,
    max_queued_requests: int = 32,
    gpus: int | None = None,
    prefix_cache_mb: float | None = None,
) -> Any:
    """The Serve application: one replica per GPU (``num_gpus=1`` each) when there are GPUs, else one CPU
    replica; ``num_replicas`` overrides the count. ``gpus`` defaults to the connected cluster's GPUs. A replica
    runs ``max_ongoing_requests`` at once; Ray queues ``max_queued_requests`` more (``-1``: no bound) and refuses
    the rest at once with HTTP 503."""
    if gpus is None:
        import ray

        gpus = int(ray.cluster_resources().get("GPU", 0)) if ray.is_initialized() else 0
    actor_options: dict[str, Any] = {"num_gpus": 1} if gpus else {"num_cpus": 1}
    actor_options["runtime_env"] = {"env_vars": dict(MALLOC_ENV)}
    replicas = num_replicas or gpus or 1
    limits = {"max_ongoing_requests": max_ongoing_requests, "max_queued_requests": max_queued_requests}
    return ActiveRAGServer.options(
        num_replicas=replicas, ray_actor_options=actor_options, max_ongoing_requests=max_ongoing_requests,
        max_queued_requests=max_queued_requests,
    ).bind(model=model, preset=preset, corpus=corpus, max_new_tokens=max_new_tokens, top_k=top_k, theta=theta,
           prefix_cache_mb=prefix_cache_mb, limits=limits)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve active-rag's LangChain ActiveRAG runnable with Ray Serve.")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--preset", default="dragin")
    parser.add_argument("--corpus", default=None, help="JSONL corpus (default: the bundled demo corpus)")
    parser.add_argument("--theta", type=float, default=None, help="trigger threshold (SmolLM2 + DRAGIN: 0.25)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--top-k", type=int, default=3)
    parser.add_argument("--replicas", type=int, default=None, help="default: one per GPU, else 1")
    parser.add_argument("--max-ongoing", type=int, default=8, help="requests a replica runs at once")
    parser.add_argument("--max-queued", type=int, default=32, help="requests Ray queues beyond those (-1: no bound); "
                        "more are refused at once with 503")
    parser.add_argument("--prefix-cache-mb", type=float, default=None, help="default: the library's (1024 on the CPU)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)

    import ray

    try:
        ray.init(include_dashboard=False)  # honours $RAY_ADDRESS
    except (ConnectionError, RuntimeError) as exc:
        print(f"ray_serve_active_rag: cannot start or join Ray ({str(exc).splitlines()[0]}): check `ray status` "
              "or unset RAY_ADDRESS.", file=sys.stderr)
        return 2
    serve.start(http_options={"host": args.host, "port": args.port})
    serve.run(build_app(args.model, preset=args.preset, corpus=args.corpus, max_new_tokens=args.max_new_tokens,
                        top_k=args.top_k, theta=args.theta, num_replicas=args.replicas,
                        max_ongoing_requests=args.max_ongoing, max_queued_requests=args.max_queued,
                        prefix_cache_mb=args.prefix_cache_mb),
              name="active-rag", route_prefix=ROUTE_PREFIX)
    print(f"Serving on http://{args.host}:{args.port}{ROUTE_PREFIX}/answer and {ROUTE_PREFIX}/stream; Ctrl-C stops.")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        serve.shutdown()
        ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
