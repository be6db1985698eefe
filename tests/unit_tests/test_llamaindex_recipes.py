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
    assert [n.node.node_id for n in response.source_nodes][:3] == first["passage_ids"]
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


def test_router_recipe_with_the_models_own_verdict(tiny_lm: ActiveLM) -> None:
    recipe = load_recipe("llamaindex_router")
    [response] = recipe.main(["Who is Kasper Schmeichel?"], lm=tiny_lm, preset="sr-rag", max_new_tokens=6, echo=Echo())
    assert response.metadata["selector_result"].ind in (0, 1)


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
