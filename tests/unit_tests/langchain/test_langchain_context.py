"""The context policy (issue 28) as a LangChain configurable field: a run gives the engine's answer and trace."""

from __future__ import annotations

import pytest

import active_rag
from langchain_active_rag import ActiveRAG

QUESTION = "Who is the father of Kasper Schmeichel?"
POLICIES = ["replace", "keep-newest", "accumulate", "rerank"]


@pytest.mark.parametrize("policy", POLICIES)
def test_context_is_a_configurable_field_and_the_run_is_the_engines(tiny_lm, bm25_retriever, policy: str) -> None:
    rag = ActiveRAG(tiny_lm, bm25_retriever, preset="fs-rag", max_new_tokens=24, top_k=2).as_configurable()
    out = rag.with_config(configurable={"context": policy}).invoke(QUESTION)
    engine = active_rag.ActiveRAG.from_preset("fs-rag", tiny_lm, bm25_retriever.index, max_new_tokens=24, top_k=2,
                                              context=policy).run(QUESTION)
    assert out["answer"] == engine.answer
    assert out["trace"] == [r.to_dict() for r in engine.retrievals]
    assert all("held_ids" in r for r in out["trace"])


def test_context_field_and_per_call_override(tiny_lm, bm25_retriever) -> None:
    rag = ActiveRAG(tiny_lm, bm25_retriever, preset="fs-rag", max_new_tokens=24, top_k=2, context="accumulate")
    assert rag.build_engine().context.name == "accumulate"
    assert rag.build_engine(context="rerank").context.name == "rerank"
    assert ActiveRAG(tiny_lm, bm25_retriever, preset="dragin").build_engine().context.name == "replace"
