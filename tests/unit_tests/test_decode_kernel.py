"""active-rag's CPU decode kernel (issue 65, item 1): int4/int8 weights times int8-quantised activations.

Stated bounds:

- against a float64 product of the same quantised weights with the same int8 activations (a Python reference of the
  kernel's quantisation), the kernel differs only by float32 accumulation: at most ``(groups + 2) * 2**-23`` of the
  sum of the absolute terms;
- against the float product with unquantised activations, by the activations' rounding: each input moves by at
  most half a step, ``max|x| / 254`` of its group of 32, so ``|y - x W^T| <= sum_g max_g|x| / 254 * sum_{k in g}
  |w_k|`` (plus the accumulation slack above);
- every instruction-set path (and any thread count) gives bit-identical outputs;
- tiny random Llama and Qwen2 models (int8, int4, and ``mixed`` with the MLP on a 4-bit grid): every preset's
  retrieval decisions equal torch's kernels'; teacher-forced, the next-token logits within 1% of their spread (0.8%
  seen), entropies within 0.05 and the same greedy choice wherever torch's top two logits are more than 2% of the
  spread apart. Free-running tokens part only at such ties: both kernels round each linear output to bfloat16, so a
  400-token random model meets exact ties, which the two kernels' different rounding of the activations breaks
  differently.

The kernel tests skip cleanly where the library is not built (``python -m active_rag.kernels.build``); the layout
and fallback tests run everywhere.
"""

from __future__ import annotations

import copy
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from torch import nn

from active_rag import ActiveLM, ActiveRAG, Passage, kernels
from active_rag.errors import InvalidOptionError
from active_rag.kernels import build as kernel_build
from active_rag.components.presets import PRESETS
from active_rag.models.quantized import Int4Linear, Int8Linear, decode_kernel, packed_layers
from active_rag.models.weights import layer_from_state
from active_rag.models.weights import quantize_model
from tests.conftest import build_tiny_model

needs_kernel = pytest.mark.skipif(not kernels.loaded(), reason="the active-rag kernel is not built here")
QUESTION = "Who is Kasper Schmeichel?"


# ------------------------------------------------------------------------------------------------ references


def _quantized_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel's activation quantisation, in torch: ``(xq [rows, groups, 32], sx [rows, groups])``."""
    rows, k = x.shape
    width = kernels.padded_inputs(k)
    groups = nn.functional.pad(x.float(), (0, width - k)).view(rows, -1, kernels.GROUP)
    amax = groups.abs().amax(-1)
    empty = amax < 1e-30
    sx = torch.where(empty, torch.zeros_like(amax), amax / 127)
    inv = torch.where(empty, torch.zeros_like(amax), torch.full_like(amax, 127.0) / amax)  # IEEE division, as in C++
    xq = torch.round(groups * inv[..., None]).clamp(-127, 127)
    return xq, sx


def _reference(x: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y, slack)``: the float64 product of the quantised activations with ``weight`` ``[n, k]`` and the float32
    accumulation bound around it."""
    xq, sx = _quantized_rows(x)
    rows, groups, _ = xq.shape
    w = nn.functional.pad(weight.double(), (0, groups * kernels.GROUP - weight.shape[1])).view(weight.shape[0], groups, -1)
    terms = torch.einsum("rgk,ngk->rng", xq.double(), w) * sx.double()[:, None, :]
    magnitude = torch.einsum("rgk,ngk->rng", xq.double().abs(), w.abs()) * sx.double()[:, None, :]
    return terms.sum(-1), (groups + 2) * 2**-23 * magnitude.sum(-1) + 1e-30


def _rounding_bound(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``sum_g max_g|x| / 254 * sum_{k in g} |w_k|``: how far the activations' int8 rounding can move each output."""
    rows, k = x.shape
    groups = kernels.padded_inputs(k) // kernels.GROUP
    xg = nn.functional.pad(x.double(), (0, groups * kernels.GROUP - k)).view(rows, groups, -1)
    w = nn.functional.pad(weight.double().abs(), (0, groups * kernels.GROUP - k)).view(weight.shape[0], groups, -1)
    return (xg.abs().amax(-1) / 254) @ w.sum(-1).t()


