"""Recipe: ``ActiveRAGWorkflow`` (route -> generate -> retrieve -> answer) streaming its events.

A TA-ARE route step, then the engine's active retrieval loop (DRAGIN by default) over a LlamaIndex
BM25Retriever on the bundled demo corpus; every routing verdict, trigger decision, retrieval and token
is streamed as a workflow event.

    HF_HUB_OFFLINE=1 python integrations/llamaindex_workflow.py \
        "What was the father of Kasper Schmeichel voted to be by the IFFHS in 1992?"
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
from collections.abc import Callable
from typing import Any

from llama_index.core.base.response.schema import Response
from llama_index.core.workflow import Event, StopEvent
from llama_index.retrievers.bm25 import BM25Retriever

from active_rag import ActiveLM, make_router
from llamaindex_active_rag import (
    ActiveRAGQueryEngine,
    ActiveRAGWorkflow,
    RetrievalDecisionEvent,
    RetrievedEvent,
    RouteEvent,
    TokenEvent,
    demo_nodes,
)

DEFAULT_QUESTION = "What was the father of Kasper Schmeichel voted to be by the IFFHS in 1992?"


def build_workflow(
    lm: ActiveLM,
    *,
    preset: str = "dragin",
    router: str | None = "ta-are",
    today: dt.date | str | None = None,
    top_k: int = 3,
    max_new_tokens: int = 64,
    timeout: float | None = 300.0,
    **options: Any,
) -> ActiveRAGWorkflow:
    retriever = BM25Retriever.from_defaults(nodes=demo_nodes(), similarity_top_k=top_k)
    engine = ActiveRAGQueryEngine(lm, retriever, preset=preset, top_k=top_k, max_new_tokens=max_new_tokens, **options)
    route = None
    if router is not None and router != "none":
        route = make_router(router, lm, **({"today": today} if router == "ta-are" else {}))
    return ActiveRAGWorkflow(engine, router=route, timeout=timeout)


def describe(event: Event) -> str | None:
    """One line per stream event (tokens are printed inline, so they return ``None``)."""
    if isinstance(event, RouteEvent):
        return f"[route] {event.router}: {'retrieve' if event.retrieve else 'no retrieval'} (raw {event.raw_output.strip()!r})"
    if isinstance(event, RetrievedEvent):
        return f"[retrieve] {event.query!r} -> {event.node_ids}"
    if isinstance(event, RetrievalDecisionEvent):
        if event.fired:
            return f"[decision] retrieve at token {event.position} ({event.trigger}, token={event.token!r}, score={event.score})"
        return f"[decision] continue at token {event.position} ({event.trigger}: {event.reason})"
    return None


async def run(question: str, workflow: ActiveRAGWorkflow, echo: Callable[..., None] = print) -> tuple[Response, list[Event]]:
    """Run the workflow, echoing its stream; returns the Response and every streamed event."""
    handler = workflow.run(question=question)
    events: list[Event] = []
    async for event in handler.stream_events():
        events.append(event)
        if isinstance(event, TokenEvent):
            if event.position == 0 and any(isinstance(e, TokenEvent) for e in events[:-1]):  # the answer again
                echo(f"\n[answer {'again' if event.attempt else 'kept: the draft'}] ", end="")
            echo(event.text, end="", flush=True)
        elif not isinstance(event, StopEvent):
            line = describe(event)
            if line:
                echo(f"\n{line}")
    response = await handler
    echo()
    return response, events


def main(
    question: str = DEFAULT_QUESTION,
    *,
    model: str = "smollm2",
    lm: ActiveLM | None = None,
    preset: str = "dragin",
    router: str | None = "ta-are",
    today: dt.date | str | None = None,
    max_new_tokens: int = 64,
    echo: Callable[..., None] = print,
) -> tuple[Response, list[Event]]:
    """Build the workflow, stream one question through it, print the answer and its sources."""
    lm = lm or ActiveLM.load(model)
    workflow = build_workflow(lm, preset=preset, router=router, today=today, max_new_tokens=max_new_tokens)
    echo(f"Q: {question}")
    response, events = asyncio.run(run(question, workflow, echo))
    echo(f"A: {response.response}")
    echo(f"sources: {[n.node.node_id for n in response.source_nodes]}")
    return response, events


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("question", nargs="?", default=DEFAULT_QUESTION)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--preset", default="dragin")
    parser.add_argument("--router", default="ta-are", choices=["ta-are", "vanilla", "none"])
    parser.add_argument("--today", default=None)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args()
    main(args.question, model=args.model, preset=args.preset, router=args.router, today=args.today, max_new_tokens=args.max_new_tokens)
