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
# # Quickstart: active RAG in LangChain
#
# `langchain_active_rag.ActiveRAG` is a LangChain `Runnable` that runs the engine's active retrieval loop
# (DRAGIN, FLARE, ...) over **any LangChain retriever**: the engine calls the retriever whenever its trigger
# fires, through LangChain, so callbacks and traces see every retrieval nested under the chain. This
# notebook:
#
# 1. puts it in an LCEL chain over BM25 (`BM25sRetriever`) and over Chroma (with the offline
#    `MiniLMEmbeddings`);
# 2. streams tokens and retrieval events;
# 3. switches the method (preset) at run time through config;
# 4. puts the TA-ARE router in front, which decides whether to retrieve at all.
#
# Everything runs offline on SmolLM2-135M-Instruct and the 300 bundled HotpotQA paragraphs; answers from a
# 135M model are often wrong, the point is the mechanics.

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
CORPUS_LIMIT = 20 if FAST else None       # passages embedded into Chroma (all 300 in a full run)

from langchain_core.runnables import RunnableLambda, RunnablePassthrough

from active_rag import ActiveLM, BM25Index, RindTrigger
from langchain_active_rag import ActiveRAG, BM25sRetriever

lm = ActiveLM.load("smollm2")
bm25 = BM25sRetriever.from_index(BM25Index.demo(), k=3)
QUESTION = "What was the father of Kasper Schmeichel voted to be by the IFFHS in 1992?"
print(lm, "|", "fast mode" if FAST else "full run", "| max_new_tokens =", MAX_NEW_TOKENS)


# %% [markdown]
# ## 1. An LCEL chain over BM25
#
# `ActiveRAG(lm, retriever, preset="dragin")` takes a question (or `{"question": ...}`) and returns
# `{"answer", "documents", "trace"}`: the answer, the LangChain `Document`s the engine put in context, and
# one entry per retrieval (where, which token, what score, which query). DRAGIN's paper threshold
# (RIND > 1.2) never fires on a 135M model, so we pass `RindTrigger(theta=0.25)` (README, *Thresholds*).

# %%
def format_output(output: dict) -> str:
    lines = [output["answer"], ""]
    for r in output["trace"]:
        lines.append(f"retrieved before token {r['position']} ({r['trigger']}, token {r['token']!r}): {r['query']!r}")
    titles = sorted({d.metadata.get("title", "") for d in output["documents"]})
    lines.append("sources: " + (", ".join(titles) if titles else "none"))
    return "\n".join(lines)


dragin = ActiveRAG(lm, bm25, preset="dragin", trigger=RindTrigger(theta=0.25), max_new_tokens=MAX_NEW_TOKENS)
chain = {"question": RunnablePassthrough()} | dragin | RunnableLambda(format_output)

t0 = time.perf_counter()
print(chain.invoke(QUESTION))
print(f"\n({time.perf_counter() - t0:.1f} s)")

# %% [markdown]
# ## 2. The same chain over Chroma
#
# Any LangChain retriever works. Here the passages go into an in-process Chroma collection, embedded with
# `MiniLMEmbeddings` (all-MiniLM-L6-v2, installed as a wheel: no download, unlike Chroma's default
# embedding function). In fast mode only the first 20 passages (plus the two about the Schmeichels) are
# embedded.

# %%
import uuid

from active_rag.retrieval.embeddings import ephemeral_chroma_client
from langchain_chroma import Chroma
from langchain_core.documents import Document

from active_rag.retrieval import demo_corpus_path, read_jsonl_passages
from langchain_active_rag import MiniLMEmbeddings

passages = read_jsonl_passages(demo_corpus_path())
if CORPUS_LIMIT is not None:
    passages = [p for p in passages if "Schmeichel" in p.title] + passages[:CORPUS_LIMIT]
docs = [Document(page_content=p.text, id=p.id, metadata={"id": p.id, "title": p.title}) for p in passages]

t0 = time.perf_counter()
store = Chroma(
    collection_name=f"active-rag-demo-{uuid.uuid4().hex[:8]}",
    embedding_function=MiniLMEmbeddings(),
    client=ephemeral_chroma_client(),
)
store.add_documents(docs, ids=[d.id for d in docs])
print(f"embedded {len(docs)} passages in {time.perf_counter() - t0:.1f} s")