def _int4_weights(n: int, k: int, seed: int = 0, bits: int = 4) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random codes (``bits`` bits: 4, or 5 for int5), bfloat16 steps and zeros, and the float weight they stand for
    (``(q - 2**(bits - 1)) * step + zero``)."""
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 2**bits, (n, k), dtype=torch.uint8, generator=g)
    step = (torch.rand(n, k // 32, generator=g) * 0.05 + 1e-3).to(torch.bfloat16).float()
    zero = (torch.randn(n, k // 32, generator=g) * 0.05).to(torch.bfloat16).float()
    weight = ((codes.float() - 2 ** (bits - 1)).view(n, -1, 32) * step[..., None] + zero[..., None]).view(n, k)
    return codes, step, zero, weight


def _int8_weights(n: int, k: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(-127, 128, (n, k), dtype=torch.int8, generator=g)
    scales = torch.rand(n, generator=g) * 0.01 + 1e-4
    return q, scales, q.float() * scales[:, None]


def _isas() -> list[str]:
    return kernels.supported_isas() if kernels.loaded() else []


# ------------------------------------------------------------------------------------------------ layout (no library)


@pytest.mark.parametrize("n,k", [(16, 32), (37, 96), (48, 64), (1, 160)])
def test_the_layouts_round_trip(n: int, k: int) -> None:
    codes, step, zero, _ = _int4_weights(n, k)
    tiles, scales = kernels.pack_int4(codes, step, zero)
    assert tiles.shape == (kernels.tiles_count(n), k // 8, 64) and scales.shape == (kernels.tiles_count(n), k // 32, 2, 16)
    back = kernels.unpack_int4(tiles, scales, n)
    assert torch.equal(back[0], codes) and torch.equal(back[1], step) and torch.equal(back[2], zero)
    # byte 4 * lane + i of chunk c: input 8c + i (low nibble) and 8c + 4 + i (high) of output 16 * tile + lane
    lane = min(3, n - 1)
    assert int(tiles[0, 1, 4 * lane + 2]) == int(codes[lane, 8 + 2]) | int(codes[lane, 8 + 6]) << 4
    for kk in (1, 5, 33, k):
        q, _, _ = _int8_weights(n, kk)
        packed = kernels.pack_int8(q)
        assert packed.shape == (kernels.tiles_count(n), kernels.padded_inputs(kk) // 4, 64)
        assert torch.equal(kernels.unpack_int8(packed, n, kk), q)
        assert int(packed[0, 0, 4 * 0 + min(kk, 4) - 1]) == int(q[0, min(kk, 4) - 1]) + 128


# ------------------------------------------------------------------------------------------------ the kernel


@needs_kernel
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 25])
@pytest.mark.parametrize("n,k", [(37, 96), (48, 64), (16, 320)])
def test_int4_matches_the_reference_on_every_path(rows: int, n: int, k: int) -> None:
    codes, step, zero, weight = _int4_weights(n, k, seed=rows)
    tiles, scales = kernels.pack_int4(codes, step, zero)
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows))
    outs = {isa: kernels.int4_gemm(x, tiles, scales, n, isa) for isa in _isas()}
    reference, slack = _reference(x, weight)
    assert ((outs["scalar"].double() - reference).abs() <= slack).all()
    assert ((outs["scalar"].double() - x.double() @ weight.double().t()).abs() <= _rounding_bound(x, weight) + slack).all()
    for isa, out in outs.items():
        assert torch.equal(out, outs["scalar"]), isa


@needs_kernel
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 6, 8, 9, 16])
@pytest.mark.parametrize("n,k", [(37, 96), (17, 5), (33, 70), (1, 1), (48, 320)])
def test_int8_matches_the_reference_on_every_path(rows: int, n: int, k: int) -> None:
    q, scales, weight = _int8_weights(n, k, seed=rows)
    tiles = kernels.pack_int8(q)
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows))
    outs = {isa: kernels.int8_gemm(x, tiles, scales, n, isa) for isa in _isas()}
    reference, slack = _reference(x, weight)
    assert ((outs["scalar"].double() - reference).abs() <= slack + 1e-6 * reference.abs()).all()
    assert ((outs["scalar"].double() - x.double() @ weight.double().t()).abs() <= _rounding_bound(x, weight) + 2 * slack).all()
    for isa, out in outs.items():
        assert torch.equal(out, outs["scalar"]), isa


@needs_kernel
@pytest.mark.parametrize("kind", ["int4", "int5", "int8"])
def test_a_prefill_s_rows_in_blocks_give_the_single_pass_outputs(kind: str) -> None:
    """A prefill-sized call runs its rows in blocks that stay in L2 (a quarter of it: 64 rows of 4096 inputs on a 1 MB
    L2, at most 256 on 4 MB), every tile over one block before the next: each path's products, rounding and bias equal
    the scalar path's, which runs all 600 rows in one pass."""
    n, k, rows = 40, 4096, 600
    g = torch.Generator().manual_seed(3)
    x = torch.randn(rows, k, generator=g) * 2
    bias = torch.randn(n, generator=g)
    if kind == "int8":
        q, scales, _ = _int8_weights(n, k)
        tiles = kernels.pack_int8(q)
    else:
        codes, step, zero, _ = _int4_weights(n, k, bits=5 if kind == "int5" else 4)
        tiles, scales = (kernels.pack_int5 if kind == "int5" else kernels.pack_int4)(codes, step, zero)
    gemm = getattr(kernels, f"{kind}_gemm")
    linear = getattr(kernels, f"{kind}_linear")
    products = {isa: gemm(x, tiles, scales, n, isa) for isa in _isas()}
    layers = {isa: linear(x, tiles, scales, n, bias, isa) for isa in _isas()}
    for isa in _isas():
        assert torch.equal(products[isa], products["scalar"]), isa
        assert torch.equal(layers[isa], layers["scalar"]), isa
    unfused = gemm(x.to(torch.bfloat16), tiles, scales, n, "scalar").to(torch.bfloat16).float() + bias
    assert torch.equal(layers["scalar"], unfused)


