"""LlamaIndex instrumentation events for active retrieval.

Dispatched through ``llama_index.core.instrumentation.get_dispatcher(__name__)``, so they reach every
event handler added to the root dispatcher (``get_dispatcher().add_event_handler(handler)``):

- :class:`ActiveRetrievalEvent`: one per trigger decision. ``fired=True`` for a retrieval (with its
  query and the retrieved node ids; the initial retrieval of FLARE/SR-RAG counts); ``fired=False``
  when the trigger checked a segment and let it through.
- :class:`ActiveRouteEvent`: one per router verdict (TA-ARE or vanilla), from the query engine with a
  router, the workflow's route step, or :class:`~llamaindex_active_rag.TaAreSelector`.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.events import BaseEvent
from pydantic import BaseModel

from active_rag.types import Retrieval, RouteDecision, TriggerDecision

__all__ = ["ActiveRetrievalEvent", "ActiveRouteEvent", "DecisionFields", "dispatcher"]

dispatcher = get_dispatcher(__name__)


class DecisionFields(BaseModel):
    """The fields of one trigger decision ("retrieve now?"), shared by the instrumentation event
    (:class:`ActiveRetrievalEvent`) and the workflow's stream event
    (:class:`~llamaindex_active_rag.workflow.RetrievalDecisionEvent`).

    ``position`` counts the output tokens before the decision point (the engine's ``Retrieval.position`` when
    fired; the start of the checked segment otherwise). ``query`` and ``node_ids`` are set only when the trigger
    fired (:func:`retrieval_fields`, :func:`decision_fields`).
    """

    fired: bool
    trigger: str
    position: int
    token: str | None = None
    score: float | None = None
    threshold: float | None = None
    reason: str = ""
    query: str | None = None
    node_ids: list[str] = []


class ActiveRetrievalEvent(DecisionFields, BaseEvent):
    """A trigger decision of the active retrieval loop (:class:`DecisionFields`), for the question and method."""

    question: str
    method: str

    @classmethod
    def class_name(cls) -> str:
        return "ActiveRetrievalEvent"


def retrieval_fields(retrieval: Retrieval) -> dict[str, Any]:
    """The decision fields of a retrieval the engine performed (a fired decision)."""
    return {
        "fired": True,
        "trigger": retrieval.trigger,
        "position": retrieval.position,
        "token": retrieval.token,
        "score": retrieval.score,
        "threshold": retrieval.threshold,
        "reason": retrieval.reason,
        "query": retrieval.query,
        "node_ids": retrieval.passage_ids,
    }


def decision_fields(decision: TriggerDecision, position: int) -> dict[str, Any]:
    """The decision fields of a trigger decision (no query or nodes: those come with a retrieval)."""
    return {
        "fired": decision.fire,
        "trigger": decision.trigger,
        "position": position,
        "token": decision.token,
        "score": decision.score,
        "threshold": decision.threshold,
        "reason": decision.reason,
    }


class ActiveRouteEvent(BaseEvent):
    """A router's verdict before generation: retrieve or not, with the model's raw output."""

    question: str
    retrieve: bool
    router: str
    raw_output: str

    @classmethod
    def class_name(cls) -> str:
        return "ActiveRouteEvent"

    @classmethod
    def from_decision(cls, decision: RouteDecision, *, question: str) -> ActiveRouteEvent:
        return cls(question=question, retrieve=decision.retrieve, router=decision.router, raw_output=decision.raw_output)


def dispatch(event: Any) -> None:
    """Send ``event`` to the instrumentation handlers (a handler error never breaks generation)."""
    dispatcher.event(event)
