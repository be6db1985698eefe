"""The timed runs of ``active-rag bench`` (:mod:`active_rag.evaluation.bench`): the engine's loops with retrieval
disabled, plain ``model.generate``, and the two naive references that get DRAGIN's signals without the engine."""

from __future__ import annotations

import contextlib
import copy
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from active_rag.decoding.model import ActiveLM

__all__ = ["LOOP_METHODS", "NAIVE_MODES", "LoopRun", "generate_run", "loop_run", "naive_segment_run", "naive_token_run"]

#: Engine loops measured, with the trigger setting that never fires.
# (finite: triggers reject infinite thresholds; no RIND score reaches 1e12, no probability is below 0)
LOOP_METHODS: dict[str, tuple[str, float]] = {"dragin": ("rind", 1e12), "flare": ("low-confidence", 0.0)}
NAIVE_MODES = ("token", "segment")
_SEGMENT = 100  # RindTrigger.max_tokens: DRAGIN's generation length per check (Table 9)


class _NoRetriever:
    """Retrieval is disabled in (a): being called is a bug in the benchmark."""

    def retrieve(self, query: str, k: int) -> list[Any]:
        raise RuntimeError("the benchmark's trigger fired: retrieval should be disabled")


def _no_eos(lm: ActiveLM, *, prefix_cache: bool = False) -> tuple[ActiveLM, list[tuple[list[int], Any]]]:
    """A shallow copy of ``lm`` (same weights and tokenizer) that never stops on end-of-sequence and records
    (prompt ids, session) for every decoding session it opens. The prefix cache is off unless asked for:
    ``model.generate`` prefills every prompt, so the loop must too for a like-for-like ratio."""
    from active_rag.decoding.model import ActiveLM as _ActiveLM

    clone = copy.copy(lm)
    clone.eos_token_ids = frozenset()
    if not prefix_cache:
        clone.prefix_cache = None
    opened: list[tuple[list[int], Any]] = []

    def session(ids: Sequence[int], *, capture_attention: bool = False) -> Any:
        s = _ActiveLM.session(clone, ids, capture_attention=capture_attention)
        opened.append((list(ids), s))
        return s

    clone.session = session  # type: ignore[method-assign]
    return clone, opened


@dataclass
class LoopRun:
    """One engine loop run: wall seconds, the prompt ids of its first session, sessions opened, and model forward
    passes (prefill chunks + one per generated token + re-feeds after a crop)."""

    seconds: float
    prompt_ids: list[int]
    sessions: int
    forward_passes: int


def loop_run(lm: ActiveLM, method: str, question: str, n: int) -> LoopRun:
    """(a): the engine's ``method`` loop for exactly ``n`` tokens, retrieval disabled, signals on."""
    from active_rag.engine import ActiveRAG
    from active_rag.components.triggers import make_trigger

    clone, opened = _no_eos(lm)
    trigger, theta = LOOP_METHODS[method]
    rag = ActiveRAG.from_preset(method, clone, _NoRetriever(), trigger=make_trigger(trigger, theta=theta),
                                max_new_tokens=n, initial_retrieval=False,
                                stop_when_answered=False, repetition_guard=False)  # exactly n tokens, like generate
    t0 = time.perf_counter()
    result = rag.run(question)
    seconds = time.perf_counter() - t0
    if len(result.tokens) != n or result.retrievals:
        raise RuntimeError(
            f"{method} loop produced {len(result.tokens)} tokens and {len(result.retrievals)} retrievals; expected {n} and 0"
        )
    return LoopRun(seconds, opened[0][0], len(opened), sum(int(s.forward_passes) for _, s in opened))


def _generate_kwargs(lm: ActiveLM) -> dict[str, Any]:
    tok = lm.tokenizer
    pad = getattr(tok, "pad_token_id", None)
    if pad is None:
        pad = getattr(tok, "eos_token_id", None) or 0
    return {"do_sample": False, "use_cache": True, "pad_token_id": pad, "temperature": None, "top_p": None, "top_k": None}


def generate_run(lm: ActiveLM, ids: Sequence[int], n: int) -> float:
    """(a) baseline: ``model.generate`` with the KV cache, greedy, exactly ``n`` new tokens. Returns seconds."""
    import torch

    model = lm.model
    input_ids = torch.tensor([list(ids)], dtype=torch.long, device=model.device)
    with torch.inference_mode():
        t0 = time.perf_counter()
        out = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=n,
                             min_new_tokens=n, **_generate_kwargs(lm))
        seconds = time.perf_counter() - t0
    if out.shape[1] - len(ids) != n:
        raise RuntimeError(f"model.generate produced {out.shape[1] - len(ids)} tokens, expected {n}")
    return seconds