@needs_kernel
def test_every_path_this_cpu_has_is_listed_and_forcible(monkeypatch) -> None:
    assert "scalar" in kernels.supported_isas()
    assert kernels.default_isa() in kernels.supported_isas()
    monkeypatch.setenv(kernels.ISA_VARIABLE, "scalar")
    assert kernels.default_isa() == "scalar"
    monkeypatch.setenv(kernels.ISA_VARIABLE, "avx9")
    with pytest.raises(InvalidOptionError, match="must be one of"):
        kernels.default_isa()
    missing = [isa for isa in kernels.ISAS if isa not in kernels.supported_isas()]
    if missing:  # a path this CPU lacks is refused, not run
        q, scales, _ = _int8_weights(16, 32)
        with pytest.raises(RuntimeError, match="cannot run"):
            kernels.int8_gemm(torch.randn(1, 32), kernels.pack_int8(q), scales, 16, missing[0])


@needs_kernel
def test_bfloat16_and_float32_activations_and_threads_agree() -> None:
    codes, step, zero, _ = _int4_weights(64, 128)
    tiles4, scales4 = kernels.pack_int4(codes, step, zero)
    q, scales8, _ = _int8_weights(64, 128)
    tiles8 = kernels.pack_int8(q)
    x = torch.randn(5, 128).to(torch.bfloat16)
    threads = torch.get_num_threads()
    try:
        for gemm, tiles, scales in ((kernels.int4_gemm, tiles4, scales4), (kernels.int8_gemm, tiles8, scales8)):
            out = gemm(x, tiles, scales, 64)
            assert out.dtype == torch.float32 and out.shape == (5, 64)
            assert torch.equal(out, gemm(x.float(), tiles, scales, 64))
            assert torch.equal(out[2:3], gemm(x[2:3], tiles, scales, 64))  # rows are independent
            assert torch.equal(gemm(x.t().contiguous().t(), tiles, scales, 64), out)  # a strided input
            torch.set_num_threads(1)
            assert torch.equal(gemm(x, tiles, scales, 64), out)
            torch.set_num_threads(max(2, threads))
            assert torch.equal(gemm(x, tiles, scales, 64), out)
            torch.set_num_threads(threads)
    finally:
        torch.set_num_threads(threads)


def _pool_case() -> tuple[list[torch.Tensor], list]:
    """Layers large enough that the kernels' pool splits them (hundreds of tiles), their inputs, and the calls."""
    codes, step, zero, _ = _int4_weights(4096, 1024, seed=5)
    tiles4, scales4 = kernels.pack_int4(codes, step, zero)
    q, scales8, _ = _int8_weights(4096, 1024, seed=6)
    tiles8 = kernels.pack_int8(q)
    bias = torch.randn(4096)
    x = torch.randn(3, 1024)
    calls = [lambda: kernels.int4_linear(x, tiles4, scales4, 4096, bias), lambda: kernels.int8_linear(x, tiles8, scales8, 4096),
             lambda: kernels.int4_gemm(x[:1], tiles4, scales4, 4096), lambda: kernels.int8_gemm(x, tiles8, scales8, 4096)]
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        serial = [call() for call in calls]  # one thread: the pool is not used
    finally:
        torch.set_num_threads(previous)
    return serial, calls


