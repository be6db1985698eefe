"""A method is a composition of components: ``ActiveRAG`` takes a trigger, a query formulator, a context policy, a
prompt, an :class:`AnswerStage`, a router, two numbers and :class:`RunSettings`; a preset is data naming them."""

from __future__ import annotations

import dataclasses
import inspect
import json
import warnings
from pathlib import Path

import pytest

from active_rag import ActiveRAG, AnswerCheck, AnswerStage, InvalidOptionError, RunSettings
from active_rag.components.presets import PRESETS, Preset, preset_kwargs
from active_rag.components.settings import FLAT_NAMES, engine_kwargs
from tests.unit_tests.test_answer_check import _reader
from tests.unit_tests.test_linked import QUESTION, Wiki

#: ``describe()`` of every preset's engine, and of each with a profile and flat overrides, as the flat keywords built
#: them (commit 5c13b10): the evaluation rows' keys hash these, so the components must build the very same engines
BEFORE = json.loads(Path(__file__).with_name("preset_engines.json").read_text())


def test_the_engine_takes_at_most_twelve_parameters() -> None:
    params = [p for p in inspect.signature(ActiveRAG.__init__).parameters if p != "self"]
    assert len(params) <= 12, params
    assert {"trigger", "query", "context", "prompt", "answer", "router", "settings"} <= set(params)


#: presets added after the components: no engine of theirs was built before them
AFTER_THE_COMPONENTS = {"look-again-choose"}
#: presets that settle comparisons of dates since (``AnswerStage(dates=True)``): without it they are the engines they
#: were, so that their rows resume settled (active_rag.evaluation.settled)
SETTLE_DATES = {"sr-rag-choose", "look-again-choose"}
#: ... and that ask a "both" question's names one by one (``AnswerStage(each_name=True)``) and a "same" question's
#: values (``same=True``), likewise
ASK_EACH_NAME = SETTLE_DATES
#: ... and that settle comparisons of versions (``AnswerStage(versions=True)``), likewise, and answer a question that
#: asks for a version with the version (``version_asked``)
SETTLE_VERSIONS = SETTLE_DATES


def test_every_preset_but_the_later_ones_was_recorded_before_the_components() -> None:
    assert set(PRESETS) - AFTER_THE_COMPONENTS == {name for name in BEFORE if "@" not in name}


@pytest.mark.parametrize("name", sorted(set(PRESETS) - AFTER_THE_COMPONENTS))
def test_each_preset_builds_the_engine_it_built_before_the_components(name: str) -> None:
    lm, _ = _reader()
    described = ActiveRAG.from_preset(name, lm, Wiki()).describe()
    assert described.pop("settle_dates", False) == (name in SETTLE_DATES)
    assert described.pop("ask_each_name", False) == (name in ASK_EACH_NAME)
    assert described.pop("ask_same", False) == (name in ASK_EACH_NAME)
    assert described.pop("settle_versions", False) == ("passages" if name in SETTLE_VERSIONS else False)
    assert described.pop("version_asked", False) == (name in SETTLE_VERSIONS)
    assert described == BEFORE[name]
    if name + "@profile" in BEFORE:
        profile = "2wikimultihopqa"
        rag = ActiveRAG.from_preset(name, lm, Wiki(), profile=profile, answer_options=True, max_retrievals=2,
                                    initial_retrieval=True)
        described = rag.describe()
        assert described.pop("settle_dates", False) == (name in SETTLE_DATES)
        assert described.pop("ask_each_name", False) == (name in ASK_EACH_NAME)
        assert described.pop("ask_same", False) == (name in ASK_EACH_NAME)
        assert described.pop("settle_versions", False) == ("passages" if name in SETTLE_VERSIONS else False)
        assert described.pop("version_asked", False) == (name in SETTLE_VERSIONS)
        assert described == BEFORE[name + "@profile"]


