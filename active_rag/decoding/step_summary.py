"""A greedy decode step's token, log-probability and entropy for every sequence in one op on the CPU (beyond the
papers; DRAGIN Eq. 1 for the entropy).

A greedy session needs three numbers from each step's logits: the token (``argmax``), its log-probability and the
entropy of the distribution. Computed from torch's ops, that is about ten passes over the vocabulary a sequence
(``log_softmax``, ``argmax``, then ``exp``, a comparison, a product, a ``where`` and a sum for the entropy) and three
synchronising reads: 0.5-1.5 ms of a qwen2.5-coder-0.5b step. Where active-rag's kernels are built, the decode
scheduler computes them for the whole batch with their ``greedy_summary`` op (``csrc/summary.cpp``, 175-195 us a
sequence) and hands each session its ``(token, log-probability, entropy)``, as the GPU's graphed step does
(:func:`~active_rag.decoding.graph_step.greedy_summary`). The token is ``argmax``'s; the two numbers differ from
torch's by float32 rounding (on random logits they are closer to a float64 computation than torch's own: 5e-7
against 6e-5). A session with a logits processor or a temperature reads the logits as before.
:data:`VARIABLE` ``=torch`` keeps torch's ops.
"""

from __future__ import annotations

import os

import torch

from .. import kernels

__all__ = ["VARIABLE", "describe", "kernel_summarizes", "summaries"]

VARIABLE = "ACTIVE_RAG_STEP_SUMMARY"
"""Environment variable: ``torch`` makes greedy sessions compute their token, log-probability and entropy with torch's
ops from the logits (as before the op existed)."""

_KNOWN: dict[tuple[str | None, ...], bool] = {}


def kernel_summarizes() -> bool:
    """Whether a CPU step's greedy summaries come from the kernels' op: they decode here
    (:func:`active_rag.kernels.available`) and :data:`VARIABLE` is not ``torch`` (kept for the variables' values)."""
    environ = os.environ
    key = (environ.get(VARIABLE), environ.get(kernels.DECODE_KERNEL_VARIABLE), environ.get(kernels.ISA_VARIABLE))
    known = _KNOWN.get(key)
    if known is None:
        off = (key[0] or "").strip().lower() in ("torch", "off", "0", "false", "no")
        known = _KNOWN[key] = not off and kernels.available()
    return known


def summaries(logits: torch.Tensor) -> list[tuple[int, float, float]] | None:
    """Each row's ``(token, log-probability, entropy)`` of float32 ``logits`` ``[batch, vocab]`` on the CPU, in one
    op and one read; ``None`` where the op does not apply (another device or dtype, :func:`kernel_summarizes` false)."""
    if logits.device.type != "cpu" or logits.dtype != torch.float32 or logits.dim() != 2 or not kernel_summarizes():
        return None
    rows = torch.ops.active_rag.greedy_summary.default(logits, 0).tolist()
    return [(int(token), logprob, entropy) for token, logprob, entropy in rows]


def describe() -> str:
    """For ``active-rag doctor``: where a greedy CPU step's token, log-probability and entropy come from."""
    return "active-rag's op" if kernel_summarizes() else "torch's ops"
