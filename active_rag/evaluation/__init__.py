"""Evaluation harness pieces that need no model: metrics, dataset loaders, answer extraction and the papers' prompts.

* :mod:`~active_rag.evaluation.metrics` -- SQuAD EM, HotpotQA F1, StrategyQA accuracy, RetrievalQA match,
  router decision metrics, aggregation.
* :mod:`~active_rag.evaluation.answers` -- DRAGIN-style "So the answer is" extraction (its stop detection,
  :func:`~active_rag.stopping.has_completed_answer`, is the engine's stop rule, re-exported here).
* :mod:`~active_rag.evaluation.datasets` -- HotpotQA, 2WikiMultihopQA, StrategyQA and RetrievalQA loaders.
* :mod:`~active_rag.evaluation.prompts` -- DRAGIN appendix F exemplars/templates, RetrievalQA templates.
* :mod:`~active_rag.evaluation.runner` -- ``active-rag eval``: :func:`run_eval` runs engine methods on a dataset.
* :mod:`~active_rag.evaluation.bench` -- ``active-rag bench``: :func:`run_bench` measures the engine's overhead.
* :mod:`~active_rag.evaluation.plots` -- :func:`plot_methods`, :func:`plot_sweep` (matplotlib, Agg).
* :mod:`~active_rag.evaluation.cli` -- :func:`register` adds the ``eval`` and ``bench`` subcommands.
"""

from __future__ import annotations

from active_rag.evaluation.answers import (
    ANSWER_PHRASE,
    extract_answer,
    needs_answer_prompt,
    retrievalqa_decision,
)
from active_rag.evaluation.bench import BenchConfig, run_bench
from active_rag.evaluation.datasets import (
    DATASETS,
    Example,
    corpus_path,
    default_data_dir,
    load_dataset,
    questions_path,
)
from active_rag.evaluation.metrics import (
    F1Score,
    aggregate,
    decision_metrics,
    exact_match,
    extract_yes_no,
    f1_precision_recall,
    match,
    match_accent_folded,
    normalize_answer,
    qa_scores,
    strategyqa_accuracy,
)
from active_rag.evaluation.plots import plot_methods, plot_sweep
from active_rag.evaluation.prompts import EXEMPLARS, build_eval_prompt, fewshot_block
from active_rag.evaluation.config import EvalConfig, MethodSpec, eval_prompt_template
from active_rag.evaluation.runner import EvalReport, run_eval
from active_rag.stopping import COMPLETED_ANSWER_RE, has_completed_answer

__all__ = [
    "ANSWER_PHRASE",
    "COMPLETED_ANSWER_RE",
    "DATASETS",
    "EXEMPLARS",
    "BenchConfig",
    "EvalConfig",
    "EvalReport",
    "Example",
    "F1Score",
    "MethodSpec",
    "aggregate",
    "build_eval_prompt",
    "corpus_path",
    "decision_metrics",
    "default_data_dir",
    "eval_prompt_template",
    "exact_match",
    "extract_answer",
    "extract_yes_no",
    "f1_precision_recall",
    "fewshot_block",
    "has_completed_answer",
    "load_dataset",
    "match",
    "match_accent_folded",
    "needs_answer_prompt",
    "normalize_answer",
    "plot_methods",
    "plot_sweep",
    "qa_scores",
    "questions_path",
    "retrievalqa_decision",
    "run_bench",
    "run_eval",
    "strategyqa_accuracy",
]
