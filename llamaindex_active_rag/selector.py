"""``TaAreSelector``: the TA-ARE (or vanilla) retrieve-or-not decision as a LlamaIndex selector."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.base.base_selector import BaseSelector, SelectorResult, SingleSelection
from llama_index.core.schema import QueryBundle
from llama_index.core.tools.types import ToolMetadata

from active_rag._aio import run_in_thread
from active_rag.errors import EmptyQuestionError
from active_rag.engine import Router
from active_rag.decoding.model import ActiveLM
from active_rag.components.routing import make_router

from .events import ActiveRouteEvent, dispatch

__all__ = ["TaAreSelector"]


class TaAreSelector(BaseSelector):
    """Pick the retrieval or the no-retrieval choice with an ``active_rag.components.routing`` router.

    Meant for ``RouterQueryEngine`` with two query engine tools, one that retrieves (e.g. an
    ``ActiveRAGQueryEngine`` with ``preset="dragin"``) and one that does not (``preset="wo-rag"``)::

        RouterQueryEngine(
            selector=TaAreSelector(lm),                        # choice 0 retrieves, choice 1 does not
            query_engine_tools=[retrieval_tool, no_retrieval_tool],
            llm=ActiveHFLLM(lm),                               # never rely on Settings.llm
        )

    Convention: ``retrieve_index`` (default 0, the first choice) is the choice that retrieves;
    ``no_retrieve_index`` is the one that does not (default: the other choice, which requires exactly
    two choices). A [Yes] from the router selects ``retrieve_index``, a [No] ``no_retrieve_index``;
    an output with neither is read as the router reads it (``active_rag.components.routing``). The selection's
    ``reason`` is the model's raw output; an :class:`ActiveRouteEvent` is dispatched per decision.

    Args:
        lm: the local model that answers the routing prompt (ignored when ``router`` is an object).
        router: ``"ta-are"`` (default), ``"vanilla"``, or a router object with ``decide(question)``.
        **router_kwargs: passed to the router (``today=``, ``pool=``, ``embed=``, ``max_new_tokens=``...).
    """

    def __init__(
        self,
        lm: ActiveLM | None = None,
        *,
        router: str | Router = "ta-are",
        retrieve_index: int = 0,
        no_retrieve_index: int | None = None,
        **router_kwargs: Any,
    ) -> None:
        if isinstance(router, str):
            if lm is None:
                raise ValueError(f"TaAreSelector(router={router!r}) needs the model: pass TaAreSelector(lm, ...).")
            built = make_router(router, lm, **router_kwargs)
            if built is None:
                raise ValueError("TaAreSelector needs a router: 'ta-are', 'vanilla' or an object with decide(question).")
            router = built
        self.router: Router = router
        self.retrieve_index = retrieve_index
        self.no_retrieve_index = no_retrieve_index

    # -- PromptMixin: the routing prompts are the authors' fixed templates -------------------------
    def _get_prompts(self) -> dict[str, Any]:
        return {}

    def _update_prompts(self, prompts: Any) -> None:
        pass

    # -- BaseSelector -----------------------------------------------------------------------------
    def _indices(self, n: int) -> tuple[int, int]:
        no = self.no_retrieve_index
        if no is None:
            if n != 2:
                raise ValueError(
                    f"TaAreSelector chooses between a retrieval and a no-retrieval choice, got {n} choices: pass "
                    "exactly two, or say which is which with retrieve_index= and no_retrieve_index=."
                )
            no = 1 - self.retrieve_index
        for name, i in (("retrieve_index", self.retrieve_index), ("no_retrieve_index", no)):
            if not 0 <= i < n:
                raise ValueError(f"TaAreSelector {name}={i} is out of range for {n} choices.")
        if no == self.retrieve_index:
            raise ValueError("TaAreSelector retrieve_index and no_retrieve_index must differ.")
        return self.retrieve_index, no

    def _select(self, choices: Sequence[ToolMetadata], query: QueryBundle) -> SelectorResult:
        yes, no = self._indices(len(choices))
        question = query.query_str
        if not isinstance(question, str) or not question.strip():
            raise EmptyQuestionError()
        decision = self.router.decide(question.strip())
        dispatch(ActiveRouteEvent.from_decision(decision, question=question))
        index = yes if decision.retrieve else no
        return SelectorResult(selections=[SingleSelection(index=index, reason=decision.raw_output)])

    async def _aselect(self, choices: Sequence[ToolMetadata], query: QueryBundle) -> SelectorResult:
        return await run_in_thread(self._select, choices, query)
