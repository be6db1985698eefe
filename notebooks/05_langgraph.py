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
# # Active RAG as a LangGraph graph
#
# `langchain_active_rag.graph.build_graph` builds the engine's methods (FLARE, DRAGIN, TA-ARE, ...) as a LangGraph
# `StateGraph`: a `route` node (TA-ARE: retrieve or answer alone), a `generate` node that runs the engine until a
# trigger fires, a `retrieve` node that calls any LangChain retriever with the query formulator's query, and an
# `answer` node. This notebook:
#
# 1. builds the graph for DRAGIN and draws it;
# 2. streams the answer's tokens (`stream_mode="messages"`) and the retrievals (`"updates"`);
# 3. puts a human before each retrieval (`interrupt`, a `MemorySaver` checkpointer): approve or edit the query;
# 4. puts TA-ARE in front.
#
# Offline: SmolLM2-135M-Instruct and the 300 bundled HotpotQA paragraphs; answers from a 135M model are often
# wrong, the point is the mechanics.

# %%
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

MAX_NEW_TOKENS = 8 if FAST else 32

from active_rag import ActiveLM, BM25Index, RindTrigger
from langchain_active_rag import BM25sRetriever
from langchain_active_rag.graph import build_graph

lm = ActiveLM.load("smollm2")
bm25 = BM25sRetriever.from_index(BM25Index.demo(), k=3)
QUESTION = "What was the father of Kasper Schmeichel voted to be by the IFFHS in 1992?"
print(lm, "|", "fast mode" if FAST else "full run", "| max_new_tokens =", MAX_NEW_TOKENS)

# %% [markdown]
# ## 1. The prebuilt graph
#
# `build_graph(model, retriever, preset=..., **options)` takes what `langchain_active_rag.ActiveRAG` takes: a
# preset and its overrides. DRAGIN's paper threshold (RIND > 1.2) never fires on a 135M model, so we pass
# `RindTrigger(theta=0.25)` (README, *Thresholds*). The state carries the question, the pending `query`, the
# passages, every trigger decision and retrieval, and the answer; it is plain JSON.

# %%
dragin = build_graph(lm, bm25, preset="dragin", trigger=RindTrigger(theta=0.25), max_new_tokens=MAX_NEW_TOKENS)
print(dragin.get_graph().draw_mermaid())

t0 = time.perf_counter()
state = dragin.invoke({"question": QUESTION})
print(state["answer"])
for r in state["retrievals"]:
    print(f"  retrieved before token {r['position']} ({r['trigger']}, token {r['token']!r}): {r['query']!r} -> {r['titles']}")
print("sources:", [p["title"] for p in state["sources"]] or "none", f"({time.perf_counter() - t0:.1f} s)")

# %% [markdown]
# ## 2. Streaming tokens and retrievals
#
# `stream_mode="messages"` yields the answer's tokens as chat message chunks while the model writes them (the
# `generate` node reports each segment between retrievals as a chat-model run, with logprobs); `"updates"` yields
# each node's update: the `retrieve` node's query and passages, the `generate` node's decisions and the engine's
# retrieval records. FL-RAG retrieves with the question, then every 16 tokens.

# %%
flrag = build_graph(lm, bm25, preset="fl-rag", max_new_tokens=MAX_NEW_TOKENS)
for mode, chunk in flrag.stream({"question": QUESTION}, stream_mode=["messages", "updates"]):
    if mode == "messages":
        message, meta = chunk
        print(message.content, end="", flush=True)
    elif "retrieve" in chunk:
        update = chunk["retrieve"]
        print(f"\n  [retrieve] {update['query']!r} -> {[p['title'] for p in update['retrieved']]}")
print()

# %% [markdown]
# ## 3. A human before each retrieval
#
# With `interrupt_before_retrieval=True` (and a checkpointer), the graph stops before each retrieval with the
# query formulator's query; `Command(resume=...)` goes on: `True` approves, a string is the edited query, `False`
# skips the retrieval. The engine's run, with its KV cache, waits in the process meanwhile: nothing it read is read
# again when the graph goes on.

# %%
from langgraph.checkpoint.memory import MemorySaver
from langgraph.types import Command

reviewed = build_graph(lm, bm25, preset="fl-rag", max_new_tokens=MAX_NEW_TOKENS, interrupt_before_retrieval=True,
                       checkpointer=MemorySaver())
config = {"configurable": {"thread_id": "notebook"}}
out = reviewed.invoke({"question": QUESTION}, config)
edits = ["Peter Schmeichel IFFHS World's Best Goalkeeper"]  # the first query, edited; later ones approved
while "__interrupt__" in out:
    asked = out["__interrupt__"][0].value
    reply = edits.pop(0) if edits else True
    print(f"asked to retrieve {asked['query']!r} -> {'edited to ' + repr(reply) if isinstance(reply, str) else 'approved'}")
    out = reviewed.invoke(Command(resume=reply), config)
print("answer:", out["answer"])
print("retriever calls:", [(c["query"][:40], c["sent"][:50]) for c in out["calls"]])

# %% [markdown]
# ## 4. TA-ARE in front
#
# TA-ARE (Zhang et al., 2024) asks the model first, with today's date and a few demonstrations, whether the
# question needs retrieval at all; the `route` node's conditional edge sends it to `generate` (the method's
# triggers armed) or to `answer` alone. The date is fixed here so that the output is reproducible.

# %%
from active_rag import make_router

routed = build_graph(lm, bm25, preset="sr-rag", max_new_tokens=MAX_NEW_TOKENS,
                     router=make_router("ta-are", lm, today="2024-06-01"))
for question in (QUESTION, "What is the capital of France?"):
    nodes, out = [], {}
    for mode, chunk in routed.stream({"question": question}, stream_mode=["updates", "values"]):
        if mode == "updates":
            nodes.extend(chunk)
        else:
            out = chunk
    print(f"Q: {question}\n   router said {out['route']['raw_output'].strip()!r} -> path {' -> '.join(nodes)}\n"
          f"   A: {out['answer'][:160]!r}")
