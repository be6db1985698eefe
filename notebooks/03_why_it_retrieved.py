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
# # Why did it retrieve?
#
# Active RAG decides *while it writes* when to retrieve and what to search for. This notebook draws
# those decisions from the trace that every run records (`ActiveRAGResult.tokens`, `.decisions`,
# `.retrievals`), with the plot helpers of `active_rag.viz`. Nothing here re-runs the model or
# recomputes a signal: the figures read what the engine computed while generating.
#
# 1. **DRAGIN's RIND** over the generated text: entropy, attention and the RIND score of each token,
#    with the threshold and the token that fired.
# 2. **DRAGIN's QFS**: the attention of the triggering token over the context, and the words it chose
#    as the query.
# 3. **FLARE** on the same question: the token probabilities of its look-ahead sentence.
# 4. Both methods **side by side**, and the retrievals along the output.
#
# Model: SmolLM2-135M-Instruct (bundled, CPU); retrieval: BM25 over the 300 bundled HotpotQA paragraphs.

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

MAX_NEW_TOKENS = 4 if FAST else 40

from active_rag import ActiveLM, ActiveRAG, AttentionQuery, BM25Index, RindTrigger, viz

lm = ActiveLM.load("smollm2")
index = BM25Index.demo()
QUESTION = "What was the father of Kasper Schmeichel voted to be by the IFFHS in 1992?"
print(lm, "|", len(index), "passages |", "fast mode" if FAST else "full run", "| max_new_tokens =", MAX_NEW_TOKENS)

# %% [markdown]
# ## 1. DRAGIN: when does RIND fire?
#
# DRAGIN (Su et al., 2024, §3.1) scores every generated token $t_i$ with
#
# $$S_{RIND}(t_i) = H_i \cdot a_{max}(i) \cdot s_i$$
#
# * $H_i$, the **entropy** of the model's next-token distribution (Eq. 1): how unsure it was;
# * $a_{max}(i) = \max_{j>i} A_{j,i}$, the **maximum attention** any later token paid to $t_i$ (Eq. 2-3,
#   last layer): how much the rest of the text depends on it;
# * $s_i$, 1 for a content word, 0 for a stop word (Eq. 4).
#
# At the first token whose score exceeds $\theta$, DRAGIN cuts the output just before it (Eq. 6),
# retrieves, and continues with the new passages. The paper's $\theta$ (1.2 for Llama-2-13B) never fires
# on a 135M model, whose RIND scores stay below about 0.4: we use $\theta = 0.25$ (README, *Thresholds*).
# The engine checks one segment at a time (100 tokens in the paper); we use segments of 16 tokens so that
# this short answer is checked more than once, and a QFS query of the top 12 context tokens instead of 35,
# since the context (question + output so far) is short.

# %%
dragin_rag = ActiveRAG.from_preset(
    "dragin", lm, index,
    trigger=RindTrigger(theta=0.25, max_tokens=16),   # when: RIND > 0.25, checked per 16-token segment
    query=AttentionQuery(top_n=12),                   # what: the 12 most attended context tokens (QFS)
    max_new_tokens=MAX_NEW_TOKENS,
)
t0 = time.perf_counter()
dragin = dragin_rag.run(QUESTION)
print(f"{time.perf_counter() - t0:.1f} s, {dragin.generated_tokens} tokens generated, {len(dragin.tokens)} kept\n")
print("Answer:", dragin.answer, "\n")
for k, r in enumerate(dragin.retrievals, 1):
    print(f"R{k} before output token {r.position}: trigger {r.token!r}, S_RIND = {r.score:.3f} > {r.threshold}")
    print(f"   query: {r.query!r}\n   passages: {[p.title for p in r.passages]}")

# %% [markdown]
# The heat map below has one column per token of the final answer, in order, and one row per signal.
# Darker always means "more reason to retrieve" (so low probability is dark). Cell values are written in
# the cells.
#
# * The **red column** is the token that fired. DRAGIN discarded it (the output was cut before it), so it is
#   not part of the answer: it is inserted where the retrieval happened, and the tokens after it were
#   generated with the retrieved passages in the prompt.
# * The threshold is the black line on the `rind` colour bar; dashed cells are past it.
# * **Grey** cells: the trigger did not score that token. Probability and entropy are known for every
#   token, the attention and RIND only where the trigger checked a segment; after a retrieval DRAGIN
#   accepts the next segment without a check (as its released code does).
# * $a_{max}$ is the value the trigger saw when it checked the segment (attention from the later tokens of
#   the same segment), which is why the last token of each segment has $a_{max} = 0$.

