"""Recipe: a LlamaIndex ``RouterQueryEngine`` that asks TA-ARE whether to retrieve at all.

Choice 0 is an ``ActiveRAGQueryEngine`` (DRAGIN by default) over a BM25Retriever on the bundled demo
corpus; choice 1 answers without retrieval (``preset="wo-rag"``). ``TaAreSelector`` picks choice 0 on
[Yes], choice 1 on [No]; the selection's reason is the model's raw output. The router's LLM (needed
by ``RouterQueryEngine`` only to summarise multi-selections) is ``ActiveHFLLM`` over the same local
model, never ``Settings.llm``.

    HF_HUB_OFFLINE=1 python integrations/llamaindex_router.py "Who won the most recent Ballon d'Or?"
"""

from __future__ import annotations

import argparse
import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any

from llama_index.core.base.response.schema import Response
from llama_index.core.query_engine import RouterQueryEngine
from llama_index.core.tools import QueryEngineTool
from llama_index.retrievers.bm25 import BM25Retriever

from active_rag import ActiveLM
from llamaindex_active_rag import ActiveHFLLM, ActiveRAGQueryEngine, TaAreSelector, demo_nodes

DEFAULT_QUESTIONS = (
    "What was the father of Kasper Schmeichel voted to be by the IFFHS in 1992?",
    "What is the capital of France?",
)


def build_router(
    lm: ActiveLM,
    *,
    preset: str = "dragin",
    router: str = "ta-are",
    today: dt.date | str | None = None,
    top_k: int = 3,
    max_new_tokens: int = 64,
    **options: Any,
) -> RouterQueryEngine:
    """RouterQueryEngine(TaAreSelector, [active retrieval, no retrieval], llm=ActiveHFLLM)."""
    retriever = BM25Retriever.from_defaults(nodes=demo_nodes(), similarity_top_k=top_k)
    active = ActiveRAGQueryEngine(lm, retriever, preset=preset, top_k=top_k, max_new_tokens=max_new_tokens, **options)
    direct = ActiveRAGQueryEngine(lm, preset="wo-rag", max_new_tokens=max_new_tokens)
    tools = [
        QueryEngineTool.from_defaults(
            active, name="active_retrieval", description=f"Answer with active retrieval ({preset}) over the HotpotQA demo corpus."
        ),
        QueryEngineTool.from_defaults(direct, name="no_retrieval", description="Answer from the model's own knowledge."),
    ]
    kwargs: dict[str, Any] = {"today": today} if router == "ta-are" else {}
    selector = TaAreSelector(lm, router=router, retrieve_index=0, **kwargs)
    return RouterQueryEngine(selector=selector, query_engine_tools=tools, llm=ActiveHFLLM(lm, max_new_tokens=max_new_tokens))


def main(
    questions: Sequence[str] = DEFAULT_QUESTIONS,
    *,
    model: str = "smollm2",
    lm: ActiveLM | None = None,
    preset: str = "dragin",
    router: str = "ta-are",
    today: dt.date | str | None = None,
    top_k: int = 3,
    max_new_tokens: int = 64,
    echo: Callable[..., None] = print,
) -> list[Response]:
    """Route and answer each question; print the choice, the raw router output and the answer."""
    lm = lm or ActiveLM.load(model)
    engine = build_router(lm, preset=preset, router=router, today=today, top_k=top_k, max_new_tokens=max_new_tokens)
    responses: list[Response] = []
    for question in questions:
        response = engine.query(question)
        assert isinstance(response, Response)
        meta = response.metadata or {}
        selection = meta["selector_result"]
        choice = "active retrieval" if selection.ind == 0 else "no retrieval"
        echo(f"Q: {question}\n  route: {choice} (router said {selection.reason.strip()!r})")
        echo(f"  A: {response.response}")
        echo(f"  {len(meta.get('retrievals', []))} retrieval(s); sources: {[n.node.node_id for n in response.source_nodes]}")
        responses.append(response)
    return responses


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("questions", nargs="*", default=list(DEFAULT_QUESTIONS))
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--preset", default="dragin")
    parser.add_argument("--router", default="ta-are", choices=["ta-are", "vanilla"])
    parser.add_argument("--today", default=None, help="YYYY-MM-DD for TA-ARE (default: today)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args()
    main(args.questions, model=args.model, preset=args.preset, router=args.router, today=args.today, max_new_tokens=args.max_new_tokens)
