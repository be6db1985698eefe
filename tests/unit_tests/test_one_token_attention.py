"""A decode step's attention over a long cache with its query heads grouped by the key/value head they share
(active_rag.decoding.one_token_attention): the model's kernel's output within float32 rounding, only where it is the
same attention, and the same greedy tokens and DRAGIN rows through the engine as with the model's own call."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

import active_rag.decoding.one_token_attention as one_token
from active_rag import ActiveLM
from tests.unit_tests.test_model import _shared_conftest as _conftest  # tests/conftest.py, loaded by path


@pytest.mark.parametrize(("heads", "kv_heads", "dim", "keys"), [(12, 2, 128, 1500), (14, 2, 64, 1100), (4, 4, 16, 40)])
def test_it_is_scaled_dot_product_attention_with_shared_heads(heads: int, kv_heads: int, dim: int, keys: int) -> None:
    torch.manual_seed(0)
    q, k, v = torch.randn(1, heads, 1, dim), torch.randn(1, kv_heads, keys, dim), torch.randn(1, kv_heads, keys, dim)
    for scaling in (None, 0.05):
        expected = F.scaled_dot_product_attention(q, k, v, scale=scaling, enable_gqa=True).transpose(1, 2)
        torch.testing.assert_close(one_token.one_token_attention(q, k, v, scaling), expected, atol=1e-6, rtol=1e-5)


def test_a_cache_view_of_a_larger_buffer_is_read_in_place() -> None:
    """The KV cache hands out the first positions of a longer buffer (strided keys): the same result as a copy."""
    buffer = torch.randn(1, 2, 2048, 32)
    k, v = buffer[:, :, :1300], buffer.flip(2)[:, :, :1300]
    q = torch.randn(1, 8, 1, 32)
    torch.testing.assert_close(one_token.one_token_attention(q, k, v),
                               one_token.one_token_attention(q, k.contiguous(), v.contiguous()), atol=0, rtol=0)


def test_uneven_head_groups_are_refused() -> None:
    with pytest.raises(ValueError, match="do not share"):
        one_token.one_token_attention(torch.randn(1, 6, 1, 8), torch.randn(1, 4, 10, 8), torch.randn(1, 4, 10, 8))


class Qwen2Attention(torch.nn.Module):  # a module of a family the path knows, by its class name
    _active_rag_inner = "sdpa"


def test_it_applies_only_where_it_is_the_same_attention(monkeypatch: pytest.MonkeyPatch) -> None:
    module, q, k = Qwen2Attention(), torch.randn(1, 4, 1, 8), torch.randn(1, 2, one_token.MIN_KEYS, 8)
    monkeypatch.setenv(one_token.VARIABLE, "grouped")
    assert one_token.applies(module, q, k, None, {"dropout": 0.0, "sliding_window": None})
    assert not one_token.applies(module, q, k[:, :, :-1], None, {})  # a short cache: the fused kernel is as fast
    monkeypatch.delenv(one_token.VARIABLE)
    # the kernels' op (where they decode) is faster from the first key on
    assert one_token.applies(module, q, k[:, :, :1], None, {}) == one_token.kernel_attends()
    assert not one_token.applies(module, torch.randn(1, 4, 2, 8), k, None, {})  # a prefill
    assert not one_token.applies(module, torch.randn(2, 4, 1, 8), k.expand(2, -1, -1, -1), None, {})  # a padded batch
    assert not one_token.applies(module, q, k, torch.ones(1, 1, 1, one_token.MIN_KEYS, dtype=torch.bool), {})
    assert not one_token.applies(module, q.bfloat16(), k.bfloat16(), None, {})
    assert not one_token.applies(module, q, k, None, {"sliding_window": 512})
    assert not one_token.applies(torch.nn.Module(), q, k, None, {})  # another family
    eager = Qwen2Attention()
    eager._active_rag_inner = "eager"
    assert not one_token.applies(eager, q, k, None, {})
    monkeypatch.setenv(one_token.VARIABLE, "sdpa")
    assert not one_token.applies(module, q, k, None, {})


@pytest.fixture
def grouped_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """``grouped_calls[0]``: the calls of :func:`one_token_attention` so far."""
    calls = [0]
    real = one_token.one_token_attention

    def counting(*args: Any, **kwargs: Any) -> torch.Tensor:
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(one_token, "one_token_attention", counting)
    return calls


def _long_prompt(lm: ActiveLM) -> list[int]:
    ids = lm.prompt_ids("Peter Schmeichel was voted the IFFHS World's Best Goalkeeper in 1992 and 1993. " * 60)
    assert len(ids) > one_token.MIN_KEYS + 50
    return ids


def _generate(lm: ActiveLM, ids: list[int], capture: bool) -> tuple[list[int], list[float], list[Any]]:
    session = lm.session(ids, capture_attention=capture)
    steps = list(session.generate(12))
    return [s.id for s in steps], [s.logprob for s in steps], [s.attention for s in steps]


def _path(monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    """``grouped``: sdpa's grouped call; ``kernel``: the kernels' op (skipped where they do not decode)."""
    monkeypatch.setenv(one_token.VARIABLE, "grouped" if path == "grouped" else "")
    if path == "kernel" and not one_token.kernel_attends():
        pytest.skip("active-rag's kernels do not decode here")


@pytest.mark.parametrize("path", ["grouped", "kernel"])
@pytest.mark.parametrize("capture", [False, True], ids=["plain", "capture"])
def test_the_engine_decodes_the_same_tokens_and_rows(tiny_tokenizer: Any, monkeypatch: pytest.MonkeyPatch,
                                                     grouped_calls: list[int], capture: bool, path: str) -> None:
    _path(monkeypatch, path)
    model = _conftest().build_tiny_model(len(tiny_tokenizer), seed=3, layers=2)
    lm = ActiveLM(model, tiny_tokenizer, name="tiny-long", prefix_cache=False)
    ids = _long_prompt(lm)
    tokens, logprobs, rows = _generate(lm, ids, capture)
    made = grouped_calls[0]
    assert made >= 2 * 12 and made % 2 == 0  # every layer of every one-token step grouped its heads
    monkeypatch.setenv(one_token.VARIABLE, "sdpa")
    sdpa_tokens, sdpa_logprobs, sdpa_rows = _generate(lm, ids, capture)
    assert grouped_calls[0] == made  # none with the model's own kernel
    assert tokens == sdpa_tokens
    torch.testing.assert_close(torch.tensor(logprobs), torch.tensor(sdpa_logprobs), atol=1e-4, rtol=0)
    for a, b in zip(rows, sdpa_rows):  # DRAGIN's rows are computed apart, by the eager function, on both paths
        if capture:
            torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


@pytest.mark.parametrize("path", ["grouped", "kernel"])
def test_a_ragged_batch_takes_it_per_sequence(tiny_tokenizer: Any, monkeypatch: pytest.MonkeyPatch,
                                              grouped_calls: list[int], path: str) -> None:
    """In a batched step (the decode scheduler's loop over sequences) the long sequence groups its heads,
    the short ones the model's kernel (with the kernels' op, every sequence takes it), and every sequence gets the
    tokens it gets with the model's kernel alone."""
    _path(monkeypatch, path)
    from active_rag.decoding.decode_scheduler import DecodeScheduler, _Request

    model = _conftest().build_tiny_model(len(tiny_tokenizer), seed=4, layers=2)
    lm = ActiveLM(model, tiny_tokenizer, name="tiny-ragged-long", prefix_cache=False)
    prompts = [_long_prompt(lm), lm.prompt_ids("Who is Peter Schmeichel?"), lm.prompt_ids("Hi")]
    scheduler = lm.scheduler
    assert isinstance(scheduler, DecodeScheduler)

    def decode() -> list[list[int]]:
        sessions = [lm.session(ids) for ids in prompts]
        tokens = [[int(s._next_logits.argmax())] for s in sessions]
        for _ in range(6):
            requests = [_Request(s._cache, t[-1], s._fed, False) for s, t in zip(sessions, tokens)]
            scheduler._run(requests)
            for s, r, t in zip(sessions, requests, tokens):
                assert r.error is None and r.logits is not None
                s._fed += 1
                t.append(int(r.logits.argmax()))
        return tokens

    scheduler.attention = "loop"
    fast = decode()
    made = grouped_calls[0]
    if path == "grouped":
        assert 6 * 2 <= made <= 7 * 2  # the long sequence only (its pending last prompt token too), every layer
    else:
        assert 3 * 6 * 2 <= made <= 3 * 7 * 2  # every sequence, every layer
    monkeypatch.setenv(one_token.VARIABLE, "sdpa")
    assert decode() == fast and grouped_calls[0] == made
