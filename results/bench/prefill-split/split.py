"""How much a prompt's next-token log-probabilities move when the prefix cache splits its prefill (docs/evaluation.md).

qwen2.5-coder-0.5b `mixed`, 2 threads: a 1,000-token prompt prefilled at once, then as a prefix and a continuation of
40-300 tokens (<= 64 rows take the int8 kernel, more the dequantised bfloat16 product).
"""
import os, torch
os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(2)
from active_rag.decoding.model import ActiveLM
from active_rag.evaluation.bench_weights import _prefill_prompt
lm = ActiveLM.load("qwen2.5-coder-0.5b", weights="mixed", device="cpu")
ids = _prefill_prompt(lm, 1000)
model = lm.model
def run(split):
    with torch.inference_mode():
        if split is None:
            out = model(torch.tensor([ids]), use_cache=True)
        else:
            o1 = model(torch.tensor([ids[:split]]), use_cache=True)
            out = model(torch.tensor([ids[split:]]), past_key_values=o1.past_key_values, use_cache=True)
    return torch.log_softmax(out.logits[0, -1].float(), -1)
base = run(None)
for s in (960, 936, 900, 700):
    lp = run(s)
    print(f"split at {s} ({1000-s} new rows): max |dlogp| {float((lp-base).abs().max()):.4f}, top1 same {int(lp.argmax())==int(base.argmax())}, p(top) {float(base.max().exp()):.4f} vs {float(lp[base.argmax()].exp()):.4f}")
