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
# # A small benchmark
#
# Two measurements with the evaluation harness (`active_rag.evaluation`), sized to run in a few minutes on
# a CPU:
#
# 1. **Answer quality** on the shared HotpotQA development slice: a few questions, a few methods, the
#    comparison table, and a sweep of DRAGIN's RIND threshold (the analogue of FLARE's Figure 5 and DRAGIN's
#    Table 5: how scores and the retrieval rate move with $\theta$).
# 2. **Speed**: what the engine's signals cost (`active-rag bench`): the DRAGIN and FLARE loops against
#    plain `model.generate`, and against a naive implementation that re-runs a full forward pass with
#    attentions at every token.
#
# The evaluation needs the HotpotQA slice (`../shared/data` next to the repository, or `$ACTIVE_RAG_DATA`);
# without it those cells say so and do nothing. SmolLM2-135M answers multi-hop questions poorly (the
# harness's default model is Qwen2.5-Coder-0.5B): with 5 questions the numbers show the mechanics, not a
# ranking. The same runs from the command line: `active-rag eval` and `active-rag bench`.

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

# %% [markdown]
# ## 1. Answer quality on HotpotQA
#
# `run_eval` runs each method on the first questions of the slice, with the DRAGIN paper's few-shot
# chain-of-thought prompt (appendix F), BM25 over the slice's corpus (built once and cached), and DRAGIN's
# answer handling (appendix B: stop at a completed answer, append "So the answer is" when missing). It
# scores exact match and F1 (SQuAD-style), retrievals per question and the share of retrievals that found
# a gold paragraph. Methods: the model alone (`wo-rag`), one retrieval with the question (`sr-rag`), and
# DRAGIN at each threshold of the sweep (`dragin@theta=...`). Add `"flare"`, `"fl-rag"`, ... to `methods`
# for more (each costs one run per question; a sweep over `theta` also applies to FLARE's trigger, whose
# theta is a probability, so sweep them separately).

# %%
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

# %% [markdown]
# What each method answered, per question (the harness extracts the answer after "So the answer is"):

# %%
if report is not None:
    for method, rows in report.rows.items():
        for row in rows:
            m = row["metrics"]
            print(f"{method:22} EM={m['em']:.0f} F1={m['f1']:.2f} retrievals={m['retrievals']} "
                  f"answer={row.get('answer')!r} gold={row.get('gold')}")

# %% [markdown]
# The comparison plot (`active_rag.evaluation.plots.plot_methods`): headline scores and retrievals per
# question, one group per method.

# %%
if report is not None:
    from active_rag.evaluation.plots import plot_methods

    display(Image(filename=str(plot_methods(report.to_dict(), OUT / "methods.png"))))

# %% [markdown]
# The threshold sweep (`plot_sweep`): left, the scores against $\theta$; right, retrievals per question and
# the share of RIND checks that fired. A lower threshold retrieves more often (FLARE Fig. 5, DRAGIN Table 5).

# %%
if report is not None and report.sweep:
    from active_rag.evaluation.plots import plot_sweep

    for row in report.sweep:
        print(f"theta={row['value']:<5g} EM={row.get('em', 0):.2f} F1={row.get('f1', 0):.2f} "
              f"retrievals/q={row.get('retrievals_per_question', 0):.2f} fire rate={row.get('trigger_fire_rate') or 0:.2f}")
    display(Image(filename=str(plot_sweep(report.sweep, OUT / "sweep.png", title="DRAGIN: RIND threshold sweep"))))

# %% [markdown]
# ## 2. Speed: what the signals cost
#
# `run_bench` times, on the same prompt token ids and output lengths (end-of-sequence disabled so every run
# writes exactly N tokens):
#
# * **loop / generate**: the DRAGIN and FLARE loops with signals on but a threshold that never fires, against
#   plain `model.generate` with the KV cache. The engine reads logits, entropy and one layer's attention
#   row from the same single pass, so this should stay close to 1 (target <= 1.15).
# * **speedup vs naive-token**: a naive DRAGIN that runs a full forward pass with `output_attentions=True`
#   over the whole sequence at every token (no KV cache). Target: the engine at least 5x faster at 256
#   tokens; the gap grows with the length.
#
# Here only short outputs, one prompt, one repeat: the ratios are indicative, and on a shared, busy CPU
# they move by 20% or more from run to run (a loop/generate ratio below 1 is such noise). For stable
# numbers: `active-rag bench --tokens 64,128,256 --prompts 3 --repeats 3`.

# %%
from active_rag.evaluation.bench import BenchConfig, format_bench_table, run_bench

bench_config = BenchConfig(model="smollm2", tokens=[4] if FAST else [32, 64], prompts=1,
                           naive=["token"] if FAST else ["token", "segment"], memory=False, retrieval=False,
                           out_dir=OUT / "bench")
t0 = time.perf_counter()
bench = run_bench(bench_config, lm=lm, progress=False)
print(f"benchmark ran in {time.perf_counter() - t0:.0f} s\n")
for row in bench["speed"]:
    line = f"{row['method']:6} N={row['tokens']:<3} loop/generate = {row['loop_vs_generate']:.2f}"
    if row.get("speedup_vs_naive_token") is not None:
        line += f" | engine vs naive-token: {row['speedup_vs_naive_token']:.1f}x faster"
    if row.get("speedup_vs_naive_segment") is not None:
        line += f" | vs naive-segment: {row['speedup_vs_naive_segment']:.1f}x"
    print(line)
display(Markdown(format_bench_table(bench)))
