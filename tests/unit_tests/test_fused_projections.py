"""Projections that read one input as one kernel call (active_rag.models.fused_projections): layers of one kind give
the separate calls' outputs to the bit, at batch 1 and 8, with and without a bias; the layers hold views of the
concatenated weights (held once) and their prefill's dense path is unchanged; layers of other kinds, widths or biases
keep their own calls; a layer whose tensors were replaced afterwards is read as it is now; a run is built once."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from torch import nn

from active_rag.models.fused_projections import FusedRun, fuse_projections
from active_rag.models.int5_linear import Int5Linear
from active_rag.models.quantized import Int4Linear, Int8Linear, grid_quantize
from tests.unit_tests.test_decode_kernel import _isas, needs_kernel
from tests.unit_tests.test_int5 import _grid_linear

IN = 96


def _linear(out_features: int, bias: bool, seed: int) -> nn.Linear:
    torch.manual_seed(seed)
    layer = nn.Linear(IN, out_features, bias=bias)
    return layer


def _packed(kind: str, out_features: int, bias: bool = True, seed: int = 0) -> nn.Module:
    linear = _linear(out_features, bias, seed)
    if kind == "int8":
        return Int8Linear.from_linear(linear)
    if kind == "int4":
        return Int4Linear.from_linear(linear)
    grid = _grid_linear(out_features, IN, 32, seed=seed)
    return Int5Linear.from_state(grid_quantize(grid.weight, 5), linear.bias)


def _separate(layers: list[nn.Module], x: torch.Tensor) -> list[torch.Tensor]:
    calls = [layer.decode_function() for layer in layers]
    return [call(x) for call in calls]


@needs_kernel
@pytest.mark.parametrize("kind", ["int8", "int4", "int5"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("rows", [1, 8])
@pytest.mark.parametrize("isa", [None, *_isas()])
def test_layers_of_one_kind_give_the_separate_calls_bits_in_one_call(kind: str, bias: bool, rows: int, isa: str | None) -> None:
    layers = [_packed(kind, n, bias, seed=i) for i, n in enumerate((64, 32, 32))]
    for layer in layers:  # every instruction-set path the CPU runs, and the layer's own choice
        layer.isa = isa or layer.isa
    x = torch.randn(rows, 1, IN)
    before = _separate(layers, x)
    dense_before = layers[1](torch.randn(70, IN, generator=torch.Generator().manual_seed(1)))
    fused = fuse_projections(layers)
    assert isinstance(fused, FusedRun)
    calls = [layer.packed_calls for layer in layers]
    outputs = fused(x)
    assert [layer.packed_calls for layer in layers] == [c + 1 for c in calls]
    assert len(outputs) == 3
    for got, want in zip(outputs, before, strict=True):
        assert got.shape == want.shape and torch.equal(got, want)
    # the layers read views of one tensor: the weights are held once, and each layer alone still computes its own
    storages = {layer.tiles.untyped_storage().data_ptr() for layer in layers}
    assert len(storages) == 1 and all(layer.tiles.data_ptr() % 64 == 0 for layer in layers)
    for got, want in zip(_separate(layers, x), before, strict=True):
        assert torch.equal(got, want)
    assert torch.equal(layers[1](torch.randn(70, IN, generator=torch.Generator().manual_seed(1))), dense_before)


@needs_kernel
def test_layers_that_cannot_share_a_call_keep_their_own() -> None:
    layers = [_packed("int5", 64, seed=0), _packed("int5", 32, seed=1), _packed("int8", 32, seed=2),
              _packed("int8", 32, bias=False, seed=3), _packed("int4", 24, seed=4), _packed("int4", 32, seed=5)]
    x = torch.randn(2, IN)
    before = _separate(layers, x)
    fused = fuse_projections(layers)
    runs = [layers[0].__dict__.get("_active_rag_fused_run")] + [layer.__dict__.get("_active_rag_fused_run") for layer in layers[1:]]
    assert isinstance(runs[0], FusedRun) and runs[0].layers == tuple(layers[:2])
    assert all(run is None for run in runs[1:])  # other kinds, a bias missing, 24 outputs: each alone
    for got, want in zip(fused(x), before, strict=True):
        assert torch.equal(got, want)
    dense = [nn.Linear(IN, 16), nn.Linear(IN, 16)]
    assert [y.shape for y in fuse_projections(dense)(x)] == [(2, 16), (2, 16)]


@needs_kernel
def test_a_layer_whose_tensors_were_replaced_is_read_as_it_is_now() -> None:
    layers = [_packed("int4", 32, seed=0), _packed("int4", 32, seed=1)]
    fused = fuse_projections(layers)
    x = torch.randn(1, IN)
    other = _packed("int4", 32, seed=7)
    layers[1]._buffers["tiles"] = other.tiles.clone()
    layers[1]._buffers["tile_scales"] = other.tile_scales.clone()
    layers[1]._parameters["bias"] = nn.Parameter(other.bias.detach().clone(), requires_grad=False)
    got = fused(x)
    assert torch.equal(got[1], other.decode_function()(x)) and torch.equal(got[0], layers[0].decode_function()(x))
    again = fuse_projections(layers)  # built again from what the layers hold now
    assert again is not fused and torch.equal(again(x)[1], got[1])


@needs_kernel
@pytest.mark.parametrize("prefill", ["dense", "kernel"])
def test_a_run_is_built_once_and_other_inputs_go_through_each_layer(prefill: str, monkeypatch) -> None:
    monkeypatch.setenv("ACTIVE_RAG_PREFILL", prefill)  # the dense product with AMX, the kernel without (auto)
    layers = [_packed("int8", 32, seed=0), _packed("int8", 16, seed=1)]
    fused = fuse_projections(layers)
    assert fuse_projections(layers) is fused
    wide = torch.randn(70, IN)  # a prefill's rows: each layer's own prefill path
    calls = [layer.packed_calls for layer in layers]
    for got, layer in zip(fused(wide), layers, strict=True):
        assert torch.equal(got, layer(wide))
    if prefill == "dense":
        assert all(layer.dense_calls == 2 for layer in layers)
    else:
        assert all(layer.dense_calls == 0 and layer.packed_calls == c + 2 for layer, c in zip(layers, calls, strict=True))
    half = torch.randn(1, IN).bfloat16()
    for got, layer in zip(fused(half), layers, strict=True):
        assert torch.equal(got, layer(half))


def test_pages_handed_back_keep_their_bytes(tmp_path) -> None:
    from active_rag.models.fused_projections import _page_out

    path = tmp_path / "weights.bin"
    data = torch.arange(1 << 16, dtype=torch.int32)
    path.write_bytes(data.numpy().tobytes())
    mapped = torch.from_file(str(path), shared=True, size=data.numel(), dtype=torch.int32)
    anonymous = data.clone()
    assert torch.equal(mapped, data)
    asked = _page_out([mapped, anonymous, torch.empty(0)])
    release = tuple(int(part) for part in os.uname().release.split("-")[0].split(".")[:2]) if os.name == "posix" else ()
    if os.name == "posix" and os.uname().sysname == "Linux" and release >= (5, 4):  # MADV_PAGEOUT's first kernel
        assert asked >= 2 * (data.numel() * 4 - 8192)  # every page wholly inside each tensor
    assert torch.equal(mapped, data) and torch.equal(anonymous, data)
