"""active-rag's decode attention op (``csrc/attention.cpp``, ``torch.ops.active_rag.decode_attention``): one query
position over a sequence's cached keys, the query heads that share a key/value head reading it together. Its outputs
are scaled dot-product attention's within float32 rounding on every instruction-set path, do not depend on the thread
count, read a cache's strided views in place, and bad input raises."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from active_rag import kernels

pytestmark = pytest.mark.skipif(not kernels.loaded(), reason="active-rag's kernels are not built here")


def _op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, isa: str) -> torch.Tensor:
    return torch.ops.active_rag.decode_attention(q, k, v, scale, kernels.ISAS[isa])


def _expected(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=True).transpose(1, 2)


# the shipped models' shapes, keys that fill no whole block or vector, widths that no vector path takes, one head
SHAPES = [(14, 2, 64, 950), (12, 2, 128, 1500), (12, 2, 128, 257), (4, 4, 16, 40), (9, 3, 24, 300), (2, 1, 8, 1),
          (6, 2, 40, 17)]


@pytest.mark.parametrize("isa", sorted(kernels.ISAS, key=kernels.ISAS.get))
@pytest.mark.parametrize(("heads", "kv_heads", "dim", "keys"), SHAPES)
def test_it_is_scaled_dot_product_attention(isa: str, heads: int, kv_heads: int, dim: int, keys: int) -> None:
    if isa not in kernels.supported_isas():
        pytest.skip(f"this CPU does not run {isa}")
    generator = torch.Generator().manual_seed(heads * keys + dim)
    q = torch.randn(1, heads, 1, dim, generator=generator)
    k, v = (torch.randn(1, kv_heads, keys, dim, generator=generator) for _ in range(2))
    for scale in (dim**-0.5, 0.3):
        torch.testing.assert_close(_op(q, k, v, scale, isa), _expected(q, k, v, scale), atol=2e-6, rtol=1e-5)


def test_large_scores_and_far_below_the_maximum() -> None:
    """Scores spread over hundreds (softmax weights that underflow to 0) give the same attention."""
    generator = torch.Generator().manual_seed(1)
    q = torch.randn(1, 8, 1, 64, generator=generator) * 8
    k, v = (torch.randn(1, 2, 700, 64, generator=generator) * 4 for _ in range(2))
    for isa in kernels.supported_isas():
        torch.testing.assert_close(_op(q, k, v, 0.125, isa), _expected(q, k, v, 0.125), atol=2e-6, rtol=1e-5)


def test_strided_views_and_thread_counts_give_the_same_bits() -> None:
    """A cache hands out the first positions of longer buffers (strided keys), and the blocks do not depend on the
    thread count: the same bits as contiguous copies, on 1 and 2 threads."""
    generator = torch.Generator().manual_seed(2)
    k, v = (torch.randn(1, 2, 2048, 64, generator=generator)[:, :, :1300] for _ in range(2))
    q = torch.randn(1, 12, 1, 64, generator=generator)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        two = _op(q, k, v, 0.125, "scalar"), torch.ops.active_rag.decode_attention(q, k, v, 0.125)
        torch.set_num_threads(1)
        one = _op(q, k, v, 0.125, "scalar"), torch.ops.active_rag.decode_attention(q, k, v, 0.125)
    finally:
        torch.set_num_threads(threads)
    copies = torch.ops.active_rag.decode_attention(q, k.contiguous(), v.contiguous(), 0.125)
    assert torch.equal(two[0], one[0]) and torch.equal(two[1], one[1]) and torch.equal(two[1], copies)


@pytest.mark.parametrize("isa", sorted(kernels.ISAS, key=kernels.ISAS.get))
@pytest.mark.parametrize(("heads", "kv_heads", "dim", "keys"), [(14, 2, 64, 950), (12, 2, 128, 300), (16, 2, 128, 40),
                                                                (10, 2, 192, 33), (6, 1, 64, 17)])
def test_each_head_alone_gives_the_same_bits(isa: str, heads: int, kv_heads: int, dim: int, keys: int) -> None:
    """A query head's output does not depend on the heads read with it: the AVX-512 path sums up to 6 heads' values
    together (7 heads a key/value head: 6 and 1, 8: 6 and 2) and scores two heads a row (7: three pairs and one) at a
    head size of 64 or 128, in the same order of sums as one head alone."""
    if isa not in kernels.supported_isas():
        pytest.skip(f"this CPU does not run {isa}")
    generator = torch.Generator().manual_seed(heads + dim + keys)
    q = torch.randn(1, heads, 1, dim, generator=generator)
    k, v = (torch.randn(1, kv_heads, keys, dim, generator=generator) for _ in range(2))
    together = _op(q, k, v, dim**-0.5, isa)
    share = heads // kv_heads
    alone = torch.cat([_op(q[:, h : h + 1], k[:, h // share : h // share + 1], v[:, h // share : h // share + 1],
                           dim**-0.5, isa) for h in range(heads)], dim=2)
    assert torch.equal(together, alone)


@pytest.mark.parametrize(
    ("q", "k", "v", "message"),
    [
        (torch.randn(1, 6, 1, 8), torch.randn(1, 4, 10, 8), torch.randn(1, 4, 10, 8), "evenly"),
        (torch.randn(1, 4, 1, 8).bfloat16(), torch.randn(1, 2, 10, 8).bfloat16(), torch.randn(1, 2, 10, 8).bfloat16(),
         "float32"),
        (torch.randn(1, 4, 2, 8), torch.randn(1, 2, 10, 8), torch.randn(1, 2, 10, 8), "query"),
        (torch.randn(1, 4, 1, 8), torch.randn(1, 2, 10, 8), torch.randn(1, 2, 8, 10).transpose(2, 3), "contiguous"),
        (torch.randn(1, 4, 1, 8), torch.randn(1, 2, 0, 8), torch.randn(1, 2, 0, 8), "no keys"),
    ],
    ids=["uneven-heads", "bfloat16", "two-queries", "strided-rows", "no-keys"],
)
def test_bad_input_raises(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, message: str) -> None:
    with pytest.raises(RuntimeError, match=message):
        torch.ops.active_rag.decode_attention(q, k, v, 0.5)


def test_where_the_engine_uses_it_and_what_rows_and_doctor_say(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the kernels decode, a one-token step attends with the op from its first key (``grouped``: sdpa over the
    grouped heads from MIN_KEYS keys, as before); an evaluation's rows written with it have keys of their own, so the
    earlier rows resume with ``ACTIVE_RAG_DECODE_ATTENTION=grouped``, and rows of torch's kernels keep theirs; doctor
    says which path runs."""
    from active_rag.decoding import one_token_attention as one_token
    from active_rag.evaluation import method_engines
    from tests.unit_tests.engine_keys import engine_key

    if not kernels.available():
        pytest.skip("active-rag's kernels do not decode here")
    monkeypatch.setattr(method_engines, "_decodes_with_our_kernel", lambda model: True)
    monkeypatch.setattr(method_engines, "_decode_kernel_layers", lambda model: [])
    monkeypatch.delenv(one_token.VARIABLE, raising=False)
    assert one_token.kernel_attends() and one_token.describe() == "active-rag's op"
    op_rows = engine_key()
    monkeypatch.setenv(one_token.VARIABLE, "grouped")
    assert not one_token.kernel_attends() and one_token.describe().startswith("sdpa, heads grouped")
    grouped_rows = engine_key()
    assert op_rows != grouped_rows
    monkeypatch.setenv(kernels.DECODE_KERNEL_VARIABLE, "torch")  # torch's kernels' rows (the Wikipedia slices')
    monkeypatch.setattr(method_engines, "_decodes_with_our_kernel", lambda model: False)
    monkeypatch.delenv(one_token.VARIABLE)
    torch_rows = engine_key()
    monkeypatch.setenv(one_token.VARIABLE, "grouped")
    assert engine_key() == torch_rows
    monkeypatch.delenv(kernels.DECODE_KERNEL_VARIABLE)
    monkeypatch.setenv(one_token.VARIABLE, "sdpa")
    assert one_token.describe().startswith("the model's sdpa")