# %% tags=["readme-image"]
fig = viz.plot_token_signals(dragin, signals=("prob", "entropy", "max_attention", "rind"))
fig

# %% [markdown]
# The same columns as rows, and every trigger check: which output token each checked segment starts at,
# whether it fired, and at which token. A check that fired also scored the tokens after the firing one;
# those were discarded, and their scores stay in `decision.token_scores`.

# %%
for j, d in enumerate(dragin.decisions):
    n = len(d.token_scores or [])
    print(f"check {j}: segment of {n} tokens from output token {d.output_start}: "
          f"{'FIRED' if d.fire else 'held'} at index {d.index} ({d.token!r}, {d.score:.3f} vs θ={d.threshold})")

rows = viz.token_signal_table(dragin)
print(f"\n{'col':>3} {'kind':9} {'token':14} {'prob':>5} {'H':>5} {'a_max':>6} {'rind':>6}")
for r in rows[:14]:
    print(f"{r['column']:>3} {r['kind']:9} {r['text']!r:14} {r['prob']:5.2f} {r['entropy']:5.2f} "
          f"{r['max_attention']:6.3f} {r['rind']:6.3f}")

# %% [markdown]
# ## 2. DRAGIN's query: attention over the context (QFS)
#
# When RIND fires at token $t_i$, DRAGIN (§3.2, *Query Formulation based on Self-attention*) reads the
# attention row of $t_i$ (last layer, averaged over heads) over the question and the output written before
# it, keeps the `top_n` most attended tokens, puts them back in their original order and drops stop words:
# that is the search query. Top: the attention of each context token, the chosen ones in blue. Bottom: the
# same context as text, shaded by attention, the chosen tokens boxed; the trigger token closes it in red.

# %%
if dragin.retrievals:
    fig = viz.plot_qfs_attention(dragin.retrievals[0])
else:
    fig = None
    print("DRAGIN did not retrieve on this run: nothing to show.")
fig

# %% [markdown]
# ## 3. FLARE: low-probability tokens in a look-ahead sentence
#
# FLARE-direct (Jiang et al., 2023, §3.2) first retrieves with the question, then generates the next
# sentence as a *look-ahead*. If any of its tokens has probability below $\theta = 0.8$ (Eq. 3), the
# sentence is thrown away, the passages are retrieved with the sentence minus its uncertain words (tokens
# with probability below $\beta = 0.4$ masked, §3.2.2) and the sentence is generated again. The red column is
# the token of the discarded look-ahead that had the lowest probability; the answer's tokens come after it.

# %%
t0 = time.perf_counter()
flare = ActiveRAG.from_preset("flare", lm, index, max_new_tokens=MAX_NEW_TOKENS).run(QUESTION)
print(f"{time.perf_counter() - t0:.1f} s, {flare.generated_tokens} tokens generated\n")
print("Answer:", flare.answer)
for k, r in enumerate(flare.retrievals, 1):
    why = "with the question, before generating" if r.token is None else f"{r.token!r} had p = {r.score:.2f} < {r.threshold}"
    print(f"R{k} at output token {r.position}: {why}\n   query: {r.query!r}")
fig = viz.plot_token_signals(flare, signals=("prob", "entropy"))
fig

# %% [markdown]
# ## 4. The same question, both methods
#
# Top: one lane per method along its answer, a red tick where each retrieval happened. Below: each answer
# with its retrieval points marked `⟦Rk⟧`, and what each retrieval searched for and found. FLARE retrieves
# up front and whenever a sentence looks uncertain; DRAGIN only when an uncertain token matters to the
# rest of the text, with a query built from what the model attended to.

# %%
fig = viz.compare_methods({"FLARE": flare, "DRAGIN": dragin})
fig

# %% [markdown]
# The retrievals along DRAGIN's output, with the probability of each answer token; each shaded span is
# generated with the passages of the retrieval that opens it.

# %%
fig = viz.plot_retrieval_timeline(dragin)
fig

# %% [markdown]
# Every figure is a plain `matplotlib.figure.Figure`: `fig.savefig("why.png", dpi=150)` writes it. Try
# another threshold (`RindTrigger(theta=0.2)`), another query formulator (`query="last-sentence"`), or your
# own question; `viz.token_signal_table(result)` gives the numbers behind the heat map.
