"""TaAreRouter: engine routing (TA-ARE / vanilla) in front of two runnables."""

from __future__ import annotations

import datetime as dt
import functools
import operator
from typing import Any

import pytest
from langchain_core.output_parsers import StrOutputParser
from langchain_core.runnables import AddableDict, RunnableLambda

from active_rag import EmptyQuestionError, RouteDecision, UnknownNameError
from active_rag.components.routing import TaAreRouter as EngineTaAre
from active_rag.components.routing import VanillaRouter
from langchain_active_rag import ROUTE_EVENT, ActiveRAG, ChatActiveHF, TaAreRouter

QUESTION = "Who is the father of Kasper Schmeichel?"


class StubRouter:
    """An engine router with a fixed verdict (the tiny random model answers neither [Yes] nor [No])."""

    def __init__(self, retrieve: bool) -> None:
        self.retrieve = retrieve
        self.questions: list[str] = []

    def decide(self, question: str) -> RouteDecision:
        self.questions.append(question)
        return RouteDecision(retrieve=self.retrieve, router="stub", raw_output="[Yes]." if self.retrieve else "[No].")


def _question(value: Any) -> str:
    return value["question"] if isinstance(value, dict) else value


def _router(tiny_lm: Any, lc_retriever: Any, retrieve: bool | None, llm: Any = None, **kw: Any) -> TaAreRouter:
    rag = ActiveRAG(tiny_lm, lc_retriever, preset="sr-rag", max_new_tokens=6)
    direct = RunnableLambda(_question) | ChatActiveHF(lm=tiny_lm, max_tokens=6) | StrOutputParser()
    router = TaAreRouter(llm or tiny_lm, retrieve=rag, direct=direct, **kw)
    if retrieve is not None:
        router._engine_router = StubRouter(retrieve)
    return router


def test_real_ta_are_decision_from_the_engine(tiny_lm, lc_retriever):
    router = _router(tiny_lm, lc_retriever, None, today=dt.date(2024, 1, 2))
    assert isinstance(router.engine_router, EngineTaAre)
    assert "2024-01-02" in router.engine_router.prompt(QUESTION)
    out = router.invoke({"question": QUESTION})
    route = out["route"]
    assert set(route) == {"retrieve", "router", "raw_output"} and route["router"] == "ta-are"
    # the verdict and the raw output are exactly the engine router's
    engine = EngineTaAre(tiny_lm, today="2024-01-02").decide(QUESTION)
    assert (route["retrieve"], route["raw_output"]) == (engine.retrieve, engine.raw_output)
    assert ("answer" in out) == route["retrieve"]


def test_vanilla_mode_and_chat_model_llm(tiny_lm, lc_retriever):
    router = _router(tiny_lm, lc_retriever, None, llm=ChatActiveHF(lm=tiny_lm), mode="vanilla")
    assert isinstance(router.engine_router, VanillaRouter)
    assert router.invoke(QUESTION)["route"]["router"] == "vanilla"
    with pytest.raises(UnknownNameError, match="router"):
        _router(tiny_lm, lc_retriever, None, mode="psychic").invoke(QUESTION)


def test_routes_to_retrieve_and_merges_the_route(tiny_lm, lc_retriever):
    router = _router(tiny_lm, lc_retriever, True)
    out = router.invoke(QUESTION)
    assert set(out) == {"answer", "short_answer", "documents", "trace", "route"}
    assert out["route"] == {"retrieve": True, "router": "stub", "raw_output": "[Yes]."}
    assert lc_retriever.queries == [QUESTION]


def test_routes_to_direct_and_wraps_non_dict_outputs(tiny_lm, lc_retriever):
    router = _router(tiny_lm, lc_retriever, False)
    out = router.invoke({"question": QUESTION})
    assert set(out) == {"output", "route"} and isinstance(out["output"], str)
    assert out["route"]["retrieve"] is False
    assert lc_retriever.queries == []


@pytest.mark.parametrize("retrieve", [True, False])
def test_stream_starts_with_the_route_and_adds_up_to_the_output(tiny_lm, lc_retriever, retrieve):
    router = _router(tiny_lm, lc_retriever, retrieve)
    chunks = list(router.stream(QUESTION))
    assert chunks[0] == {"route": {"retrieve": retrieve, "router": "stub", "raw_output": "[Yes]." if retrieve else "[No]."}}
    assert all(isinstance(c, AddableDict) for c in chunks)
    total = functools.reduce(operator.add, chunks)
    lc_retriever.queries.clear()
    assert total == router.invoke(QUESTION)
    if retrieve:
        assert set(total) == {"answer", "short_answer", "documents", "trace", "route"} and len(chunks) > 3
    else:
        assert all(set(c) == {"output"} for c in chunks[1:]) and len(chunks) > 2  # the direct chain's text, streamed
        assert set(total) == {"output", "route"}


async def test_async_and_events(tiny_lm, lc_retriever):
    router = _router(tiny_lm, lc_retriever, True)
    assert (await router.ainvoke(QUESTION))["route"]["retrieve"] is True
    events = [e async for e in router.astream_events(QUESTION, version="v2")]
    root = [e for e in events if e["event"] == "on_chain_start" and e["name"] == "TaAreRouter"][0]["run_id"]
    custom = [e for e in events if e["event"] == "on_custom_event"]
    assert custom[0]["name"] == ROUTE_EVENT and custom[0]["run_id"] == root
    assert custom[0]["data"] == {"retrieve": True, "router": "stub", "raw_output": "[Yes]."}
    # the decision is a chat-model run of the router; then LangChain runs the chosen runnable (+ the route step)
    decision = [e for e in events if e["event"] == "on_chat_model_end"][0]
    assert decision["parent_ids"] == [root] and decision["data"]["output"].content == "[Yes]."
    rag_start = [e for e in events if e["event"] == "on_chain_start" and e["name"] == "ActiveRAG"][0]
    assert rag_start["parent_ids"][0] == root and len(rag_start["parent_ids"]) == 2  # root -> sequence -> ActiveRAG
    retriever_start = [e for e in events if e["event"] == "on_retriever_start"][0]
    assert retriever_start["parent_ids"] == [*rag_start["parent_ids"], rag_start["run_id"]]
    chunks = [c async for c in router.astream(QUESTION)]
    assert "route" in chunks[0] and "answer" in functools.reduce(operator.add, chunks)


def test_as_lambda_is_langchain_routing_style(tiny_lm, lc_retriever):
    router = _router(tiny_lm, lc_retriever, False)
    lam = router.as_lambda()
    assert isinstance(lam, RunnableLambda) and isinstance(router, RunnableLambda)
    out = lam.invoke(QUESTION)
    assert set(out) == {"output", "route"} and out["route"]["retrieve"] is False
    chain = RunnableLambda(lambda q: {"question": q}) | lam
    assert chain.invoke(QUESTION)["route"]["router"] == "stub"


def test_empty_question(tiny_lm, lc_retriever):
    router = _router(tiny_lm, lc_retriever, True)
    with pytest.raises(EmptyQuestionError):
        router.invoke({"question": " "})
    assert router._engine_router.questions == []
