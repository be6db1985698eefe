"""``TaAreRouter``: decide with the model whether a question needs retrieval, then run one of two runnables.

The decision is the engine's (:class:`active_rag.routing.TaAreRouter` — TA-ARE, Zhang et al. 2024 —
or :class:`~active_rag.routing.VanillaRouter` with ``mode="vanilla"``); this module only routes::

    router = TaAreRouter(llm, retrieve=active_chain, direct=plain_chain)
    router.invoke({"question": "..."})
    # -> {**retrieve_or_direct_output, "route": {"retrieve": bool, "router": "ta-are", "raw_output": "[Yes]."}}

A chosen runnable's non-dict output is wrapped as ``{"output": ..., "route": {...}}``. Streaming yields
``{"route": {...}}`` first, then the chosen runnable's chunks (non-dict chunks wrapped as
``{"output": chunk}``), the last of them with ``"route"`` added. The decision is also dispatched as the
custom event ``active_rag.route``. :meth:`TaAreRouter.as_lambda` gives the same routing in LangChain's
recommended form, a ``RunnableLambda`` whose function returns the runnable to run.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import AsyncIterator, Iterator
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda, RunnableSerializable
from langchain_core.runnables.config import run_in_executor
from pydantic import ConfigDict, InstanceOf, PrivateAttr

from active_rag import EmptyQuestionError, RouteDecision, make_router

from ._convert import question_of, resolve_lm
from .events import ROUTE_EVENT, adispatch, dispatch, route_dict


def attach_route(output: Any, route: dict[str, Any]) -> dict[str, Any]:
    """``{**output, "route": route}`` for a dict output, else ``{"output": output, "route": route}``."""
    if isinstance(output, dict):
        return {**output, "route": route}
    return {"output": output, "route": route}


def _wrap(chunk: Any) -> dict[str, Any]:
    return chunk if isinstance(chunk, dict) else {"output": chunk}


class TaAreRouter(RunnableSerializable[Any, dict[str, Any]]):
    """Route a question to ``retrieve`` or ``direct`` by asking the model (TA-ARE prompt, or vanilla).

    ``llm`` is an :class:`active_rag.ActiveLM` or a :class:`~langchain_active_rag.ChatActiveHF`; ``mode``
    is ``"ta-are"`` (default; ``today=`` sets the date in its prompt) or ``"vanilla"``;
    ``router_options`` go to the engine router (e.g. ``max_new_tokens``, ``default``, ``pool``, ``embed``).
    Both runnables receive the router's input unchanged (a string or ``{"question": ...}``).
    """

    llm: Any
    retrieve: InstanceOf[Runnable]
    direct: InstanceOf[Runnable]
    mode: str = "ta-are"
    today: _dt.date | str | None = None
    router_options: dict[str, Any] = {}

    model_config = ConfigDict(arbitrary_types_allowed=True)

    _engine_router: Any = PrivateAttr(default=None)

    def __init__(self, llm: Any = None, **kwargs: Any) -> None:
        if llm is None:
            raise TypeError("TaAreRouter needs llm: an active_rag.ActiveLM or a ChatActiveHF.")
        super().__init__(llm=llm, **kwargs)

    @classmethod
    def is_lc_serializable(cls) -> bool:
        return False

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

    def _choose(self, decision: RouteDecision) -> Runnable:
        return self.retrieve if decision.retrieve else self.direct

    def select(self, input: Any, config: RunnableConfig | None = None) -> Runnable:
        """Decide, dispatch ``active_rag.route``, and return the runnable to run (it adds ``"route"``).

        This is the function of :meth:`as_lambda`: LangChain runs the returned runnable on the same input."""
        decision = self.decide(input)
        route = route_dict(decision)
        dispatch(ROUTE_EVENT, route, config)
        return self._choose(decision) | RunnableLambda(lambda out: attach_route(out, route), name="attach_route")

    def as_lambda(self) -> RunnableLambda:
        """``RunnableLambda(self.select)``: the routing as LangChain's recommended routing function."""
        return RunnableLambda(self.select, name=self.get_name())

    # -- Runnable interface -------------------------------------------------------------------------------
    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> dict[str, Any]:
        def run(value: Any, config: RunnableConfig) -> dict[str, Any]:
            decision = self.decide(value)
            route = route_dict(decision)
            dispatch(ROUTE_EVENT, route, config)
            return attach_route(self._choose(decision).invoke(value, config, **kwargs), route)

        return self._call_with_config(run, input, config)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> dict[str, Any]:
        async def run(value: Any, config: RunnableConfig) -> dict[str, Any]:
            decision = await run_in_executor(config, self.decide, value)
            route = route_dict(decision)
            await adispatch(ROUTE_EVENT, route, config)
            return attach_route(await self._choose(decision).ainvoke(value, config, **kwargs), route)

        return await self._acall_with_config(run, input, config)

    def stream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Iterator[dict[str, Any]]:
        def transform(inputs: Iterator[Any], config: RunnableConfig) -> Iterator[dict[str, Any]]:
            value = list(inputs)[-1]
            decision = self.decide(value)
            route = route_dict(decision)
            dispatch(ROUTE_EVENT, route, config)
            yield {"route": route}
            held: Any = _NOTHING
            for chunk in self._choose(decision).stream(value, config, **kwargs):
                if held is not _NOTHING:
                    yield _wrap(held)
                held = chunk
            if held is not _NOTHING:
                yield attach_route(held, route)

        yield from self._transform_stream_with_config(iter([input]), transform, config)

    async def astream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[dict[str, Any]]:
        async def transform(inputs: AsyncIterator[Any], config: RunnableConfig) -> AsyncIterator[dict[str, Any]]:
            values = [v async for v in inputs]
            value = values[-1]
            decision = await run_in_executor(config, self.decide, value)
            route = route_dict(decision)
            await adispatch(ROUTE_EVENT, route, config)
            yield {"route": route}
            held: Any = _NOTHING
            async for chunk in self._choose(decision).astream(value, config, **kwargs):
                if held is not _NOTHING:
                    yield _wrap(held)
                held = chunk
            if held is not _NOTHING:
                yield attach_route(held, route)

        async def one() -> AsyncIterator[Any]:
            yield input

        async for chunk in self._atransform_stream_with_config(one(), transform, config):
            yield chunk


_NOTHING = object()

__all__ = ["TaAreRouter", "attach_route"]
