"""Attention of one query as two matrix products (active_rag.decoding.attention.one_query_attention)."""

from __future__ import annotations

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from active_rag.decoding.attention import one_query_attention, takes_one_query_path


class _Layer(torch.nn.Module):
    def __init__(self, groups: int) -> None:
        super().__init__()
        self.num_key_value_groups = groups
        self.is_causal = True


@pytest.mark.parametrize(("heads", "kv_heads"), [(12, 2), (14, 2), (4, 4)])
def test_one_query_equals_sdpa_on_a_view_of_a_growing_buffer(heads: int, kv_heads: int) -> None:
    g = torch.Generator().manual_seed(heads)
    query = torch.randn(1, heads, 1, 16, generator=g)
    keys = torch.randn(1, kv_heads, 300, 16, generator=g)[:, :, :237]  # a GrowingLayer's view
    values = torch.randn(1, kv_heads, 300, 16, generator=g)[:, :, :237]
    layer = _Layer(heads // kv_heads)
    expected, _ = sdpa_attention_forward(layer, query, keys, values, None, scaling=0.25)
    got = one_query_attention(layer, query, keys, values, scaling=0.25)
    assert got.shape == expected.shape == (1, 1, heads, 16)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_only_a_plain_float32_decode_step_on_the_cpu_takes_it() -> None:
    q, k = torch.zeros(1, 4, 1, 8), torch.zeros(1, 2, 5, 8)
    assert takes_one_query_path(q, k, None, {"scaling": 0.3, "dropout": 0.0, "sliding_window": None})
    assert not takes_one_query_path(torch.zeros(1, 4, 2, 8), k, None, {})  # prefill
    assert not takes_one_query_path(q, k, torch.ones(1, 1, 1, 5, dtype=torch.bool), {})  # a mask
    assert not takes_one_query_path(q.bfloat16(), k.bfloat16(), None, {})  # bfloat16: the model's own kernel
    assert not takes_one_query_path(q, k, None, {"sliding_window": 4096})
    assert not takes_one_query_path(q, k, None, {"s_aux": torch.zeros(4)})