def test_a_preset_is_data_that_names_its_components() -> None:
    for preset in PRESETS.values():
        assert isinstance(preset, Preset) and isinstance(preset.answer, AnswerStage)
        assert isinstance(preset.settings, RunSettings) and isinstance(preset.trigger, str)
    assert PRESETS["sr-rag-choose"].answer == AnswerStage(options=True, links="choose", dates=True, versions=True,
                                                          each_name=True, same=True)
    assert {name for name, p in PRESETS.items() if p.answer.same} == ASK_EACH_NAME
    assert {name for name, p in PRESETS.items() if p.answer.versions} == SETTLE_VERSIONS
    assert {name for name, p in PRESETS.items() if p.answer.dates} == SETTLE_DATES
    assert {name for name, p in PRESETS.items() if p.answer.each_name} == ASK_EACH_NAME
    assert PRESETS["flare"].settings.initial_retrieval and not PRESETS["dragin"].settings.initial_retrieval
    check = PRESETS["look-again-grounded"].answer.check
    assert isinstance(check, AnswerCheck) and check.select == "grounded"
    # each build gets its own check object: an engine never shares a mutable component with another
    one, two = preset_kwargs("look-again-grounded"), preset_kwargs("look-again-grounded")
    assert one["answer"].check == two["answer"].check and one["answer"].check is not two["answer"].check


def test_a_flat_override_sets_one_field_and_keeps_the_others() -> None:
    lm, _ = _reader()
    rag = ActiveRAG.from_preset("sr-rag-choose", lm, Wiki(), answer_options=False, max_retrievals=1)
    assert rag.answer == AnswerStage(options=False, links="choose", dates=True, versions=True, each_name=True, same=True)
    assert rag.follow_links == "choose"
    assert not rag.answer_options and rag.max_retrievals == 1 and rag.method == "sr-rag-choose"
    # a component replaces the preset's whole stage
    rag = ActiveRAG.from_preset("sr-rag-choose", lm, Wiki(), answer=AnswerStage(options=True))
    assert rag.follow_links is False and rag.answer_options
    # flat names over a given component change that component's field
    kwargs = engine_kwargs({"answer": AnswerStage(links=True), "answer_options": True, "method": "x", "top_k": 2})
    assert kwargs == {"answer": AnswerStage(options=True, links=True), "settings": RunSettings(method="x"), "top_k": 2}


def test_every_flat_name_is_a_field_of_its_component() -> None:
    for name, (component, field) in FLAT_NAMES.items():
        cls = {"answer": AnswerStage, "settings": RunSettings}[component]
        assert field in {f.name for f in dataclasses.fields(cls)}, name
    assert {f.name for f in dataclasses.fields(RunSettings)} <= set(FLAT_NAMES)


def test_the_engine_takes_components_and_from_preset_takes_the_flat_names() -> None:
    """``ActiveRAG(...)`` takes components only (the flat keywords of 0.1.0's first drafts are gone); the flat names
    stay what :meth:`ActiveRAG.from_preset` and the adapters' options take, over a preset's components."""
    lm, _ = _reader()
    with pytest.raises(TypeError, match="unexpected keyword argument 'answer_options'"):
        ActiveRAG(lm, Wiki(), trigger="once", query="input", answer_options=True)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'tok_k'"):
        ActiveRAG(lm, Wiki(), tok_k=3)  # type: ignore[call-arg]
    new = ActiveRAG(lm, Wiki(), trigger="once", query="input", context="accumulate",
                    answer=AnswerStage(options=True, links="choose"), settings=RunSettings(method="sr-rag-choose"))
    assert new.describe() == BEFORE["sr-rag-choose"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ActiveRAG.from_preset("sr-rag-choose", lm, Wiki(), answer_options=False)  # the preset's overrides: no warning


def test_the_answer_stage_checks_what_cannot_run() -> None:
    lm, _ = _reader()
    with pytest.raises(InvalidOptionError, match="reanswer and an answer check"):
        ActiveRAG(lm, Wiki(), trigger="once", answer=AnswerStage(check=True, reanswer=True))
    with pytest.raises(InvalidOptionError, match=r"RunSettings\(initial_retrieval=True\)"):
        ActiveRAG(lm, Wiki(), trigger="rind", context="accumulate", answer=AnswerStage(links=True))
    rag = ActiveRAG(lm, Wiki(), trigger="once", answer=AnswerStage(check=0.5))
    assert rag.answer_check == AnswerCheck(theta=0.5) and rag.answer_phrase == "So the answer is"
    with pytest.raises(TypeError, match="settings must be a RunSettings"):
        engine_kwargs({"settings": {"method": "x"}, "method": "y"})
    with pytest.raises(TypeError, match="answer must be AnswerStage; got bool"):
        ActiveRAG(lm, Wiki(), trigger="once", answer=True)  # type: ignore[arg-type]
