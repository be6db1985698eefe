"""The held-out two-hop questions answered by a default whose linked look keeps the premise's pages (the rule
before ``active_rag.answer.premise.premise_pages``), for the rows beside this file.

The engine's key does not name the rule, so these rows live in a folder of their own
(``eval-without-premise-rule/``) and are never resumed by a run with the rule::

    python research/pydocs_heldout.py --data-dir ../shared/data --out /tmp/pyheld --per-type 20
    python results/eval-heldout/pydocs-twohop/without_premise_rule.py qwen2.5-coder-1.5b \
        results/eval-heldout/pydocs-twohop/eval-without-premise-rule sr-rag-choose [/tmp/pyheld]
"""

import sys
from pathlib import Path

import torch

import active_rag.engine.retrieving as retrieving
from active_rag.evaluation.runner import EvalConfig, run_eval

if __name__ == "__main__":
    torch.set_num_threads(2)
    retrieving.premise_pages = lambda question, passages: []  # the linked look keeps every page it held
    model, out, method = sys.argv[1:4]
    data = Path(sys.argv[4]) if len(sys.argv) > 4 else Path("/tmp/pyheld")
    config = EvalConfig(dataset="pydocs", data_dir=data, out_dir=Path(out), methods=[method], model=model,
                        weights="mixed", batch_size=8, plots=False,
                        **({"context": "focus"} if method == "look-again-choose" else {}))
    run_eval(config, progress=False)