def test_the_lean_step_calls_it_without_the_layers_around_it(tiny_tokenizer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A decode step of the lean path computes a layer's attention with the op directly (kernel_step_attention):
    the same tokens and log-probabilities, to the bit, as through the registered attention function, and the
    captured layer of a session that wants DRAGIN's rows still goes through it."""
    from active_rag import ActiveLM
    from active_rag.decoding import lean_step
    from tests.unit_tests.test_model import _shared_conftest as _conftest

    if not kernels.available():
        pytest.skip("active-rag's kernels do not decode here")
    calls = {"direct": 0}
    real = lean_step.kernel_step_attention

    def counting(*args, **kwargs):
        out = real(*args, **kwargs)
        calls["direct"] += out is not None
        return out

    def generate(capture: bool) -> tuple[list[int], list[float]]:
        model = _conftest().build_tiny_model(len(tiny_tokenizer), seed=5, layers=2)
        lm = ActiveLM(model, tiny_tokenizer, name="tiny-direct", prefix_cache=False)
        steps = list(lm.session(lm.prompt_ids("Who is Peter Schmeichel?"), capture_attention=capture).generate(10))
        return [s.id for s in steps], [s.logprob for s in steps]

    monkeypatch.setattr(lean_step, "kernel_step_attention", counting)
    direct = generate(False)
    assert calls["direct"] >= 2 * 9  # both layers of every batched step
    captured = generate(True)
    monkeypatch.setattr(lean_step, "kernel_step_attention", lambda *args, **kwargs: None)
    assert generate(False) == direct and generate(True) == captured
