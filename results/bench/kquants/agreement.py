"""Agreement of the k-quant layers' rows with float32's and with the layouts before them (HotpotQA dev).

    python results/bench/kquants/agreement.py

Reads the rows `run.sh` wrote under results/eval-weights-kquants/ and results/eval-weights-kquants-off/ and the
committed float32 rows under results/eval-weights/ (the table of docs/weights.md), and prints one table: same answer,
same text, same retrieval decisions on the first 20 questions both answered, F1 with the paired 95% interval on all
of them.
"""

from __future__ import annotations

import active_rag  # noqa: F401  (before torch)

from pathlib import Path

from active_rag.evaluation.bench_weights import agreement
from active_rag.evaluation.datasets import load_dataset

ROOT = Path(__file__).resolve().parents[3] / "results"
CASES = [  # (model, methods, questions scored)
    ("qwen2.5-coder-0.5b", ("sr-rag", "flare"), 20),
    ("qwen2.5-coder-1.5b", ("sr-rag",), 50),
]


def main() -> None:
    order = [e.id for e in load_dataset("hotpotqa", None, limit=50, resolve_gold_ids=False)]
    print("| Model | Method | Against | Same answer | Same text | Same retrievals | F1 | F1 against | Difference [95% CI] |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for model, methods, n in CASES:
        mine = ROOT / "eval-weights-kquants" / "hotpotqa" / f"{model}-mixed"
        against = {"float32": ROOT / "eval-weights" / "hotpotqa" / model,
                   "mixed before (ACTIVE_RAG_KQUANTS=off)": ROOT / "eval-weights-kquants-off" / "hotpotqa" / f"{model}-mixed"}
        for name, folder in against.items():
            for method, r in agreement(folder, mine, methods, order, 20, n).items():
                if not r["questions"]:
                    continue
                print(f"| {model} | {method} | {name} | {r['same_answer']}/{r['questions']} | {r['same_text']}/{r['questions']} | "
                      f"{r['same_decisions']}/{r['questions']} | {r['f1']:.1f} | {r['f1_float32']:.1f} | "
                      f"{r['f1_difference']:+.1f} [{r['f1_low']:+.1f}, {r['f1_high']:+.1f}] (n={r['f1_questions']}) |")


if __name__ == "__main__":
    main()
