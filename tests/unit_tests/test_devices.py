"""Tensors made by the engine meet the model's tensors on the model's device (issue 25).

The CPU build has a second device, ``meta``: a tensor made on the CPU (the default) that meets a ``meta`` tensor
fails as it would against a CUDA tensor ("Tensor on device meta is not on the expected device cpu"), so each
test hands the code under test ``meta`` tensors in place of a GPU's."""

from __future__ import annotations

import pytest
import torch

from active_rag import ActiveLM


def test_structured_output_mask_is_built_on_the_logits_device(tiny_lm: ActiveLM) -> None:
    pytest.importorskip("llguidance")
    from active_rag.constrained import JsonSchemaConstraint

    vocab = len(tiny_lm.tokenizer)
    prompt = tiny_lm.encode("{")
    constraint = JsonSchemaConstraint(tiny_lm, {"type": "object", "properties": {"a": {"type": "integer"}}}, len(prompt))
    masked = constraint(prompt, torch.zeros(vocab, device="meta"))
    assert masked.device.type == "meta" and masked.shape == (vocab,)
    # the same mask on the CPU: some tokens allowed, most masked (the mask is real, not skipped)
    cpu = constraint(prompt, torch.zeros(vocab))
    assert 0 < int(torch.isfinite(cpu).sum()) < vocab
