"""A prompt's attention after a cached prefix in chunks over the key blocks each sees
(active_rag.decoding.prefill_attention): bit for bit the model's masked sdpa call, only where it is, and the same
logits and tokens through the engine."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import active_rag.decoding.prefill_attention as prefill
from active_rag import ActiveLM
from tests.unit_tests.test_model import _shared_conftest as _conftest  # tests/conftest.py, loaded by path


def _repeat_kv(x: torch.Tensor, times: int) -> torch.Tensor:
    """transformers' ``repeat_kv``, written out."""
    return torch.repeat_interleave(x, times, dim=1)


def _model_call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                scaling: float | None = None) -> torch.Tensor:
    """What transformers' sdpa attention computes for a masked prompt: heads copied, the whole mask, one call."""
    times = q.shape[1] // k.shape[1]
    return F.scaled_dot_product_attention(q, _repeat_kv(k, times), _repeat_kv(v, times), attn_mask=mask,
                                          scale=scaling).transpose(1, 2).contiguous()


def _causal(rows: int, prefix: int, batch: int = 1) -> torch.Tensor:
    return torch.ones(rows, prefix + rows, dtype=torch.bool).tril(prefix)[None, None].expand(batch, 1, -1, -1)


@pytest.mark.parametrize(("prefix", "rows"), [(629, 720), (150, 700), (1000, 600), (512, 512), (511, 2), (0, 939)])
def test_chunks_cover_the_rows_and_end_at_key_blocks(prefix: int, rows: int) -> None:
    pieces = prefill.chunks(prefix, rows)
    assert pieces[0][0] == 0 and pieces[-1][1] == rows
    assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:]))  # contiguous, in order
    for first, end, keys in pieces:
        assert first < end
        assert keys == prefix + rows or keys % prefill.KEY_BLOCK == 0
        assert prefix + end - 1 < keys  # the chunk's last query sees only keys the chunk holds
        assert (prefix + first) // prefill.KEY_BLOCK == (keys - 1) // prefill.KEY_BLOCK  # no block it cannot see


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize(("heads", "kv_heads", "dim", "prefix", "rows"),
                         [(12, 2, 128, 629, 720), (14, 2, 64, 150, 700), (4, 2, 16, 1000, 600), (2, 2, 32, 512, 520)])
