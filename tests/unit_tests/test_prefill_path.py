"""active_rag/models/prefill_path.py: a prefill takes the packed kernel's path where the CPU has no AMX."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from active_rag import kernels
from active_rag.errors import InvalidOptionError
from active_rag.models import prefill_path
from active_rag.models.prefill_path import VARIABLE, amx_bfloat16, kernel_prefill
from active_rag.models.quantized import PACKED_MAX_ROWS, Int4Linear, Int8Linear


@pytest.fixture()
def amx_cpu(monkeypatch):
    """A CPU with AMX tiles, torch on its AVX-512 code, oneDNN not capped."""
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    for name in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", VARIABLE):
        monkeypatch.delenv(name, raising=False)


def test_amx_keeps_the_dense_prefill_and_anything_else_takes_the_kernel(amx_cpu, monkeypatch) -> None:
    assert amx_bfloat16() and not kernel_prefill()
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")  # oneDNN held below AMX: a CPU without it
    assert not amx_bfloat16() and kernel_prefill()
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "avx512_core_amx")
    assert amx_bfloat16()
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    assert not amx_bfloat16() and kernel_prefill()
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")  # ATEN_CPU_CAPABILITY=avx2
    assert kernel_prefill()


def test_the_variable_chooses_and_names_a_bad_value(amx_cpu, monkeypatch) -> None:
    monkeypatch.setenv(VARIABLE, "kernel")
    assert kernel_prefill()
    monkeypatch.setattr(prefill_path, "amx_bfloat16", lambda: False)
    monkeypatch.setenv(VARIABLE, " Dense ")
    assert not kernel_prefill()
    monkeypatch.setenv(VARIABLE, "auto")
    assert kernel_prefill()
    monkeypatch.setenv(VARIABLE, "fast")
    with pytest.raises(InvalidOptionError, match="ACTIVE_RAG_PREFILL must be kernel, dense or auto, got 'fast'"):
        kernel_prefill()


@pytest.mark.parametrize("cls", [Int4Linear, Int8Linear])
def test_a_kernel_prefill_is_the_decode_kernel_on_every_row(cls, monkeypatch) -> None:
    """A prompt's rows through the kernel give, row for row, what a decode step of that row gives (the activations
    quantised per row, the rows split over threads), and count as packed calls; ``dense`` dequantises instead."""
    if not kernels.available():
        pytest.skip("the active-rag decode kernel is not built")
    torch.manual_seed(5)
    layer = cls.from_linear(nn.Linear(96, 80, bias=True))
    x = torch.randn(3 * PACKED_MAX_ROWS + 5, 96) * 3
    monkeypatch.setenv(VARIABLE, "kernel")
    whole = layer(x)
    assert layer.packed_calls == 1 and layer.dense_calls == 0
    assert torch.equal(whole, torch.cat([layer(x[i : i + 1]) for i in range(x.shape[0])]))
    monkeypatch.setenv(VARIABLE, "dense")
    dense = layer(x)
    assert layer.dense_calls == 1
    assert not torch.equal(dense, whole)  # the int8 activations differ from the dense product's bfloat16 ones
    assert (dense - whole).abs().max() < 0.05 * dense.abs().max()


def test_rows_written_with_the_kernels_prefill_have_keys_of_their_own(monkeypatch) -> None:
    """A prefill through the kernel moves logits as a decode step does: an evaluation's rows say so, and
    ``ACTIVE_RAG_PREFILL=dense`` resumes the rows written with the dense prefill."""
    from active_rag.evaluation import method_engines
    from tests.unit_tests.engine_keys import engine_key

    monkeypatch.setattr(method_engines, "_decodes_with_our_kernel", lambda model: True)
    monkeypatch.setattr(method_engines, "_decode_kernel_layers", lambda model: [])
    monkeypatch.setenv(VARIABLE, "dense")
    dense = engine_key()
    monkeypatch.setenv(VARIABLE, "kernel")
    assert engine_key() != dense
    monkeypatch.setattr(method_engines, "_decodes_with_our_kernel", lambda model: False)
    torch_rows = engine_key()
    monkeypatch.setenv(VARIABLE, "dense")
    assert engine_key() == torch_rows


def test_doctor_says_how_a_prompt_is_prefilled(monkeypatch) -> None:
    if not kernels.available():
        pytest.skip("the active-rag decode kernel is not built")
    from active_rag.cli.doctor import environment

    lm = type("LM", (), {"device": torch.device("cpu"), "name": "tiny", "dtype": torch.float32, "weights": "int4",
                         "model": nn.Sequential(Int4Linear.from_linear(nn.Linear(64, 32)))})()
    monkeypatch.setenv(VARIABLE, "kernel")
    assert environment(lm).endswith(f"decode kernel active-rag {kernels.default_isa()}, prefill kernel")  # type: ignore[arg-type]
    monkeypatch.setenv(VARIABLE, "dense")
    monkeypatch.setenv("ACTIVE_RAG_PREFILL_DTYPE", "float32")
    assert environment(lm).endswith(", prefill dense float32")  # type: ignore[arg-type]
