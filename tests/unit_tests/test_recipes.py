"""docs/recipes.md: every configuration that left the presets is an ``ActiveRAG(...)`` call that still builds and
runs, and none of them is a preset any more."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import active_rag
from active_rag import ActiveRAG
from active_rag.components.presets import PRESETS
from tests.unit_tests.test_answer_check import _reader
from tests.unit_tests.test_linked import QUESTION, Wiki

PAGE = Path(__file__).resolve().parents[2] / "docs" / "recipes.md"
SECTIONS = re.findall(r"^## ([a-z-]+)\n(.*?)(?=^## |\Z)", PAGE.read_text(), flags=re.M | re.S)
RECIPES = {name: re.findall(r"```python\n(.*?)```", body, flags=re.S) for name, body in SECTIONS}


def test_the_page_has_the_eight_recipes_and_none_is_a_preset() -> None:
    assert sorted(RECIPES) == sorted([
        "dragin-accumulate", "flare-accumulate", "follow-bridge", "follow-bridge-reanswer", "look-again",
        "look-again-next-hop", "look-again-linked", "look-again-linked-second"])
    assert all(len(blocks) == 1 for blocks in RECIPES.values())
    assert not set(RECIPES) & set(PRESETS) and len(PRESETS) <= 13


#: ``describe()`` of each recipe's engine as its preset built it, before it left the presets (commit da49303)
BEFORE = json.loads((Path(__file__).with_name("recipe_engines.json")).read_text())


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_each_recipe_builds_the_engine_its_preset_built_and_answers(name: str) -> None:
    lm, _ = _reader()
    scope = {n: getattr(active_rag, n) for n in ("ActiveRAG", "AnswerCheck", "AnswerStage", "RunSettings", "make_trigger")}
    scope.update(lm=lm, retriever=Wiki())
    exec(RECIPES[name][0], scope)  # noqa: S102 - the documentation's own code
    rag = scope["rag"]
    assert isinstance(rag, ActiveRAG) and rag.method == name
    assert rag.describe() == BEFORE[name]
    result = rag.run(QUESTION)
    assert result.answer.endswith(".") and result.retrievals


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_the_tests_recipes_are_the_documented_ones(name: str) -> None:
    from tests.recipes import recipe

    lm, _ = _reader()
    assert ActiveRAG(lm, Wiki(), **recipe(name)).describe() == BEFORE[name]
