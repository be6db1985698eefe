"""Probe (not part of the engine): forbid "yes" and "no" as the answer's first token on yes/no questions, so the
reader writes its reasoning before the verdict, then run `active-rag eval` with the arguments given.

The rows in `results/probe-reason-first/` came from the 41 yes/no questions of HotpotQA dev-b (a copy of the data
folder whose `questions_dev_b.jsonl` keeps the questions `question_form` reads as yes-no):

    python results/choose/probe_reason_first.py eval --model qwen2.5-coder-1.5b --weights mixed --batch-size 8 \
        --threads 2 --dataset hotpotqa --split dev-b --methods look-again-choose --data-dir YES_NO_COPY \
        --out results/probe-reason-first/pool        # and a copy of the union's: .../union

The first answer token is found by the Qwen chat template (the prompt ends with "assistant" and a newline), so the
probe is for the Qwen registry models only. docs/context.md ("Where the misses are, on hidden-title dev-b") has the
result: the "yes" answers did not fall, so no rule was built.
"""
import sys

import torch

from active_rag.decoding.constrained import chain
from active_rag.engine import generation
from active_rag.answer.read_choice import question_form

_BANNED: dict[int, torch.Tensor] = {}


class VerdictLater:
    """Logits processor: at the answer's first token, every token that reads "yes" or "no" is forbidden."""

    def __init__(self, lm):
        self.lm = lm
        if id(lm) not in _BANNED:
            tok = lm.tokenizer
            _BANNED[id(lm)] = torch.tensor([i for i in range(len(tok))
                                            if tok.decode([i]).strip().strip(",.!:").lower() in ("yes", "no")])
        self.ids = _BANNED[id(lm)]

    def __call__(self, ids, logits):
        if self.lm.decode(list(ids[-3:])).endswith("assistant\n"):
            logits[..., self.ids.to(logits.device)] = float("-inf")
        return logits


_own = generation.Generation.processor


def _processor(self, run, base=None):
    p = _own(self, run, base)
    return chain(p, VerdictLater(self.model)) if question_form(run.question) == "yes-no" else p


if __name__ == "__main__":
    generation.Generation.processor = _processor
    from active_rag.cli import main

    sys.exit(main(sys.argv[1:]))