chroma_chain = (
    {"question": RunnablePassthrough()}
    | ActiveRAG(lm, store.as_retriever(search_kwargs={"k": 3}), preset="dragin", trigger=RindTrigger(theta=0.25),
                max_new_tokens=MAX_NEW_TOKENS)
    | RunnableLambda(format_output)
)
print(chroma_chain.invoke(QUESTION))

# %% [markdown]
# ## 3. Streaming, with retrieval events
#
# `stream` yields `AddableDict` chunks that add up to the output, as LCEL combines chunks: `{"answer": text}`
# per token as the engine accepts it, `{"documents": [...], "trace": [...]}` per retrieval (a `{"route": ...}`
# chunk first when a router is set). So `rag.pick("answer").stream(q)` streams plain text, and the sum of the
# chunks is what `invoke` returns. Each retrieval is also dispatched as the custom LangChain event
# `active_rag.retrieval` (`langchain_active_rag.RETRIEVAL_EVENT`), and every trigger decision, fired or not,
# as `active_rag.decision`; `astream_events` and callback handlers receive them.
# DRAGIN checks a segment once it is generated, so a retrieval can be reported before the tokens of that
# segment that precede the trigger; its `position` says where in the answer it belongs.

# %%
final = None
for chunk in dragin.stream(QUESTION):
    final = chunk if final is None else final + chunk
    if "answer" in chunk:
        print(chunk["answer"], end="", flush=True)
    for r in chunk.get("trace", []):
        print(f"\n  [retrieval before token {r['position']}: {r['token']!r} scored {r['score']:.3f} > {r['threshold']}; "
              f"query {r['query']!r} -> {r['titles']}]")
print(f"\n\nsum of the chunks: keys {sorted(final)}; {len(final['trace'])} retrieval(s), {len(final['documents'])} document(s)")

# %% [markdown]
# ## 4. Switching the method through config
#
# `as_configurable()` exposes `preset`, `trigger`, `query`, `top_k`, `max_new_tokens` and `max_retrievals`
# as LangChain configurable fields, so one chain runs any method: here without retrieval (`wo-rag`),
# single-round retrieval with the question (`sr-rag`) and FLARE. A `trigger` set without a `query` brings its
# paper's query formulator.

# %%
configurable = ActiveRAG(lm, bm25, preset="dragin", max_new_tokens=MAX_NEW_TOKENS).as_configurable()

for preset in ("wo-rag", "sr-rag", "flare"):
    t0 = time.perf_counter()
    out = configurable.with_config(configurable={"preset": preset}).invoke(QUESTION)
    where = ", ".join(f"{r['trigger']}@{r['position']}" for r in out["trace"]) or "no retrieval"
    print(f"[{preset}] {where} ({time.perf_counter() - t0:.1f} s)\n   {out['answer'][:160]!r}")

# %% [markdown]
# ## 5. The TA-ARE router in front
#
# TA-ARE (Zhang et al., 2024) asks the model first, with today's date and a few demonstrations, whether a
# question needs retrieval at all. `TaAreRouter` runs the retrieval chain on "[Yes]" and a plain chat chain
# (`ChatActiveHF`, the same local model) on "[No]"; the decision and the model's raw output are in the
# result's `route`. The date is fixed here so that the output is reproducible.

# %%
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate

from langchain_active_rag import ChatActiveHF, TaAreRouter

chat = ChatActiveHF(lm=lm, max_tokens=MAX_NEW_TOKENS)
direct = (
    RunnableLambda(lambda value: value if isinstance(value, dict) else {"question": value})
    | ChatPromptTemplate.from_messages([("human", "{question}")])
    | chat
    | StrOutputParser()
)
router = TaAreRouter(chat, retrieve=dragin, direct=direct, today="2024-06-01")

for question in (QUESTION, "What is the capital of France?"):
    out = router.invoke({"question": question})
    route = out["route"]
    answer = out.get("answer", out.get("output"))
    print(f"Q: {question}\n   router said {route['raw_output'].strip()!r} -> "
          f"{'retrieve (DRAGIN)' if route['retrieve'] else 'answer directly'}\n   A: {str(answer).strip()[:160]!r}")

# %% [markdown]
# Next: `02_llamaindex.ipynb` does the same in LlamaIndex; `03_why_it_retrieved.ipynb` draws *why* each
# retrieval happened.
