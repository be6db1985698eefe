"""The LangChain runnable holds one configured engine and swaps only the retriever per call, as the LlamaIndex query
engine does: built at the first call, shared by the calls with the same settings, built again when they change."""

from __future__ import annotations

from typing import Any

import pytest

import active_rag
from active_rag.per_call import PER_CALL_RETRIEVER
from langchain_active_rag import ActiveRAG

QUESTION = "Who is the father of Kasper Schmeichel?"


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The presets of every engine built through ``ActiveRAG.from_preset``, in order."""
    built: list[str] = []
    original = active_rag.ActiveRAG.from_preset

    def counting(cls: type, name: str, *args: Any, **kwargs: Any) -> Any:
        built.append(name)
        return original(name, *args, **kwargs)

    monkeypatch.setattr(active_rag.ActiveRAG, "from_preset", classmethod(counting))
    return built


def test_every_call_runs_a_copy_of_one_configured_engine(tiny_lm, bm25_retriever, builds) -> None:
    rag = ActiveRAG(tiny_lm, bm25_retriever, preset="fl-rag", max_new_tokens=6, top_k=2)
    first = rag.invoke(QUESTION)
    second = rag.invoke(QUESTION)
    assert builds == ["fl-rag"] and first["answer"] == second["answer"] and first["trace"] == second["trace"]
    base = rag.configured_engine()
    one, two = rag.build_engine(), rag.build_engine()
    assert one is not base and two is not one and one.retriever is not two.retriever  # a retriever adapter per call
    assert one.trigger is two.trigger is base.trigger and one.prompt is base.prompt and one.model is tiny_lm
    assert base.retriever is PER_CALL_RETRIEVER  # the configured engine holds no call's retriever
    assert builds == ["fl-rag"]
    direct = active_rag.ActiveRAG.from_preset("fl-rag", tiny_lm, one.retriever, max_new_tokens=6, top_k=2).run(QUESTION)
    assert first["answer"] == direct.answer


def test_the_engine_is_built_again_when_its_settings_change(tiny_lm, bm25_retriever, builds) -> None:
    rag = ActiveRAG(tiny_lm, bm25_retriever, preset="sr-rag", max_new_tokens=4, top_k=2)
    base = rag.configured_engine()
    assert rag.configured_engine(top_k=1) is not base and rag.configured_engine(top_k=1).top_k == 1  # a per-call override
    switched = rag.configured_engine({"configurable": {"preset": "fl-rag"}})  # with_config
    assert switched.method == "fl-rag" and rag.configured_engine({"configurable": {"preset": "fl-rag"}}) is switched
    assert builds == ["sr-rag", "sr-rag", "fl-rag"]
    assert rag.with_config(configurable={"preset": "fl-rag"}).invoke(QUESTION)["trace"][0]["trigger"]
    assert rag.invoke(QUESTION, top_k=1) and builds == ["sr-rag", "sr-rag", "fl-rag"]  # each built once
    rag.max_new_tokens = 5  # a field set anew
    assert rag.configured_engine().max_new_tokens == 5 and rag.configured_engine() is not base
    rag.engine_options["answer_options"] = True  # changed in place
    assert rag.configured_engine().answer_options is True
    assert len(builds) == 5


def test_a_method_that_retrieves_without_a_retriever_fails_at_every_call(tiny_lm) -> None:
    rag = ActiveRAG(tiny_lm, preset="fl-rag", max_new_tokens=4)
    for _ in range(2):
        with pytest.raises(ValueError, match="no retriever"):
            rag.invoke(QUESTION)
    assert ActiveRAG(tiny_lm, preset="wo-rag", max_new_tokens=4).build_engine().retriever is None
