"""A GGUF's k-quant tensors kept as the file stores them (active_rag.models.q4k_linear and q6k_linear: the int4
kernel's uint8-scales path and the int6 kernel): the blocks read as gguf-py reads them, the layouts round-trip, every
instruction-set path gives the scalar reference's bits within the int4 path's stated bounds, and ``mixed`` keeps a
Q4_K or Q6_K tensor of the model's GGUF so only where the file gives the weight bit for bit, in a cache file of its
own (``ACTIVE_RAG_KQUANTS=off``: the earlier layouts)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from active_rag import kernels
from active_rag.decoding.kernel_layers import KIND_CODES
from active_rag.models import gguf_layers, weights
from active_rag.models.fused_projections import FusedRun
from active_rag.models.gguf_layers import GGUFLayers, gguf_tensor_names
from active_rag.models.q4k_linear import BLOCK_BYTES, Int4KLinear, q4k_blocks
from active_rag.models.q6k_linear import BLOCK_BYTES as Q6K_BYTES
from active_rag.models.q6k_linear import Int6KLinear, q6k_blocks
from active_rag.models.quantized import Int4Linear, Int8Linear
from active_rag.models.weights import KQUANTS_VARIABLE, layer_from_state, packed_layout, quantize_model
from tests.unit_tests.test_decode_kernel import _isas, _reference, _rounding_bound, needs_kernel


def _q4k_bytes(rows: int, cols: int, seed: int = 0) -> np.ndarray:
    """A random Q4_K tensor as a GGUF file stores it: uint8 ``[rows, cols / 256 * 144]``."""
    rng = np.random.default_rng(seed)
    n = rows * cols // 256
    blocks = np.zeros((n, BLOCK_BYTES), np.uint8)
    blocks[:, 0:2] = np.float16(rng.uniform(1e-4, 3e-3, n)).view(np.uint8).reshape(n, 2)
    blocks[:, 2:4] = np.float16(rng.uniform(1e-4, 3e-3, n)).view(np.uint8).reshape(n, 2)
    blocks[:, 4:] = rng.integers(0, 256, (n, BLOCK_BYTES - 4), dtype=np.uint8)
    return blocks.reshape(rows, -1)


def _dequantized(data: np.ndarray) -> torch.Tensor:
    from gguf.quants import Q4_K

    rows = data.shape[0]
    return torch.from_numpy(Q4_K.dequantize_blocks(data.reshape(-1, BLOCK_BYTES)).reshape(rows, -1).copy())


@pytest.mark.parametrize("rows,cols", [(16, 256), (37, 512), (3, 768)])
def test_the_blocks_read_as_gguf_py_reads_them(rows: int, cols: int) -> None:
    data = _q4k_bytes(rows, cols)
    blocks = q4k_blocks(data)
    assert blocks.codes.shape == (rows, cols) and blocks.sc.shape == (rows, cols // 32) == blocks.m.shape
    assert blocks.d.shape == (rows, cols // 256) and blocks.d.dtype == torch.float16
    assert int(blocks.codes.max()) <= 15 and int(blocks.sc.max()) <= 63 and int(blocks.m.max()) <= 63
    assert torch.equal(blocks.weight(), _dequantized(data))


@pytest.mark.parametrize("rows,cols", [(16, 256), (37, 512), (1, 256)])
def test_the_q4k_layout_round_trips(rows: int, cols: int) -> None:
    blocks = q4k_blocks(_q4k_bytes(rows, cols, seed=rows))
    tiles, scales = kernels.pack_int4k(blocks.codes, blocks.sc, blocks.m, blocks.d, blocks.dmin)
    count = kernels.tiles_count(rows)
    assert tiles.shape == (count, cols // 8, 64) and scales.shape == (count, cols // 256, 320)
    assert scales.dtype == torch.uint8 and torch.equal(tiles, kernels.pack_int4(blocks.codes, blocks.sc, blocks.m)[0])
    lane = min(5, rows - 1)  # lane l's d at bytes 2l, dmin at 32 + 2l, group j's sc at 64 + 16j + l, m at 192 + 16j + l
    assert scales[0, 0, 2 * lane: 2 * lane + 2].view(torch.float16) == blocks.d[lane, 0]
    assert scales[0, 0, 32 + 2 * lane: 34 + 2 * lane].view(torch.float16) == blocks.dmin[lane, 0]
    assert int(scales[0, 0, 64 + 16 * 3 + lane]) == int(blocks.sc[lane, 3])
    assert int(scales[0, 0, 192 + 16 * 7 + lane]) == int(blocks.m[lane, 7])
    codes, step, zero = kernels.unpack_int4k(tiles, scales, rows)
    assert torch.equal(codes, blocks.codes)
    d = blocks.d.float().repeat_interleave(8, dim=1)
    assert torch.equal(step, blocks.sc.float() * d)
    assert torch.equal(zero, 8 * step - blocks.m.float() * blocks.dmin.float().repeat_interleave(8, dim=1))
    with pytest.raises(ValueError, match="divisible by 256"):
        kernels.pack_int4k(blocks.codes[:, :128], blocks.sc[:, :4], blocks.m[:, :4], blocks.d[:, :1], blocks.dmin[:, :1])


def _weight(tiles: torch.Tensor, scales: torch.Tensor, n: int) -> torch.Tensor:
    codes, step, zero = kernels.unpack_int4k(tiles, scales, n)
    return ((codes.float().view(n, -1, 32) - 8) * step[..., None] + zero[..., None]).view(n, -1)


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_q4k_dequantisation_for_the_dense_prefill(dtype: torch.dtype) -> None:
    blocks = q4k_blocks(_q4k_bytes(40, 512, seed=3))
    tiles, scales = kernels.pack_int4k(blocks.codes, blocks.sc, blocks.m, blocks.d, blocks.dmin)
    out = kernels.int4_dequant(tiles, scales, torch.empty(40, 512, dtype=dtype))
    assert torch.equal(out, _weight(tiles, scales, 40).to(dtype))
    with pytest.raises(RuntimeError, match="do not match"):
        kernels.int4_dequant(tiles, scales[:, :1].contiguous(), torch.empty(40, 512))


@needs_kernel
def test_the_q4k_layer_decodes_fuses_and_saves() -> None:
    blocks = q4k_blocks(_q4k_bytes(48, 512, seed=5))
    bias = torch.randn(48)
    layer = Int4KLinear.from_blocks(blocks, bias)
    x = torch.randn(3, 512)
    dense = x @ blocks.weight().t() + bias
    assert (layer(x) - dense).abs().max() < 0.02 * dense.abs().max()  # bfloat16 input and output, int8 activations
    assert torch.equal(layer.decode_function()(x), layer(x)) and KIND_CODES[layer.kind] == 4
    long = torch.randn(300, 512)  # past the packed rows: the dense prefill over the dequantised weight
    assert (layer(long) - (long @ blocks.weight().t() + bias)).abs().max() < 0.05 * dense.abs().max()
    again = layer_from_state(layer.state(), bias)
    assert type(again) is Int4KLinear and torch.equal(again(x), layer(x))
    assert layer.weight_bytes == 48 * 512 // 2 + 48 // 16 * (512 // 256) * 320  # 4 bits, 320 bytes per 16 x 256
    other = Int4KLinear.from_blocks(q4k_blocks(_q4k_bytes(32, 512, seed=6)))
    first = Int4KLinear.from_blocks(blocks)
    alone = [first(x), other(x)]
    fused = FusedRun([first, other])
    assert all(torch.equal(a, b) for a, b in zip(alone, fused(x), strict=True))


def _q6k_bytes(rows: int, cols: int, seed: int = 0) -> np.ndarray:
    """A random Q6_K tensor as a GGUF file stores it: uint8 ``[rows, cols / 256 * 210]``, its scales of both signs."""
    rng = np.random.default_rng(seed)
    n = rows * cols // 256
    blocks = rng.integers(0, 256, (n, Q6K_BYTES), dtype=np.uint8)
    blocks[:, 208:210] = np.float16(rng.uniform(1e-5, 3e-4, n)).view(np.uint8).reshape(n, 2)
    return blocks.reshape(rows, -1)


def _q6k_dequantized(data: np.ndarray) -> torch.Tensor:
    from gguf.quants import Q6_K

    rows = data.shape[0]
    return torch.from_numpy(Q6_K.dequantize_blocks(data.reshape(-1, Q6K_BYTES)).reshape(rows, -1).copy())


@pytest.mark.parametrize("rows,cols", [(16, 256), (37, 512), (3, 768)])
def test_q6k_blocks_read_as_gguf_py_reads_them_and_round_trip(rows: int, cols: int) -> None:
    data = _q6k_bytes(rows, cols, seed=rows)
    blocks = q6k_blocks(data)
    assert blocks.codes.shape == (rows, cols) and blocks.sc.shape == (rows, cols // 16) and blocks.sc.dtype == torch.int8
    assert int(blocks.codes.max()) == 63 and int(blocks.sc.min()) < 0 < int(blocks.sc.max())
    assert torch.equal(blocks.weight(), _q6k_dequantized(data))
    tiles, scales = kernels.pack_int6k(blocks.codes, blocks.sc, blocks.d)
    count = kernels.tiles_count(rows)
    assert tiles.shape == (count, cols // 32 * 6, 64) and scales.shape == (count, cols // 256, 288)
    lane = min(5, rows - 1)  # lane l's d at bytes 2l, sub-block s's scale at 32 + 16s + l
    assert scales[0, 0, 2 * lane: 2 * lane + 2].view(torch.float16) == blocks.d[lane, 0]
    assert int(scales[0, 0, 32 + 16 * 9 + lane].view(torch.int8)) == int(blocks.sc[lane, 9])
    # the nibbles are int4's layout; bit 4 in the fifth chunk and bit 5 in the sixth, as int5's masks
    assert int(tiles[0, 1, 4 * lane + 2]) == (int(blocks.codes[lane, 10]) & 15) | (int(blocks.codes[lane, 14]) & 15) << 4
    for plane in (0, 1):
        mask = int.from_bytes(bytes(tiles[0, 4 + plane, 8 * 3: 8 * 4].tolist()), "little")  # chunk 1, high nibbles
        assert (mask >> (4 * lane + 2)) & 1 == (int(blocks.codes[lane, 8 + 4 + 2]) >> (4 + plane)) & 1
    codes, step = kernels.unpack_int6k(tiles, scales, rows)
    assert torch.equal(codes, blocks.codes)
    assert torch.equal(step, blocks.sc.float() * blocks.d.float().repeat_interleave(16, dim=1))
    with pytest.raises(ValueError, match="divisible by 256"):
        kernels.pack_int6k(blocks.codes[:, :128], blocks.sc[:, :8], blocks.d[:, :1])


@needs_kernel
@pytest.mark.parametrize("kind", ["q4k", "q6k"])
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 8, 9, 13, 25])
@pytest.mark.parametrize("n,k", [(37, 256), (48, 512), (16, 768)])
def test_k_quants_match_the_reference_on_every_path(kind: str, rows: int, n: int, k: int) -> None:
    """Every instruction-set path gives the scalar reference's bits (rows past 8 run int6's expanded tiles), within
    the int4 path's bounds of the exact product of the quantised activations with the weight the kernel holds."""
    if kind == "q4k":
        blocks = q4k_blocks(_q4k_bytes(n, k, seed=rows))
        tiles, scales = kernels.pack_int4k(blocks.codes, blocks.sc, blocks.m, blocks.d, blocks.dmin)
        weight, gemm = _weight(tiles, scales, n), kernels.int4_gemm
        assert (weight - blocks.weight()).abs().max() <= 1e-6 * blocks.weight().abs().max()  # the file's values
    else:
        blocks = q6k_blocks(_q6k_bytes(n, k, seed=rows))
        tiles, scales = kernels.pack_int6k(blocks.codes, blocks.sc, blocks.d)
        weight, gemm = blocks.weight(), kernels.int6_gemm
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows))
    outs = {isa: gemm(x, tiles, scales, n, isa) for isa in _isas()}
    reference, slack = _reference(x, weight)
    assert ((outs["scalar"].double() - reference).abs() <= slack).all()
    assert ((outs["scalar"].double() - x.double() @ weight.double().t()).abs() <= _rounding_bound(x, weight) + slack).all()
    for isa, out in outs.items():
        assert torch.equal(out, outs["scalar"]), isa


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_q6k_layer_dequantises_decodes_fuses_and_saves(dtype: torch.dtype) -> None:
    blocks = q6k_blocks(_q6k_bytes(48, 512, seed=7))
    bias = torch.randn(48)
    layer = Int6KLinear.from_blocks(blocks, bias)
    assert torch.equal(layer.dequantize(dtype), blocks.weight().to(dtype))  # the file's values, exactly
    x = torch.randn(3, 512)
    dense = x @ blocks.weight().t() + bias
    assert (layer(x) - dense).abs().max() < 0.02 * dense.abs().max()
    assert torch.equal(layer.decode_function()(x), layer(x)) and KIND_CODES[layer.kind] == 6
    long = torch.randn(300, 512)  # past the packed rows: the dense prefill over the dequantised weight
    assert (layer(long) - (long @ blocks.weight().t() + bias)).abs().max() < 0.05 * dense.abs().max()
    again = layer_from_state(layer.state(), bias)
    assert type(again) is Int6KLinear and torch.equal(again(x), layer(x))
    assert layer.weight_bytes == 48 * 512 * 6 // 8 + 48 // 16 * (512 // 256) * 288  # 6.5625 bits a weight
    first, other = Int6KLinear.from_blocks(blocks), Int6KLinear.from_blocks(q6k_blocks(_q6k_bytes(32, 512, seed=8)))
    alone = [first(x), other(x)]
    fused = FusedRun([first, other])
    assert all(torch.equal(a, b) for a, b in zip(alone, fused(x), strict=True))
    with pytest.raises(RuntimeError, match="tiles must be"):
        kernels.int6_gemm(x, layer.tiles[:, :-1].contiguous(), layer.tile_scales, 48)


