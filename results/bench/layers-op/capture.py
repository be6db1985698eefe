"""The layers op with the attention row captured at every step (as DRAGIN decodes): ``python results/bench/layers-op/capture.py MODEL``
(mixed weights, 2 threads, a 130-token prompt; 8 rounds of 24 steps, the two ways alternating; medians; whether 24 tokens,
their signals and rows are the same both ways)."""
import os, sys, time, threading, statistics
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import active_rag, torch
torch.set_num_threads(2)
from active_rag.decoding.model import ActiveLM
lm = ActiveLM.load(sys.argv[1], weights="mixed", device="cpu")
lean = lm.scheduler._lean
ids = lm.prompt_ids("Tell me a long story about the history of Python packaging. " * 10)
res = {True: [], False: []}; toks = {}
def work():
    for on in (True, False):
        lean.layers_op = on
        toks[on] = [(s.id, s.logprob, s.entropy, None if s.attention is None else s.attention.sum().item()) for s in lm.session(ids, capture_attention=True).generate(24)]
    for r in range(8):
        for on in ((True, False) if r % 2 else (False, True)):
            lean.layers_op = on
            s = lm.session(ids, capture_attention=True); list(s.generate(2))
            t0 = time.perf_counter(); list(s.generate(24)); res[on].append((time.perf_counter()-t0)/24*1000)
t = threading.Thread(target=work); t.start(); t.join()
print(sys.argv[1], "capture: one op", round(statistics.median(res[True]),1), "loop", round(statistics.median(res[False]),1), "same" if toks[True]==toks[False] else "DIFFERENT", toks[True][0])