@needs_kernel
def test_the_kernels_pool_gives_the_serial_outputs_from_any_thread_and_after_a_fork() -> None:
    """The kernels' own threads (csrc/pool.h) split a layer's tiles; any split, any number of Python threads calling
    at once (one job at a time, the others computing alone) and a forked child give the one-thread outputs."""
    import multiprocessing
    import threading

    serial, calls = _pool_case()
    previous = torch.get_num_threads()
    torch.set_num_threads(max(2, previous))
    try:
        for _ in range(3):
            assert all(torch.equal(call(), ref) for call, ref in zip(calls, serial, strict=True))
        failures: list[str] = []

        def hammer(seed: int) -> None:
            for i in range(40):
                k = (seed + i) % len(calls)
                if not torch.equal(calls[k](), serial[k]):
                    failures.append(f"thread {seed} call {k}")

        threads = [threading.Thread(target=hammer, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads) and failures == []
        _FORKED.update(calls=calls, serial=serial)
        context = multiprocessing.get_context("fork")
        with context.Pool(1) as pool:  # a child forked while the parent's workers exist: its own pool
            assert pool.apply_async(_forked_outputs_equal).get(timeout=120) == [True] * len(calls)
    finally:
        _FORKED.clear()
        torch.set_num_threads(previous)


_FORKED: dict = {}
"""The calls and their serial outputs, for a forked child (which inherits them; torch's own parallel ops are not
safe to run in a child forked after they ran, the kernels are)."""


def _forked_outputs_equal() -> list[bool]:
    torch.set_num_threads(2)
    return [torch.equal(call(), ref) for call, ref in zip(_FORKED["calls"], _FORKED["serial"], strict=True)]


@needs_kernel
def test_non_finite_and_zero_activations() -> None:
    q, scales, _ = _int8_weights(16, 64)
    tiles = kernels.pack_int8(q)
    x = torch.zeros(3, 64)
    x[1, 40] = float("nan")
    x[2, 3] = float("inf")
    out = kernels.int8_gemm(x, tiles, scales, 16)
    assert torch.equal(out[0], torch.zeros(16))  # an all-zero group contributes nothing
    assert out[1].isnan().all() and out[2].isnan().all()  # NaN reaches the logits (NonFiniteLogitsError)
    assert kernels.int8_gemm(torch.zeros(0, 64), tiles, scales, 16).shape == (0, 16)


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dequantisation_for_the_dense_prefill(dtype: torch.dtype) -> None:
    codes, step, zero, weight = _int4_weights(37, 96)
    tiles, scales = kernels.pack_int4(codes, step, zero)
    out = kernels.int4_dequant(tiles, scales, torch.empty(37, 96, dtype=dtype))
    assert torch.equal(out, weight.to(dtype))
    q, _, _ = _int8_weights(37, 70)
    assert torch.equal(kernels.int8_unpack(kernels.pack_int8(q), torch.empty(37, 70, dtype=dtype)), q.to(dtype))


@needs_kernel
def test_the_ops_trace_under_fake_tensors() -> None:
    """The ops have shapes for tracing (torch.compile, meta tensors) without running."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    q, scales, _ = _int8_weights(40, 64)
    tiles = kernels.pack_int8(q)
    with FakeTensorMode(allow_non_fake_inputs=True):
        out = torch.ops.active_rag.int8_gemm(torch.randn(3, 64), tiles, scales, 40, 0)
    assert out.shape == (3, 40) and out.dtype == torch.float32


# ------------------------------------------------------------------------------------------------ layers and fallback


@needs_kernel
def test_layers_decode_with_the_kernel_and_its_state_loads_either_way(monkeypatch) -> None:
    torch.manual_seed(0)
    linear = nn.Linear(96, 48)
    x = torch.randn(3, 96)
    for cls in (Int8Linear, Int4Linear):
        mine = cls.from_linear(linear)
        assert mine.uses_kernel and hasattr(mine, "tiles")
        reference = nn.functional.linear(x, mine.dequantize(), linear.bias)
        assert (mine(x) - reference).abs().max() < 0.02 * reference.abs().max()
        with monkeypatch.context() as patch:
            patch.setenv(kernels.DECODE_KERNEL_VARIABLE, "torch")
            theirs = layer_from_state(mine.state(), linear.bias)  # the cached layout, read where torch's kernels decode
        assert not theirs.uses_kernel
        assert (theirs.dequantize() - mine.dequantize()).abs().max() <= 1e-6 * mine.dequantize().abs().max()
        assert all(torch.equal(t, theirs.state()[key]) for key, t in mine.state().items())
        assert (theirs(x) - mine(x)).abs().max() < 0.02 * reference.abs().max()
        assert mine.weight_bytes <= 1.2 * theirs.weight_bytes


@needs_kernel
@pytest.mark.parametrize("bias", [True, False])
def test_a_layer_s_fused_decode_op_equals_its_unfused_ops_bit_for_bit(monkeypatch, bias: bool) -> None:
    """The layer's decode forward in one op (input and output rounded to bfloat16, the bias added in the kernel)
    gives exactly the values of the unfused path: the kernel on bfloat16 input, then two casts and an add."""
    torch.manual_seed(1)
    linear = nn.Linear(224, 72, bias=bias)
    x = torch.randn(4, 3, 224) * 3
    x[0, 0, :7] = torch.tensor([1e-8, -0.0, 65504.0, 1.00390625, 1.01171875, -2.5e-3, 0.0])  # ties, tiny, large
    x[1, 0, 40:44] = torch.tensor([float("nan"), 1.0, -3.0, 2.0])  # a group with a NaN (its outputs are NaN)
    x[2, 1, 100] = 3.4e38  # rounds up to infinity in bfloat16
    x[3, 2, 5:9] = torch.tensor([1.0 + 2**-8, 1.0 + 3 * 2**-8, -(1.0 + 2**-8), 2.0 + 2**-7])  # ties to even
    strided = torch.randn(224, 5).t()  # a transposed view
    for cls in (Int8Linear, Int4Linear):
        layer = cls.from_linear(linear)
        fused = [layer(x), layer(strided)]
        assert layer.packed_calls == 2
        monkeypatch.setattr(cls, "_linear", lambda self, rows: pytest.fail("the unfused path ran the fused op"))
        monkeypatch.setattr(layer, "uses_kernel", True)
        unfused_x = layer._kernel(x.reshape(-1, 224).to(torch.bfloat16).contiguous()).to(torch.bfloat16).float()
        unfused_s = layer._kernel(strided.to(torch.bfloat16).contiguous()).to(torch.bfloat16).float()
        if bias:
            unfused_x, unfused_s = unfused_x + linear.bias, unfused_s + linear.bias
        same = (fused[0] == unfused_x.view(4, 3, 72)) | (fused[0].isnan() & unfused_x.view(4, 3, 72).isnan())
        assert bool(same.all()) and bool(fused[0][1, 0].isnan().all()) and torch.equal(fused[1], unfused_s)
        monkeypatch.undo()
        assert fused[0].dtype == torch.float32


@needs_kernel
@pytest.mark.parametrize("bias", [True, False])
def test_a_layer_s_decode_function_is_its_forward(monkeypatch, bias: bool) -> None:
    """``decode_function`` (the lean step's projection) gives forward's values and counts for float32 rows the
    kernel decodes, and hands any other input (bfloat16, more rows than the packed limit, none) to forward."""
    torch.manual_seed(4)
    linear = nn.Linear(96, 40, bias=bias)
    for cls in (Int8Linear, Int4Linear):
        layer = cls.from_linear(linear)
        decode = layer.decode_function()
        x = torch.randn(3, 1, 96) * 2
        assert torch.equal(decode(x), layer(x)) and layer.packed_calls == 2
        strided = torch.randn(96, 2).t()  # a transposed view, as an attention output can be
        assert torch.equal(decode(strided), layer(strided))
        bf16 = x.to(torch.bfloat16)
        assert torch.equal(decode(bf16), layer(bf16)) and decode(bf16).dtype == torch.bfloat16
        assert decode(torch.randn(0, 96)).shape == (0, 40)
        monkeypatch.setattr(cls, "packed_max_rows", 2)
        monkeypatch.setenv("ACTIVE_RAG_PREFILL", "dense")  # more rows than the limit: the dense path (AMX or not)
        dense_before = layer.dense_calls
        assert torch.equal(decode(x), layer(x)) and layer.dense_calls == dense_before + 2  # 3 rows: the dense path
        monkeypatch.undo()
        layer.bias = None if not bias else nn.Parameter(torch.zeros(40), requires_grad=False)  # read at each call
        assert torch.equal(decode(x), layer(x))


def test_torch_kernels_decode_when_the_library_is_not_built(monkeypatch, caplog) -> None:
    """No build (or no compiler): one log line (a warning where the build would run: an x86-64 CPU with AVX2, the
    variable not asking for torch), torch's kernels, and the same layers and cache format."""
    monkeypatch.setattr(kernel_build, "find_library", lambda key=None: None)
    for machine, capability, variable, level in (("x86_64", "AVX2", None, "WARNING"), ("x86_64", "AVX512", None, "WARNING"),
                                                  ("x86_64", "AVX2", "torch", "DEBUG"), ("aarch64", "DEFAULT", None, "DEBUG"),
                                                  ("x86_64", "DEFAULT", None, "DEBUG")):
        monkeypatch.setattr(kernels, "_STATE", {})
        monkeypatch.setattr(kernels.platform, "machine", lambda: machine)
        monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
        if variable is None:
            monkeypatch.delenv(kernels.DECODE_KERNEL_VARIABLE, raising=False)
        else:
            monkeypatch.setenv(kernels.DECODE_KERNEL_VARIABLE, variable)
        caplog.clear()
        with caplog.at_level("DEBUG", logger="active_rag.kernels"):
            assert not kernels.loaded() and not kernels.available()
        assert [r.levelname for r in caplog.records] == [level] and "not built" in caplog.records[0].getMessage()
        assert ("2-3x slower" in caplog.records[0].getMessage()) == (level == "WARNING")
    monkeypatch.undo()
    monkeypatch.setattr(kernel_build, "find_library", lambda key=None: None)
    monkeypatch.setattr(kernels, "_STATE", {})
    monkeypatch.delenv(kernels.DECODE_KERNEL_VARIABLE, raising=False)
    assert not kernels.loaded()
    assert "not built" in kernels.describe() and kernels.describe().startswith("torch")
    torch.manual_seed(0)
    linear = nn.Linear(64, 32)
    for cls in (Int8Linear, Int4Linear):
        layer = cls.from_linear(linear)
        assert not layer.uses_kernel and not hasattr(layer, "tiles")
        x = torch.randn(2, 64)
        assert (layer(x) - linear(x)).abs().max() < 0.3 * linear(x).abs().max()
        assert set(layer.state()) >= {"shape"} and torch.equal(layer_from_state(layer.state(), linear.bias)(x), layer(x))
    model = nn.Sequential(nn.Linear(64, 32))
    quantize_model(model, "int8")
    assert decode_kernel(model).startswith("torch (the active-rag kernel is not built")


@needs_kernel
def test_a_layer_keeps_the_instruction_set_it_was_built_with(monkeypatch) -> None:
    """A packed layer chooses the kernel's path when it is built, as it chooses the kernel: its decode steps read
    no environment variable, and a layer built under ``ACTIVE_RAG_KERNEL_ISA=scalar`` keeps that path after."""
    torch.manual_seed(0)
    linear = nn.Linear(128, 32)
    x = torch.randn(1, 128)
    best = {cls: cls.from_linear(linear) for cls in (Int8Linear, Int4Linear)}
    monkeypatch.setenv(kernels.ISA_VARIABLE, "scalar")
    scalar = {cls: cls.from_linear(linear) for cls in (Int8Linear, Int4Linear)}
    monkeypatch.delenv(kernels.ISA_VARIABLE)
    for cls in (Int8Linear, Int4Linear):
        assert best[cls].isa == kernels.default_isa() and scalar[cls].isa == "scalar"
        assert torch.equal(scalar[cls](x), best[cls](x))  # every path gives the same values


def test_the_environment_variable_chooses_torch_kernels(monkeypatch) -> None:
    monkeypatch.setenv(kernels.DECODE_KERNEL_VARIABLE, "torch")
    assert not kernels.available() and kernels.describe() == "torch (ACTIVE_RAG_DECODE_KERNEL=torch)"
    assert not Int8Linear.from_linear(nn.Linear(32, 16)).uses_kernel


def test_a_build_without_a_compiler_or_on_another_machine_is_a_build_error(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(kernel_build.KERNEL_DIR_VARIABLE, str(tmp_path))
    assert kernel_build.default_roots() == [tmp_path]
    assert kernel_build.find_library() is None
    monkeypatch.setattr(kernel_build, "compiler", lambda: None)
    with pytest.raises(kernel_build.BuildError, match="no C\\+\\+ compiler"):
        kernel_build.build()
    assert kernel_build.main([]) == 1
    monkeypatch.setattr(kernel_build.platform, "machine", lambda: "aarch64")
    with pytest.raises(kernel_build.BuildError, match="x86-64"):
        kernel_build.build()


# ------------------------------------------------------------------------------------------------ tiny models


class QueryRetriever:
    """Passages that depend on the query alone, so runs in any order can be compared."""

    def retrieve(self, query: str, k: int) -> list[Passage]:
        return [Passage(id=f"{sum(map(ord, query)) % 997}-{i}", title=f"T{i}", text=f"Passage {i} about {query[:40]}") for i in range(k)]


def _tiny(family: str, vocab: int) -> nn.Module:
    """A tiny random Llama or Qwen2 whose head is scaled up (a clear winner at each step, as in test_weights)."""
    if family == "llama":
        model = build_tiny_model(vocab, seed=1)
    else:
        from transformers import Qwen2Config, Qwen2ForCausalLM

        torch.manual_seed(1)
        config = Qwen2Config(vocab_size=vocab, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, max_position_embeddings=2048, tie_word_embeddings=False,
                             attn_implementation="sdpa", eos_token_id=None, bos_token_id=None, pad_token_id=None)
        model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
        for name, linear in model.named_modules():  # the MLP on a 4-bit grid per 32 inputs, as a Q4_K tensor is
            if name.endswith(("gate_proj", "up_proj", "down_proj")):
                groups = linear.weight.view(linear.out_features, -1, 32)
                low = groups.amin(-1, keepdim=True)
                step = (groups.amax(-1, keepdim=True) - low) / 15
                groups.copy_(low + torch.round((groups - low) / step) * step)
    return model


@pytest.fixture(scope="module")
def both_kernels(tiny_tokenizer) -> dict[tuple[str, str], tuple[ActiveLM, ActiveLM]]:
    """(family, weights) -> (model on active-rag's kernel, the same model on torch's kernels). ``mixed`` stores the
    MLP (on a 4-bit grid) in int4 and the rest in int8, as for the registry's Q4_K_M models."""
    out = {}
    for family in ("llama", "qwen2"):
        base = _tiny(family, len(tiny_tokenizer))
        for weights in ("mixed", "int8", "int4"):
            mine = quantize_model(copy.deepcopy(base), weights)
            with pytest.MonkeyPatch.context() as patch:
                patch.setenv(kernels.DECODE_KERNEL_VARIABLE, "torch")
                theirs = quantize_model(copy.deepcopy(base), weights)
            out[(family, weights)] = (ActiveLM(mine, tiny_tokenizer, name="tiny"), ActiveLM(theirs, tiny_tokenizer, name="tiny"))
    return out


CASES = [(f, w) for f in ("llama", "qwen2") for w in ("mixed", "int8", "int4")]

TIE = 0.02
"""Twice the largest logit difference seen between the kernels (0.8% of the logits' spread on these models): a
greedy choice whose top two logits are closer than this fraction of the spread is a tie either kernel may break."""


def _fresh(lm: ActiveLM) -> ActiveLM:
    """The same model under a new ActiveLM (an empty prefix cache): every run starts from the same state."""
    return ActiveLM(lm.model, lm.tokenizer, name="tiny")


def _teacher_forced(mine: ActiveLM, theirs: ActiveLM, tokens: list[int]) -> list[tuple[torch.Tensor, torch.Tensor, float, float]]:
    """Per step of ``tokens`` (torch's greedy tokens): both kernels' next-token logits and entropies."""
    a = theirs.session(theirs.prompt_ids(QUESTION), capture_attention=True)
    b = mine.session(mine.prompt_ids(QUESTION), capture_attention=True)
    out = []
    for token in tokens:
        la, lb = a._next_logits, b._next_logits
        assert la is not None and lb is not None

        def force(ids, logits, token=token):
            forced = torch.full_like(logits, float("-inf"))
            forced[token] = 0.0
            return forced

        (sa,) = list(a.generate(1, logits_processor=force))
        (sb,) = list(b.generate(1, logits_processor=force))
        out.append((la.clone(), lb.clone(), sa.entropy, sb.entropy))
    return out


@needs_kernel
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(c))
def test_logits_stay_within_the_stated_bound(both_kernels, case) -> None:
    """Teacher-forced on torch's greedy tokens: the next-token logits within 1% of their spread, the entropies the
    triggers read (about 4.5 nats here) within 0.05, and the same greedy choice wherever it is not a tie
    (:data:`TIE`)."""
    mine, theirs = (_fresh(lm) for lm in both_kernels[case])
    assert all(layer.uses_kernel for _, layer in packed_layers(mine.model))
    assert not any(layer.uses_kernel for _, layer in packed_layers(theirs.model))
    tokens = [step.id for step in theirs.session(theirs.prompt_ids(QUESTION)).generate(32)]
    for la, lb, ea, eb in _teacher_forced(mine, theirs, tokens):
        spread = float(la.max() - la.min())
        assert float((la - lb).abs().max()) < 0.01 * spread
        assert abs(ea - eb) < 0.05
        top = la.topk(2).values
        if float(top[0] - top[1]) > TIE * spread:
            assert int(lb.argmax()) == int(la.argmax())


@needs_kernel
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(c))
def test_greedy_tokens_equal_torch_kernels_up_to_ties(both_kernels, case) -> None:
    """Free-running greedy tokens equal torch's kernels'; where they part, torch's top two logits there were a tie
    (both kernels round every linear output to bfloat16, so random tiny models meet exact ties: see :data:`TIE`)."""
    mine, theirs = (_fresh(lm) for lm in both_kernels[case])
    assert decode_kernel(mine.model) == f"active-rag {kernels.default_isa()}"
    ids = mine.prompt_ids(QUESTION)
    a = [s.id for s in theirs.session(ids).generate(24)]
    b = [s.id for s in mine.session(ids).generate(24)]
    if a != b:
        parted = next(i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y)
        la, _, _, _ = _teacher_forced(mine, theirs, a[: parted + 1])[parted]
        assert float(la.max() - la[b[parted]]) <= TIE * float(la.max() - la.min()), f"parted at token {parted}, no tie"


@needs_kernel
@pytest.mark.filterwarnings("ignore:follow_links")  # the query-only retriever has no name index
@pytest.mark.parametrize("family", ["llama", "qwen2"])
@pytest.mark.parametrize("preset", list(PRESETS))
def test_retrieval_decisions_equal_torch_kernels(both_kernels, preset: str, family: str) -> None:
    """Every preset's retrievals (position and query) with ``mixed`` weights on the kernel equal those on torch's
    kernels (the answers too, but where a tie parted them: three presets on the Qwen2 model, near their end)."""
    mine, theirs = both_kernels[(family, "mixed")]
    assert {layer.kind for _, layer in packed_layers(mine.model)} == {"int4", "int8"}

    def run(lm: ActiveLM) -> tuple[str, list[tuple[int, str]]]:
        result = ActiveRAG.from_preset(preset, _fresh(lm), QueryRetriever(), max_new_tokens=16).run(QUESTION)
        return result.answer, [(r.position, r.query) for r in result.retrievals]

    (answer_a, retrievals_a), (answer_b, retrievals_b) = run(theirs), run(mine)
    assert retrievals_b == retrievals_a
    if (family, preset) not in {("qwen2", "wo-rag"), ("qwen2", "dragin"), ("qwen2", "dragin-code")}:
        assert answer_b == answer_a


@needs_kernel
def test_doctor_names_the_kernel(both_kernels) -> None:
    from active_rag.cli.doctor import environment

    mine, theirs = both_kernels[("llama", "int4")]
    assert f"decode kernel active-rag {kernels.default_isa()}" in environment(mine)
    assert "decode kernel torch" in environment(theirs)


def test_rows_written_with_either_kernel_have_keys_of_their_own(both_kernels) -> None:
    """The kernel moves logits within a bound, so an evaluation's rows say which kernel wrote them: a resume never
    mixes the two, and ``ACTIVE_RAG_DECODE_KERNEL=torch`` resumes the rows torch's kernels wrote."""
    from active_rag.evaluation.config import EvalConfig
    from active_rag.evaluation.method_engines import _decodes_with_our_kernel, _engine_key

    if not kernels.available():
        pytest.skip("the active-rag decode kernel is not built")
    mine, theirs = both_kernels[("qwen2", "mixed")]
    assert _decodes_with_our_kernel(mine) and not _decodes_with_our_kernel(theirs)
    retriever = type("R", (), {"retrieve": lambda self, q, k: [Passage(id="a", text="x")]})()
    config = EvalConfig(dataset="hotpotqa")
    key = {name: _engine_key(ActiveRAG.from_preset("sr-rag", lm, retriever), config, "tiny")
           for name, lm in (("mine", mine), ("theirs", theirs))}
    assert key["mine"] != key["theirs"]
