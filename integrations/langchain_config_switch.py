"""Recipe: switch the trigger ("when to retrieve") of one ActiveRAG chain at run time through config.

    python integrations/langchain_config_switch.py

``ActiveRAG(...).as_configurable()`` exposes preset, trigger, query, top_k, max_new_tokens and
max_retrievals as LangChain configurable fields; ``chain.with_config(configurable={"trigger": "flare"})``
(or ``config={"configurable": {...}}`` per call) swaps the engine's trigger without rebuilding the chain.
A trigger set without a query brings its paper's query formulator (flare -> masked sentence, fl-rag ->
last 16 tokens, ...).
"""

from __future__ import annotations

from typing import Any

from active_rag import ActiveLM, BM25Index
from langchain_active_rag import ActiveRAG, BM25sRetriever

DEFAULT_QUESTION = "What was the father of Kasper Schmeichel voted to be by the IFFHS in 1992?"
DEFAULT_TRIGGERS = ("dragin", "flare", "fl-rag", "sr-rag", "wo-rag")


def build_chain(lm: Any, *, retriever: Any = None, max_new_tokens: int = 48) -> Any:
    retriever = retriever or BM25sRetriever.from_index(BM25Index.demo())
    return ActiveRAG(lm, retriever, preset="dragin", max_new_tokens=max_new_tokens).as_configurable()


def main(
    model: Any = None,
    question: str = DEFAULT_QUESTION,
    *,
    triggers: tuple[str, ...] | list[str] = DEFAULT_TRIGGERS,
    max_new_tokens: int = 48,
) -> dict[str, dict[str, Any]]:
    """Answer ``question`` once per trigger; print and return ``{trigger: output}``."""
    lm = model if model is not None and not isinstance(model, str) else ActiveLM.load(model or "smollm2")
    chain = build_chain(lm, max_new_tokens=max_new_tokens)
    results: dict[str, dict[str, Any]] = {}
    for trigger in triggers:
        out = chain.with_config(configurable={"trigger": trigger}).invoke(question)
        results[trigger] = out
        fired = ", ".join(f"{r['trigger']}@{r['position']}" for r in out["trace"]) or "no retrieval"
        print(f"[{trigger}] {fired}\n  {out['answer'].strip()[:200]}")
    return results


if __name__ == "__main__":
    main()