def _write_gguf(path: Path, tensors: dict[str, np.ndarray]) -> None:
    from gguf import GGMLQuantizationType, GGUFWriter

    writer = GGUFWriter(str(path), "llama")
    for name, data in tensors.items():
        kind = GGMLQuantizationType.Q4_K if data.shape[1] % BLOCK_BYTES == 0 else GGMLQuantizationType.Q6_K
        writer.add_tensor(name, data, raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


class _Block(nn.Module):
    def __init__(self, weights: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self.self_attn, self.mlp = nn.Module(), nn.Module()
        for name, weight in weights.items():
            parent, child = name.split(".")
            linear = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
            with torch.no_grad():
                linear.weight.copy_(weight)
            setattr(getattr(self, parent), child, linear)


def _model(weights: dict[str, torch.Tensor]) -> nn.Module:
    model = nn.Module()
    model.model = nn.Module()
    model.model.layers = nn.ModuleList([_Block(weights)])
    return model


def test_gguf_names_of_the_layers() -> None:
    assert gguf_tensor_names("model.layers.3.mlp.down_proj") == ["blk.3.ffn_down.weight"]
    assert gguf_tensor_names("model.layers.0.self_attn.o_proj") == ["blk.0.attn_output.weight"]
    assert gguf_tensor_names("lm_head") == ["output.weight", "token_embd.weight"]
    assert gguf_tensor_names("model.layers.0.mlp.act") == [] and gguf_tensor_names("score") == []


@needs_kernel
def test_mixed_keeps_a_gguf_s_k_quants_only_where_they_give_the_weight(monkeypatch, tmp_path) -> None:
    up, q, gate, down = _q4k_bytes(32, 256, 1), _q4k_bytes(48, 512, 2), _q4k_bytes(16, 256, 3), _q6k_bytes(32, 256, 4)
    assert down.shape[1] % BLOCK_BYTES != 0  # told apart by their widths in _write_gguf
    gguf = tmp_path / "model.gguf"
    _write_gguf(gguf, {"blk.0.ffn_up.weight": up, "blk.0.attn_q.weight": q, "blk.0.ffn_gate.weight": gate,
                       "blk.0.ffn_down.weight": down})
    order = torch.randperm(48, generator=torch.Generator().manual_seed(0))  # a converter's row permutation
    moved = _dequantized(gate).clone()
    moved[3, 7] = torch.nextafter(moved[3, 7], torch.tensor(1.0))  # one value off the file's by one ulp

    def model() -> nn.Module:
        return _model({"mlp.up_proj": _dequantized(up), "self_attn.q_proj": _dequantized(q)[order],
                       "mlp.gate_proj": moved, "mlp.down_proj": _q6k_dequantized(down),
                       "self_attn.v_proj": _q6k_dequantized(down)[:16]})

    source = GGUFLayers(gguf)
    assert torch.equal(source.blocks("model.layers.0.self_attn.q_proj", _dequantized(q)[order]).weight(),
                       _dequantized(q)[order])
    assert source.blocks("model.layers.0.mlp.gate_proj", moved) is None
    assert source.blocks("model.layers.0.self_attn.o_proj", _dequantized(up)) is None  # not in the file
    monkeypatch.setattr(gguf_layers, "PERMUTED_ROWS", 32)  # a permutation is matched only up to that many rows
    assert source.blocks("model.layers.0.self_attn.q_proj", _dequantized(q)[order]) is None
    assert source.blocks("model.layers.0.mlp.up_proj", _dequantized(up)) is not None  # in the file's order
    monkeypatch.undo()
    monkeypatch.setattr(weights, "KQUANT_ISAS", ())  # a kernel path where they do not pay: the layouts before
    assert packed_layout("mixed", gguf=True) == "mixed-int5"
    monkeypatch.setattr(weights, "KQUANT_ISAS", (kernels.default_isa(),))
    assert packed_layout("mixed", gguf=True) == "mixed-int5-kquants" and packed_layout("int8", gguf=True) == "int8"
    cache = tmp_path / "packed-mixed.safetensors"
    first = quantize_model(model(), "mixed", cache=cache, gguf=gguf)
    block = first.model.layers[0]
    assert type(block.mlp.up_proj) is Int4KLinear and type(block.self_attn.q_proj) is Int4KLinear
    assert type(block.mlp.down_proj) is Int6KLinear
    assert type(block.mlp.gate_proj) is Int4Linear  # not the file's values: the bfloat16 layout, as before
    assert type(block.self_attn.v_proj) is Int8Linear  # not in the file
    assert (tmp_path / "packed-mixed-int5-kquants.safetensors").is_file()
    x = torch.randn(2, 512)
    assert (block.self_attn.q_proj(x) - x @ _dequantized(q)[order].t()).abs().max() < 0.02 * (x @ _dequantized(q).t()).abs().max()
    loaded = quantize_model(model(), "mixed", cache=cache, gguf=gguf)  # read back from its file
    assert type(loaded.model.layers[0].mlp.up_proj) is Int4KLinear and type(loaded.model.layers[0].mlp.down_proj) is Int6KLinear
    assert torch.equal(loaded.model.layers[0].self_attn.q_proj.tiles, block.self_attn.q_proj.tiles)
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + bytes(12))  # not a readable GGUF: the layouts before, with a warning
    fallback = quantize_model(model(), "mixed", cache=tmp_path / "other" / "packed-mixed.safetensors", gguf=broken)
    assert type(fallback.model.layers[0].mlp.up_proj) is Int4Linear
    monkeypatch.setenv(KQUANTS_VARIABLE, "off")
    assert packed_layout("mixed", gguf=True) == "mixed-int5"
    earlier = quantize_model(model(), "mixed", cache=cache, gguf=gguf)
    assert type(earlier.model.layers[0].mlp.up_proj) is Int4Linear and type(earlier.model.layers[0].mlp.down_proj) is Int8Linear
    assert (tmp_path / "packed-mixed-int5.safetensors").is_file()


@needs_kernel
def test_rows_of_k_quant_layers_have_keys_of_their_own(monkeypatch) -> None:
    """An evaluation's rows written with k-quant layers get an engine key of their own, so the rows written before
    them resume with ``ACTIVE_RAG_KQUANTS=off`` (which gives the earlier layers, and so the earlier key)."""
    from types import SimpleNamespace

    from active_rag.evaluation import method_engines
    from tests.unit_tests.engine_keys import engine_key

    before = [(name, SimpleNamespace(kind=kind)) for name, kind in (("q", "int5"), ("down", "int8"), ("up", "int4"))]
    after = [("q", SimpleNamespace(kind="int5")), ("down", SimpleNamespace(kind="int6k")), ("up", SimpleNamespace(kind="int4k"))]
    monkeypatch.setattr(method_engines, "_decodes_with_our_kernel", lambda model: True)
    monkeypatch.setattr(method_engines, "_decode_kernel_layers", lambda model: before)
    earlier = engine_key()
    monkeypatch.setattr(method_engines, "_decode_kernel_layers", lambda model: after)
    assert engine_key() != earlier
    for alone in (after[:2], [after[0], after[2]]):  # either kind alone
        monkeypatch.setattr(method_engines, "_decode_kernel_layers", lambda model, alone=alone: alone)
        assert engine_key() != earlier
