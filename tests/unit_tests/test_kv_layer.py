"""A key/value cache layer that grows in place (active_rag.decoding.kv_layer)."""

from __future__ import annotations

import pytest
import torch
from transformers.cache_utils import DynamicLayer

from active_rag.decoding.kv_layer import MIN_SPARE, GrowingLayer, growing_cache, is_full_attention_layer
from active_rag.decoding.prefix_cache import PrefixCache


def _kv(n: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, 2, n, 4, generator=g).to(dtype), torch.randn(1, 2, n, 4, generator=g).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_updates_and_crops_give_what_concatenation_gives(dtype: torch.dtype) -> None:
    grown, plain = GrowingLayer(), DynamicLayer()
    steps = [("update", 300), ("update", 1), ("update", 1), ("crop", -2), ("update", 1), ("update", 40),
             ("crop", -30), ("update", 1)] + [("update", 1)] * 100
    for i, (op, n) in enumerate(steps):
        if op == "crop":
            grown.crop(n)
            plain.crop(n)
            continue
        k, v = _kv(n, dtype, seed=i)
        gk, gv = grown.update(k, v)
        pk, pv = plain.update(k, v)
        assert torch.equal(gk, pk) and torch.equal(gv, pv) and gk.dtype == dtype
    assert grown.get_seq_length() == plain.get_seq_length() == 412 and grown.owns()


def test_a_decode_step_writes_in_place_until_the_room_to_spare_is_used() -> None:
    layer = GrowingLayer()
    layer.update(*_kv(1000))
    buffer = layer.keys.data_ptr()
    spare = max(MIN_SPARE, 1000 // 8)  # an eighth of the length, at least MIN_SPARE
    for i in range(spare):
        layer.update(*_kv(1, seed=i))
        assert layer.keys.data_ptr() == buffer  # no copy of the cache
    layer.update(*_kv(1))
    assert layer.keys.data_ptr() != buffer and layer.get_seq_length() == 1000 + spare + 1  # full: a larger buffer


def test_tensors_set_from_outside_are_never_written() -> None:
    shared_k, shared_v = _kv(50)
    before = shared_k.clone(), shared_v.clone()
    layer = GrowingLayer()
    layer.lazy_initialization(shared_k, shared_v)
    layer.keys, layer.values = shared_k[:, :, :20], shared_v[:, :, :20]  # a prefix-cache hit: views of an entry
    assert not layer.owns()
    k, v = layer.update(*_kv(1, seed=7))
    assert torch.equal(shared_k, before[0]) and torch.equal(shared_v, before[1])  # the entry is untouched
    assert torch.equal(k[:, :, :20], before[0][:, :, :20]) and layer.owns() and k.shape[-2] == 21


def test_the_prefix_cache_keeps_copies_of_exactly_the_prompts_size() -> None:
    layer = GrowingLayer()
    layer.update(*_kv(100))
    cache = PrefixCache(max_bytes=2**20)
    cache.insert(list(range(100)), [(layer.keys, layer.values)])
    hit = cache.lookup(list(range(100)))
    assert hit is not None
    entry_k = hit.kv[0][0]
    assert entry_k.untyped_storage().data_ptr() != layer.keys.untyped_storage().data_ptr()
    assert entry_k.untyped_storage().nbytes() == entry_k.numel() * entry_k.element_size()
    saved = entry_k.clone()
    layer.crop(-10)
    layer.update(*_kv(10, seed=3))  # the session writes over positions the entry holds
    assert torch.equal(hit.kv[0][0], saved)


def test_a_shared_prompt_is_held_once_and_a_write_below_it_goes_to_a_new_buffer() -> None:
    """The session that computed a prompt hands the prefix cache views of its own buffer (no copy); a crop into
    those positions and a step then copy the cache into a new buffer of the layer's own, so the entry never
    changes, while steps past the prompt write in place as before."""
    layer = GrowingLayer()
    layer.update(*_kv(100))
    views = layer.share(100)
    assert views is not None
    cache = PrefixCache(max_bytes=2**20)
    cache.insert(list(range(100)), [views], shared=True)
    hit = cache.lookup(list(range(100)))
    assert hit is not None
    entry_k = hit.kv[0][0]
    assert entry_k.untyped_storage().data_ptr() == layer.keys.untyped_storage().data_ptr()  # held once
    assert cache.stats()["mb"] == round(2 * entry_k.untyped_storage().nbytes() / 2**20, 2)  # counted whole
    saved = entry_k.clone()
    buffer = layer.keys.data_ptr()
    layer.update(*_kv(5, seed=2))  # past the prompt: in place
    assert layer.keys.data_ptr() == buffer and torch.equal(hit.kv[0][0], saved)
    layer.crop(-15)  # into the prompt
    k, _ = layer.update(*_kv(10, seed=3))
    assert torch.equal(hit.kv[0][0], saved) and layer.keys.data_ptr() != buffer  # a buffer of its own
    assert torch.equal(k[:, :, :90], saved[:, :, :90]) and layer.owns() and layer.get_seq_length() == 100
    assert GrowingLayer().share(1) is None  # nothing of its own to share


def test_the_cache_of_a_model_config_uses_growing_layers() -> None:
    from transformers import Qwen2Config

    config = Qwen2Config(vocab_size=32, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=1, intermediate_size=32)
    cache = growing_cache(config)
    assert all(type(layer) is GrowingLayer for layer in cache.layers)
    assert all(is_full_attention_layer(layer) for layer in cache.layers)
    assert is_full_attention_layer(DynamicLayer())
