"""TaAreSelector alone and inside RouterQueryEngine; the model's answer is scripted by monkeypatching
``lm.complete`` (what the engine's routers call) to return "[Yes]" or "[No]"."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from llama_index.core.query_engine import RouterQueryEngine
from llama_index.core.schema import QueryBundle
from llama_index.core.tools import QueryEngineTool, ToolMetadata

from active_rag import ActiveLM
from active_rag.errors import EmptyQuestionError, UnknownNameError
from active_rag.components.routing import VanillaRouter
from llamaindex_active_rag import ActiveHFLLM, ActiveRAGQueryEngine, ActiveRouteEvent, TaAreSelector

QUESTION = "Who won the most recent Ballon d'Or?"
CHOICES = [ToolMetadata(name="retrieve", description="active retrieval"), ToolMetadata(name="direct", description="no retrieval")]


class Script:
    """Stands in for ``ActiveLM.complete``: returns the scripted output, records the prompts."""

    def __init__(self, output: str) -> None:
        self.output = output
        self.prompts: list[str] = []

    def __call__(self, prompt: str, **kwargs: Any) -> str:
        self.prompts.append(prompt)
        return self.output


@pytest.mark.parametrize(("output", "index"), [("[Yes].", 0), ("[No].", 1), (" [no] because it is static", 1), ("I am not sure", None)])
def test_selects_retrieval_on_yes(tiny_lm: ActiveLM, monkeypatch: pytest.MonkeyPatch, output: str, index: int | None) -> None:
    script = Script(output)
    monkeypatch.setattr(tiny_lm, "complete", script)
    selector = TaAreSelector(tiny_lm, today="2024-05-01")
    result = selector.select(CHOICES, QUESTION)
    if index is None:  # no verdict: the router's own reading of such an output (active_rag.components.routing) decides
        index = 0 if selector.router.decide(QUESTION).retrieve else 1
    assert result.ind == index
    assert result.reason == output  # the raw model output
    # the authors' TA-ARE prompt: today's date and the question
    assert "2024-05-01" in script.prompts[0] and QUESTION in script.prompts[0]


def test_retrieve_index_convention(tiny_lm: ActiveLM, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tiny_lm, "complete", Script("[Yes]"))
    assert TaAreSelector(tiny_lm, retrieve_index=1).select(CHOICES, QUESTION).ind == 1
    three = [*CHOICES, ToolMetadata(name="other", description="other")]
    assert TaAreSelector(tiny_lm, retrieve_index=2, no_retrieve_index=0).select(three, QUESTION).ind == 2
    monkeypatch.setattr(tiny_lm, "complete", Script("[No]"))
    assert TaAreSelector(tiny_lm, retrieve_index=2, no_retrieve_index=0).select(three, QUESTION).ind == 0


def test_vanilla_router_and_router_objects(tiny_lm: ActiveLM, monkeypatch: pytest.MonkeyPatch) -> None:
    script = Script("[No]")
    monkeypatch.setattr(tiny_lm, "complete", script)
    assert TaAreSelector(tiny_lm, router="vanilla").select(CHOICES, QUESTION).ind == 1
    assert "Today is" not in script.prompts[0]  # vanilla: no date, no demonstrations
    assert TaAreSelector(router=VanillaRouter(tiny_lm)).select(CHOICES, QUESTION).ind == 1


def test_aselect_and_event(tiny_lm: ActiveLM, monkeypatch: pytest.MonkeyPatch) -> None:
    from llama_index.core.instrumentation import get_dispatcher
    from llama_index.core.instrumentation.event_handlers import BaseEventHandler

    class Collect(BaseEventHandler):
        events: list[Any] = []

        def handle(self, event: Any, **kwargs: Any) -> None:
            self.events.append(event)

    handler = Collect(events=[])
    get_dispatcher().add_event_handler(handler)
    try:
        monkeypatch.setattr(tiny_lm, "complete", Script("[Yes]"))
        result = asyncio.run(TaAreSelector(tiny_lm).aselect(CHOICES, QueryBundle(QUESTION)))
    finally:
        get_dispatcher().event_handlers.remove(handler)
    assert result.ind == 0
    [event] = [e for e in handler.events if isinstance(e, ActiveRouteEvent)]
    assert (event.question, event.retrieve, event.router, event.raw_output) == (QUESTION, True, "ta-are", "[Yes]")


def test_bad_input(tiny_lm: ActiveLM, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tiny_lm, "complete", Script("[Yes]"))
    selector = TaAreSelector(tiny_lm)
    with pytest.raises(EmptyQuestionError):
        selector.select(CHOICES, "  ")
    with pytest.raises(ValueError, match="exactly two"):
        selector.select([*CHOICES, ToolMetadata(name="x", description="x")], QUESTION)
    with pytest.raises(ValueError, match="out of range"):
        TaAreSelector(tiny_lm, retrieve_index=2).select(CHOICES, QUESTION)
    with pytest.raises(UnknownNameError, match="router"):
        TaAreSelector(tiny_lm, router="oracle")
    with pytest.raises(ValueError, match="needs the model"):
        TaAreSelector(router="ta-are")


def test_router_query_engine(tiny_lm: ActiveLM, fake_retriever: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    active = ActiveRAGQueryEngine(tiny_lm, fake_retriever, preset="sr-rag", top_k=2, max_new_tokens=8)
    direct = ActiveRAGQueryEngine(tiny_lm, preset="wo-rag", max_new_tokens=8)
    router = RouterQueryEngine(
        selector=TaAreSelector(tiny_lm),
        query_engine_tools=[
            QueryEngineTool.from_defaults(active, name="active_retrieval", description="retrieves"),
            QueryEngineTool.from_defaults(direct, name="no_retrieval", description="does not retrieve"),
        ],
        llm=ActiveHFLLM(tiny_lm, max_new_tokens=8),
    )
    monkeypatch.setattr(tiny_lm, "complete", Script("[Yes]"))
    yes = router.query(QUESTION)
    assert yes.metadata["method"] == "sr-rag" and yes.metadata["selector_result"].ind == 0
    assert [n.node.node_id for n in yes.source_nodes] == ["q1-d0", "q1-d1"] and fake_retriever.queries == [QUESTION]

    monkeypatch.setattr(tiny_lm, "complete", Script("[No]"))
    no = router.query(QUESTION)
    assert no.metadata["method"] == "wo-rag" and no.metadata["selector_result"].reason == "[No]"
    assert no.source_nodes == [] and fake_retriever.queries == [QUESTION]  # no new retrieval

    ano = asyncio.run(router.aquery(QUESTION))
    assert ano.metadata["method"] == "wo-rag" and ano.response == no.response