def test_it_is_the_model_s_masked_call_bit_for_bit(heads: int, kv_heads: int, dim: int, prefix: int, rows: int,
                                                    dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    q = torch.randn(1, heads, rows, dim).to(dtype)
    k, v = (torch.randn(1, kv_heads, prefix + rows, dim).to(dtype) for _ in range(2))
    mask = _causal(rows, prefix)
    assert len(prefill.chunks(prefix, rows)) > 1
    for scaling in (None, 0.05):
        out = prefill.prefill_attention(q, k, v, mask, scaling)
        assert out is not None
        assert torch.equal(out, _model_call(q, k, v, mask, scaling))


def test_chunks_that_split_a_key_block_are_not_exact() -> None:
    """The equality above is not luck: chunks cut inside one of torch's key blocks change the float sums."""
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 4, 720, 64), torch.randn(1, 2, 1349, 64), torch.randn(1, 2, 1349, 64)
    mask = _causal(720, 629)
    cut = prefill._chunked(q, k, v, mask, None, prefill.chunks(629, 720, block=prefill.KEY_BLOCK // 4))
    assert not torch.equal(cut.transpose(1, 2).contiguous(), _model_call(q, k, v, mask))


def test_a_padded_batch_is_the_same_too() -> None:
    """Left padding masks more keys of one sequence's rows: still each row's own call."""
    torch.manual_seed(1)
    prefix, rows = 600, 300
    q, k, v = torch.randn(2, 4, rows, 32), torch.randn(2, 2, prefix + rows, 32), torch.randn(2, 2, prefix + rows, 32)
    mask = _causal(rows, prefix, batch=2).clone()
    mask[1, :, :, :40] = False  # the second sequence's first 40 positions are padding
    out = prefill.prefill_attention(q, k, v, mask)
    assert out is not None
    assert torch.equal(out, _model_call(q, k, v, mask))


def test_a_mask_that_sees_past_a_chunk_falls_back() -> None:
    q, k, v = torch.randn(1, 2, 600, 16), torch.randn(1, 2, 1200, 16), torch.randn(1, 2, 1200, 16)
    mask = _causal(600, 600).clone()
    mask[0, 0, 0, 1100] = True  # the first query sees a key its chunk (keys below 1024) does not hold
    assert prefill.prefill_attention(q, k, v, mask) is None
    assert prefill.prefill_attention(q, k, v, torch.ones(1, 1, 600, 1200, dtype=torch.bool)) is None


class Qwen2Attention(torch.nn.Module):  # a module of a family the path knows, by its class name
    def __init__(self, inner: str = "sdpa") -> None:
        super().__init__()
        self._active_rag_inner = inner


_Q, _K, _MASK = torch.randn(1, 4, 500, 16), torch.randn(1, 2, 900, 16), _causal(500, 400)

REFUSED = {  # each a call where the chunks would not be the model's call, or would not pay
    "a decode step": (Qwen2Attention(), _Q[:, :, :1], _K, _MASK[:, :, :1], {}),
    "no mask (sdpa's own causal call skips blocks already)": (Qwen2Attention(), _Q, _K, None, {}),
    "an additive mask": (Qwen2Attention(), _Q, _K, torch.zeros(1, 1, 500, 900), {}),
    "a mask over other keys": (Qwen2Attention(), _Q, _K[:, :, :-1], _MASK, {}),
    "one chunk": (Qwen2Attention(), _Q[:, :, 400:], _K[:, :, :500], _causal(100, 400), {}),
    "float16": (Qwen2Attention(), _Q.half(), _K.half(), _MASK, {}),
    "dropout": (Qwen2Attention(), _Q, _K, _MASK, {"dropout": 0.1}),
    "another family": (torch.nn.Module(), _Q, _K, _MASK, {}),
    "eager attention": (Qwen2Attention("eager"), _Q, _K, _MASK, {}),
}


def test_it_applies_to_a_prompt_after_a_cached_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(prefill.VARIABLE, raising=False)
    assert prefill.applies(Qwen2Attention(), _Q, _K, _MASK, {"dropout": 0.0, "sliding_window": None})
    assert prefill.applies(Qwen2Attention(), _Q.bfloat16(), _K.bfloat16(), _MASK, {})
    monkeypatch.setenv(prefill.VARIABLE, "sdpa")
    assert not prefill.applies(Qwen2Attention(), _Q, _K, _MASK, {})


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_it_applies_only_where_it_is_the_same_attention(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(prefill.VARIABLE, raising=False)
    assert not prefill.applies(*REFUSED[case])


def test_a_torch_that_splits_its_keys_otherwise_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prefill, "_EXACT", {})
    assert prefill.exact(torch.float32, 16)
    monkeypatch.setattr(prefill, "_EXACT", {})
    monkeypatch.setattr(prefill, "KEY_BLOCK", prefill.KEY_BLOCK // 2)  # as if torch's blocks were twice the chunks'
    assert not prefill.exact(torch.float32, 16)


@pytest.fixture
def chunked_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """``chunked_calls[0]``: the calls of :func:`prefill_attention` that ran in chunks so far."""
    calls = [0]
    real = prefill.prefill_attention

    def counting(*args: Any, **kwargs: Any) -> torch.Tensor | None:
        out = real(*args, **kwargs)
        calls[0] += out is not None
        return out

    monkeypatch.setattr(prefill, "prefill_attention", counting)
    return calls


def test_the_model_gives_the_same_logits_and_cache(tiny_tokenizer: Any, monkeypatch: pytest.MonkeyPatch,
                                                   chunked_calls: list[int]) -> None:
    model = _conftest().build_tiny_model(len(tiny_tokenizer), seed=5, layers=2)
    ActiveLM(model, tiny_tokenizer, name="tiny-prefill", prefix_cache=False)  # installs the attention
    ids = torch.randint(5, len(tiny_tokenizer), (1, 1400), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        past = model(ids[:, :700], use_cache=True).past_key_values

        def rest(choice: str) -> tuple[torch.Tensor, Any]:
            monkeypatch.setenv(prefill.VARIABLE, choice)
            cache = copy.deepcopy(past)
            return model(ids[:, 700:], past_key_values=cache, use_cache=True).logits, cache

        whole, whole_cache = rest("sdpa")
        assert chunked_calls[0] == 0
        chunked, chunked_cache = rest("")
    assert chunked_calls[0] == 2  # each layer's prompt ran in chunks
    assert torch.equal(whole, chunked)
    for a, b in zip(whole_cache.layers, chunked_cache.layers):
        assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)


def test_the_engine_generates_the_same_after_a_cached_prefix(tiny_tokenizer: Any, monkeypatch: pytest.MonkeyPatch,
                                                             chunked_calls: list[int]) -> None:
    model = _conftest().build_tiny_model(len(tiny_tokenizer), seed=6, layers=2)
    shared = "Peter Schmeichel was voted the IFFHS World's Best Goalkeeper in 1992 and 1993. " * 40

    def generate(choice: str) -> tuple[list[int], list[float]]:
        monkeypatch.setenv(prefill.VARIABLE, choice)
        lm = ActiveLM(model, tiny_tokenizer, name=f"tiny-prefill-{choice or 'chunks'}")
        lm.session(lm.prompt_ids(shared + "First question?"))  # the shared prefix, cached
        ids = lm.prompt_ids(shared + "Who kept goal for Denmark? " * 12)
        steps = list(lm.session(ids).generate(10))
        return [s.id for s in steps], [s.logprob for s in steps]

    whole = generate("sdpa")
    assert chunked_calls[0] == 0
    chunked = generate("")
    assert chunked_calls[0] >= 2  # the second prompt, after the cached prefix, ran in chunks in each layer
    assert whole == chunked


def test_doctor_says_how_a_prompt_attends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(prefill.VARIABLE, raising=False)
    assert prefill.describe(torch.float32, 64) == f"sdpa in chunks at its {prefill.KEY_BLOCK}-key blocks (the same outputs)"
    monkeypatch.setattr(prefill, "_EXACT", {(torch.float32, 64): False})
    assert "not 512 keys" in prefill.describe(torch.float32, 64)
    monkeypatch.setenv(prefill.VARIABLE, "sdpa")
    assert prefill.describe() == f"the model's sdpa ({prefill.VARIABLE}=sdpa)"
