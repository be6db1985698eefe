"""The integrations/llamaindex_*.py recipes run offline end to end (with the tiny model passed in)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from llama_index.core.base.response.schema import Response
from llama_index.core.workflow import StopEvent

from active_rag import ActiveLM
from llamaindex_active_rag import RetrievalDecisionEvent, RetrievedEvent, RouteEvent, TokenEvent

INTEGRATIONS = Path(__file__).resolve().parents[2] / "integrations"


def load_recipe(name: str) -> ModuleType:
    path = INTEGRATIONS / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"recipe_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class Echo:
    def __init__(self) -> None:
        self.parts: list[str] = []

    def __call__(self, *args: Any, end: str = "\n", **kwargs: Any) -> None:
        self.parts.append(" ".join(map(str, args)) + end)

    @property
    def text(self) -> str:
        return "".join(self.parts)


@pytest.mark.parametrize("stream", [True, False])
def test_bm25_query_engine_recipe(tiny_lm: ActiveLM, stream: bool) -> None:
    recipe = load_recipe("llamaindex_bm25_query_engine")
    echo = Echo()
    response = recipe.main(lm=tiny_lm, preset="fl-rag", max_new_tokens=20, stream=stream, echo=echo)
    assert isinstance(response, Response) and response.metadata["method"] == "fl-rag"
    first = response.metadata["retrievals"][0]
    assert first["query"] == recipe.DEFAULT_QUESTION and "Kasper Schmeichel" in first["titles"]
    assert [n.node.node_id for n in response.source_nodes] == response.metadata["retrievals"][-1]["held_ids"]
    assert "source nodes:" in echo.text and first["passage_ids"][0] in echo.text


def test_router_recipe(tiny_lm: ActiveLM, monkeypatch: pytest.MonkeyPatch) -> None:
    recipe = load_recipe("llamaindex_router")
    verdicts = iter(["[Yes].", "[No]."])
    monkeypatch.setattr(tiny_lm, "complete", lambda prompt, **kw: next(verdicts))
    echo = Echo()
    yes, no = recipe.main(lm=tiny_lm, preset="sr-rag", today="2024-05-01", max_new_tokens=10, echo=echo)
    assert yes.metadata["selector_result"].ind == 0 and yes.metadata["method"] == "sr-rag" and yes.source_nodes
    assert no.metadata["selector_result"].ind == 1 and no.metadata["method"] == "wo-rag" and not no.source_nodes
    assert "route: active retrieval" in echo.text and "route: no retrieval" in echo.text


def _saying(tokenizer: Any, word: str) -> ActiveLM:
    """A tiny random Llama whose greedy output is ``" word word word ..."`` whatever it is asked: the logits read
    two residual dimensions that only the current token's embedding writes (every layer's output projections
    leave them alone): after a space token the next is ``word``, after any other token a space."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    (space,) = tokenizer.encode(" ", add_special_tokens=False)
    (target,) = tokenizer.encode(word, add_special_tokens=False)
    torch.manual_seed(3)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         eos_token_id=None, bos_token_id=None, pad_token_id=None)
    model = LlamaForCausalLM(config).eval()
    after_space, after_other = 0, 1
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[[after_space, after_other]] = 0
            layer.mlp.down_proj.weight[[after_space, after_other]] = 0
        emb = model.model.embed_tokens.weight
        emb[:, [after_space, after_other]] = 0
        emb[space, after_space] = 10.0
        emb[torch.arange(len(tokenizer)) != space, after_other] = 10.0
        model.model.norm.weight.zero_()
        model.model.norm.weight[[after_space, after_other]] = 1.0
        model.lm_head.weight.zero_()
        model.lm_head.weight[target, after_space] = 1.0
        model.lm_head.weight[space, after_other] = 1.0
    return ActiveLM(model, tokenizer, name=f"says-{word}")


def _authors_parse(raw: str) -> bool:
    """RetrievalQA's reading (utils.postprocess_output + check_string_exist), written out here: drop newlines,
    commas, periods and double quotes, split on spaces; retrieve iff a lowercased word is a yes."""
    cleaned = raw.replace("\n", " ").replace(",", "").replace(".", "").replace('"', "")
    return any(w.lower().strip() in {"yes", "[yes]", "'yes'", "['yes']", '["yes"]', '"yes"'} for w in cleaned.split(" "))


@pytest.mark.parametrize(("word", "choice", "method"), [("yes", 0, "sr-rag"), ("no", 1, "wo-rag")])
def test_router_recipe_with_the_models_own_verdict(tiny_tokenizer: Any, word: str, choice: int, method: str) -> None:
    """No scripted ``complete``: the model itself answers the TA-ARE prompt (a model built to say only ``word``),
    and the selector must pick the choice that the authors' parse of that raw output names."""
    lm = _saying(tiny_tokenizer, word)
    assert lm.complete("Anything at all?", max_new_tokens=6) == f" {word}" * 3
    recipe = load_recipe("llamaindex_router")
    [response] = recipe.main(["Who is Kasper Schmeichel?"], lm=lm, preset="sr-rag", today="2024-05-01",
                             max_new_tokens=6, echo=Echo())
    selection = response.metadata["selector_result"]
    raw = selection.reason  # the router's raw generation
    assert raw.split() == [word] * 4  # the router's 8 new tokens
    assert selection.ind == (0 if _authors_parse(raw) else 1) == choice
    assert response.metadata["method"] == method
    assert bool(response.source_nodes) is (choice == 0)


def test_workflow_recipe(tiny_lm: ActiveLM, monkeypatch: pytest.MonkeyPatch) -> None:
    recipe = load_recipe("llamaindex_workflow")
    monkeypatch.setattr(tiny_lm, "complete", lambda prompt, **kw: "[Yes]")  # the router's verdict (random model otherwise)
    echo = Echo()
    response, events = recipe.main(lm=tiny_lm, preset="fl-rag", max_new_tokens=20, echo=echo)
    assert isinstance(response, Response)
    assert isinstance(events[0], RouteEvent) and events[0].router == "ta-are"
    assert isinstance(events[-1], StopEvent)
    assert sum(isinstance(e, TokenEvent) for e in events) == 20
    fired = [e for e in events if isinstance(e, RetrievalDecisionEvent) and e.fired]
    assert len(fired) == len(response.metadata["retrievals"]) == sum(isinstance(e, RetrievedEvent) for e in events)
    assert "[route] ta-are" in echo.text and "[decision] retrieve at token 0" in echo.text