@contextlib.contextmanager
def _eager_attention(lm: ActiveLM) -> Iterator[None]:
    """Every layer on eager attention (``output_attentions`` needs it), the engine's captured layer included
    (its capture wrapper delegates to ``_active_rag_inner`` when no capture is active); restored afterwards."""
    model = lm.model
    old = model.config._attn_implementation
    wrapped = [m for m in model.modules() if hasattr(m, "_active_rag_inner")]
    inner = [m._active_rag_inner for m in wrapped]
    model.set_attn_implementation("eager")
    for m in wrapped:
        m._active_rag_inner = "eager"
    try:
        yield
    finally:
        model.set_attn_implementation(old)
        for m, value in zip(wrapped, inner, strict=True):
            m._active_rag_inner = value


def _step(lm: ActiveLM, seq: Sequence[int], logits: Any) -> Any:
    """Greedy next token (end-of-sequence excluded) with its log-probability and entropy (DRAGIN Eq. 1)."""
    import torch

    from active_rag.signals import entropy_from_logprobs
    from active_rag.types import TokenStep

    logits = logits.float().clone()
    logprobs = torch.log_softmax(logits, dim=-1)
    for e in lm.eos_token_ids:
        if e < logits.shape[0]:
            logits[e] = -math.inf
    tok = int(torch.argmax(logits))
    entropy = entropy_from_logprobs(logprobs)
    return TokenStep(id=tok, text=lm.token_text(seq, tok), logprob=float(logprobs[tok]), entropy=entropy, position=len(seq))


def naive_token_run(lm: ActiveLM, ids: Sequence[int], n: int, segment: int = _SEGMENT) -> float:
    """(b) naive-token: no KV cache; a full eager forward with ``output_attentions=True`` over the whole sequence
    per generated token (plus one for the last token's row); RIND checked per ``segment`` tokens. Seconds."""
    import torch

    from active_rag.components.triggers import RindTrigger, SegmentContext

    model = lm.model
    trigger = RindTrigger(theta=1e12)
    seq = list(ids)
    a_max = torch.zeros(len(seq) + n + 1, device=model.device)  # filled from the model's attention rows
    steps: list[Any] = []
    with _eager_attention(lm), torch.inference_mode():
        t0 = time.perf_counter()
        for i in range(n + 1):
            out = model(input_ids=torch.tensor([seq], device=model.device), output_attentions=True, use_cache=False,
                        logits_to_keep=1)
            if i > 0:  # the row of the token just fed, over every earlier position (DRAGIN Eq. 2-3)
                row = out.attentions[-1][0, :, -1, :-1].float().mean(dim=0)
                torch.maximum(a_max[: row.shape[0]], row, out=a_max[: row.shape[0]])
            if len(steps) == segment or (i == n and steps):
                trigger.check(SegmentContext(steps, a_max, "", i == n))
                steps = []
            if i < n:
                step = _step(lm, seq, out.logits[0, -1])
                seq.append(step.id)
                steps.append(step)
        seconds = time.perf_counter() - t0
    return seconds


def naive_segment_run(lm: ActiveLM, ids: Sequence[int], n: int, segment: int = _SEGMENT) -> float:
    """(b) naive-segment, the official DRAGIN ``generate_attn`` structure: per segment, ``model.generate`` from the
    whole sequence so far (output scores for the entropies), then one eager forward with ``output_attentions=True``
    over the whole sequence for ``a_max``; RIND checked on the segment. Seconds."""
    import torch

    from active_rag.signals import entropy_from_logprobs
    from active_rag.components.triggers import RindTrigger, SegmentContext
    from active_rag.types import TokenStep

    model = lm.model
    trigger = RindTrigger(theta=1e12)
    seq = list(ids)
    kwargs = _generate_kwargs(lm)
    with _eager_attention(lm), torch.inference_mode():
        t0 = time.perf_counter()
        done = 0
        while done < n:
            s = min(segment, n - done)
            input_ids = torch.tensor([seq], device=model.device)
            out = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=s,
                                 min_new_tokens=s, output_scores=True, return_dict_in_generate=True, **kwargs)
            new = out.sequences[0, len(seq):].tolist()
            full = torch.tensor([seq + new], device=model.device)
            att = model(input_ids=full, output_attentions=True, use_cache=False, logits_to_keep=1).attentions[-1][0]
            rows = att.float().mean(dim=0)  # [L, L], head-averaged
            a_max = rows[len(seq):, :].max(dim=0).values  # largest attention any generated token paid to each position
            steps = []
            context = list(seq)
            for tok, scores in zip(new, out.scores, strict=True):
                logprobs = torch.log_softmax(scores[0].float(), dim=-1)
                steps.append(TokenStep(id=tok, text=lm.token_text(context, tok), logprob=float(logprobs[tok]),
                                       entropy=entropy_from_logprobs(logprobs), position=len(context)))
                context.append(tok)
            trigger.check(SegmentContext(steps, a_max, "", done + s >= n))
            seq.extend(new)
            done += s
        seconds = time.perf_counter() - t0
    return seconds
