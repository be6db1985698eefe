"""SR-RAG after FLARE on one prefix cache (one eval run with both methods): SR-RAG's prompt is FLARE's first."""
import json, sys, time, torch
torch.set_num_threads(2)
from active_rag.decoding.model import ActiveLM
from active_rag.evaluation.runner import EvalConfig, EvalWorker, plan_eval
from active_rag.evaluation.throughput import _prefix_pass
lm = ActiveLM.load("qwen2.5-coder-0.5b")
cfg = EvalConfig(dataset="hotpotqa", methods=["flare", "sr-rag"], limit=10, plots=False)
_, data_dir, examples = plan_eval(cfg)
worker = EvalWorker(cfg, lm, data_dir=data_dir)
out = {}
for name in ("flare", "sr-rag"):
    rows = _prefix_pass(worker, name, examples, 1)
    out[name] = {"s_per_q": rows[0]["pass_seconds"] / len(rows),
                 "prefilled_per_q": sum(r["prompt_tokens"]["prefilled"] for r in rows) / len(rows),
                 "cached_per_q": sum(r["prompt_tokens"]["cached"] for r in rows) / len(rows),
                 "predictions": [r["prediction"] for r in rows]}
    print(name, {k: v for k, v in out[name].items() if k != "predictions"}, flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)
