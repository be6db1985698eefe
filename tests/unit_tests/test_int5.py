"""5-bit weights (active_rag.models.int5_linear, the kernel's int5 path): the layout round-trips, every instruction-set
path gives the scalar reference's bits within the int4 path's stated bounds, ``mixed`` keeps a 32-level grid in 5 bits
where active-rag's kernel decodes and in int8 where torch's do, each in a cache file of its own."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from torch import nn

from active_rag import kernels
from active_rag.models.int5_linear import Int5Linear
from active_rag.models.quantized import Int4Linear, Int8Linear, grid_quantize
from active_rag.models.weights import layer_from_state, packed_layout, quantize_model
from tests.unit_tests.test_decode_kernel import _int4_weights, _isas, _reference, _rounding_bound, needs_kernel


def _int5_weights(n: int, k: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return _int4_weights(n, k, seed, bits=5)


def _grid_linear(out_features: int, in_features: int, levels: int, seed: int = 0) -> nn.Linear:
    """A layer whose every group of 32 inputs lies on a grid of ``levels`` levels, using them all (a GGUF tensor
    of that many bits, read back as floats)."""
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, levels, (out_features, in_features), generator=g)
    codes[:, ::32], codes[:, 1::32] = 0, levels - 1
    step = torch.rand(out_features, in_features // 32, 1, generator=g) * 0.02 + 1e-3
    low = torch.randn(out_features, in_features // 32, 1, generator=g) * 0.05
    linear = nn.Linear(in_features, out_features, bias=False)
    with torch.no_grad():
        linear.weight.copy_((low + step * codes.view(out_features, -1, 32).float()).view(out_features, in_features))
    return linear


@pytest.mark.parametrize("n,k", [(16, 32), (37, 96), (48, 64), (1, 160)])
def test_the_int5_layout_round_trips(n: int, k: int) -> None:
    codes, step, zero, _ = _int5_weights(n, k)
    tiles, scales = kernels.pack_int5(codes, step, zero)
    assert tiles.shape == (kernels.tiles_count(n), k // 32 * 5, 64) and scales.shape == (kernels.tiles_count(n), k // 32, 2, 16)
    back = kernels.unpack_int5(tiles, scales, n)
    assert torch.equal(back[0], codes) and torch.equal(back[1], step) and torch.equal(back[2], zero)
    # the nibbles are int4's layout; mask 2c + h of a group holds bit 4 of the code in byte 4 * lane + i's nibble h
    lane = min(3, n - 1)
    assert int(tiles[0, 1, 4 * lane + 2]) == (int(codes[lane, 10]) & 15) | (int(codes[lane, 14]) & 15) << 4
    mask = int.from_bytes(bytes(tiles[0, 4, 8 * 3: 8 * 4].tolist()), "little")  # chunk 1, high nibbles
    assert (mask >> (4 * lane + 2)) & 1 == int(codes[lane, 8 + 4 + 2]) >> 4


@needs_kernel
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 25])
@pytest.mark.parametrize("n,k", [(37, 96), (48, 64), (16, 320)])
def test_int5_matches_the_reference_on_every_path(rows: int, n: int, k: int) -> None:
    codes, step, zero, weight = _int5_weights(n, k, seed=rows)
    codes[0, :32] = 31  # every fifth bit of a group set, and none of another
    codes[-1, -32:] = 3
    weight = ((codes.float() - 16).view(n, -1, 32) * step[..., None] + zero[..., None]).view(n, k)  # with those codes
    tiles, scales = kernels.pack_int5(codes, step, zero)
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows)) * 4
    x[0, :32] = 127.0  # the largest activations: the AVX2 path's 16-bit sums at their bound
    outs = {isa: kernels.int5_gemm(x, tiles, scales, n, isa) for isa in _isas()}
    reference, slack = _reference(x, weight)
    assert ((outs["scalar"].double() - reference).abs() <= slack).all()
    assert ((outs["scalar"].double() - x.double() @ weight.double().t()).abs() <= _rounding_bound(x, weight) + slack).all()
    for isa, out in outs.items():
        assert torch.equal(out, outs["scalar"]), isa
    dense = kernels.int5_dequant(tiles, scales, torch.empty(n, k))
    assert torch.equal(dense, weight)
    # the dense prefill's bfloat16 weights: the float32 ones rounded to nearest even (AVX-512's path computes them)
    assert torch.equal(kernels.int5_dequant(tiles, scales, torch.empty(n, k, dtype=torch.bfloat16)), weight.bfloat16())


@needs_kernel
def test_a_5_bit_grid_becomes_an_int5_layer_with_the_same_products_on_both_paths() -> None:
    linear = _grid_linear(48, 96, 32)
    assert not bool(Int4Linear.quantize(linear.weight)["exact"].all()) and bool(grid_quantize(linear.weight, 5)["exact"].all())
    model = nn.Sequential(linear, nn.Linear(48, 32), _grid_linear(64, 32, 16))
    quantize_model(model, "mixed")
    assert [type(m) for m in model] == [Int5Linear, Int8Linear, Int4Linear]
    layer = model[0]
    x = torch.randn(3, 96)
    exact = x @ linear.weight.t()
    assert (layer(x) - exact).abs().max() < 0.02 * exact.abs().max()  # the step's bfloat16 rounding, the activations'
    long = torch.randn(80, 96)  # more rows than the packed limit: the dense prefill of the same weight
    dense = long @ layer.dequantize().t()
    assert (layer(long) - dense).abs().max() < 0.01 * dense.abs().max()  # bfloat16 input, weight and output
    again = layer_from_state(layer.state(), None)
    assert type(again) is Int5Linear and torch.equal(again(x), layer(x))
    assert torch.equal(layer.decode_function()(x), layer(x))
    assert layer.weight_bytes == 48 * 96 * 5 // 8 + 2 * 48 * 96 // 32 * 2  # 5 bits a weight and two bfloat16 a group


def test_under_torch_s_kernels_a_5_bit_grid_stays_int8_in_a_file_of_its_own(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(kernels.DECODE_KERNEL_VARIABLE, "torch")
    assert packed_layout("mixed") == "mixed" and packed_layout("int8") == "int8"
    model = nn.Sequential(_grid_linear(48, 96, 32))
    cache = tmp_path / "packed-mixed.safetensors"
    quantize_model(model, "mixed", cache=cache)
    assert type(model[0]) is Int8Linear and cache.is_file()
    with pytest.raises(RuntimeError, match="only with active-rag's kernel"):
        Int5Linear.from_state(grid_quantize(_grid_linear(48, 96, 32).weight, 5))
    monkeypatch.delenv(kernels.DECODE_KERNEL_VARIABLE)
    if not kernels.available():
        return
    assert packed_layout("mixed") == "mixed-int5"
    again = nn.Sequential(_grid_linear(48, 96, 32))
    quantize_model(again, "mixed", cache=cache)
    assert type(again[0]) is Int5Linear and (tmp_path / "packed-mixed-int5.safetensors").is_file()
    loaded = nn.Sequential(_grid_linear(48, 96, 32))
    quantize_model(loaded, "mixed", cache=cache)  # read back from the int5 file
    assert type(loaded[0]) is Int5Linear and torch.equal(loaded[0].tiles, again[0].tiles)
