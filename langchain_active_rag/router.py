"""``TaAreRouter``: decide with the model whether a question needs retrieval, then run one of two runnables.

The decision is the engine's (:class:`active_rag.components.routing.TaAreRouter` — TA-ARE, Zhang et al. 2024 —
or :class:`~active_rag.components.routing.VanillaRouter` with ``mode="vanilla"``); this module only routes, with
LangChain's own routing runnable: ``TaAreRouter`` *is* a :class:`~langchain_core.runnables.RunnableLambda`
whose function decides and returns the runnable to run, so invoke / batch / stream / async / events all
come from langchain-core (the decision runs in a worker thread on the async paths)::

    router = TaAreRouter(llm, retrieve=active_chain, direct=plain_chain)
    router.invoke({"question": "..."})
    # -> {**retrieve_or_direct_output, "route": {"retrieve": bool, "router": "ta-are", "raw_output": "[Yes]."}}

A chosen runnable's non-dict output is wrapped as ``{"output": ..., "route": {...}}``. Streaming yields
the :class:`~langchain_core.runnables.AddableDict` ``{"route": {...}}`` first, then the chosen runnable's
chunks (non-dict chunks wrapped as ``{"output": chunk}``), so the chunks add up to the output. The
decision is dispatched as the custom event ``active_rag.route`` and reported as a child chat-model run
(the router prompt in, the raw output out; :mod:`langchain_active_rag.tracing`).
"""

from __future__ import annotations

import datetime as _dt
import functools
from collections.abc import AsyncIterator, Iterator
from typing import Any

from langchain_core.runnables import AddableDict, Runnable, RunnableConfig, RunnableGenerator, RunnableLambda
from langchain_core.runnables.base import coerce_to_runnable

from active_rag import EmptyQuestionError, RouteDecision, make_router

from ._convert import question_of, resolve_lm
from .events import ROUTE_EVENT, dispatch, route_dict
from .tracing import GenerationTracer


def attach_route(output: Any, route: dict[str, Any]) -> dict[str, Any]:
    """``{**output, "route": route}`` for a dict output, else ``{"output": output, "route": route}``."""
    if isinstance(output, dict):
        return {**output, "route": route}
    return {"output": output, "route": route}


def _wrap(chunk: Any) -> AddableDict:
    return AddableDict(chunk) if isinstance(chunk, dict) else AddableDict(output=chunk)


def _with_route(route: dict[str, Any], chunks: Iterator[Any]) -> Iterator[AddableDict]:
    yield AddableDict(route=route)
    for chunk in chunks:
        yield _wrap(chunk)


async def _awith_route(route: dict[str, Any], chunks: AsyncIterator[Any]) -> AsyncIterator[AddableDict]:
    yield AddableDict(route=route)
    async for chunk in chunks:
        yield _wrap(chunk)


class TaAreRouter(RunnableLambda):
    """Route a question to ``retrieve`` or ``direct`` by asking the model (TA-ARE prompt, or vanilla).

    ``llm`` is an :class:`active_rag.ActiveLM` or a :class:`~langchain_active_rag.ChatActiveHF`; ``mode``
    is ``"ta-are"`` (default; ``today=`` sets the date in its prompt) or ``"vanilla"``;
    ``router_options`` go to the engine router (e.g. ``max_new_tokens``, ``default``, ``pool``, ``embed``).
    Both runnables receive the router's input unchanged (a string or ``{"question": ...}``).
    """

    def __init__(
        self,
        llm: Any = None,
        *,
        retrieve: Any,
        direct: Any,
        mode: str = "ta-are",
        today: _dt.date | str | None = None,
        router_options: dict[str, Any] | None = None,
        name: str | None = None,
    ) -> None:
        if llm is None:
            raise TypeError("TaAreRouter needs llm: an active_rag.ActiveLM or a ChatActiveHF.")
        self.llm = llm
        self.retrieve: Runnable = coerce_to_runnable(retrieve)
        self.direct: Runnable = coerce_to_runnable(direct)
        self.mode = mode
        self.today = today
        self.router_options = dict(router_options or {})
        self._engine_router: Any = None
        super().__init__(self.select, name=name or "TaAreRouter")

    # -- decision ---------------------------------------------------------------------------------------
    @property
    def engine_router(self) -> Any:
        """The engine router (built once; raises ``UnknownNameError`` for an unknown mode)."""
        if self._engine_router is None:
            options = dict(self.router_options)
            if self.mode == "ta-are" and self.today is not None:
                options.setdefault("today", self.today)
            router = make_router(self.mode, resolve_lm(self.llm), **options)
            if router is None:
                raise ValueError(f"TaAreRouter needs a router mode: 'ta-are' or 'vanilla', got {self.mode!r}.")
            self._engine_router = router
        return self._engine_router

    def decide(self, input: Any) -> RouteDecision:
        """The engine router's :class:`~active_rag.RouteDecision` for the input's question."""
        question = question_of(input)
        if not isinstance(question, str) or not question.strip():
            raise EmptyQuestionError()
        return self.engine_router.decide(question.strip())

    def select(self, input: Any, config: RunnableConfig) -> Runnable:
        """Decide (traced as a chat-model run, dispatched as ``active_rag.route``) and return the runnable
        that LangChain then runs on the same input: the chosen one, followed by a step adding ``"route"``."""
        decision = self.decide(input)
        route = route_dict(decision)
        GenerationTracer(config, resolve_lm(self.llm)).route(decision)
        dispatch(ROUTE_EVENT, route, config)
        chosen = self.retrieve if decision.retrieve else self.direct
        attach = RunnableGenerator(
            functools.partial(_with_route, route), functools.partial(_awith_route, route), name="attach_route"
        )
        return chosen | attach

    def as_lambda(self) -> RunnableLambda:
        """This router: it already is LangChain's routing ``RunnableLambda`` (kept for compatibility)."""
        return self

    def __repr__(self) -> str:
        return f"TaAreRouter(mode={self.mode!r}, retrieve={self.retrieve.get_name()}, direct={self.direct.get_name()})"


__all__ = ["TaAreRouter", "attach_route"]
