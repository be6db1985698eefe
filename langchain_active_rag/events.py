"""Names and payloads of the custom events the LangChain components dispatch.

They show up in ``astream_events(version="v2")`` as ``on_custom_event`` with ``name`` set to one of
these, and reach every callback handler's ``on_custom_event``.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks.manager import adispatch_custom_event, dispatch_custom_event
from langchain_core.runnables import RunnableConfig

from active_rag import RouteDecision, TokenEvent

#: A retrieval the engine performed: ``Retrieval.to_dict()`` (position, token, score, threshold, query,
#: passage_ids, trigger, reason, titles).
RETRIEVAL_EVENT = "active_rag.retrieval"
#: A router's verdict: ``{"retrieve", "router", "raw_output"}``.
ROUTE_EVENT = "active_rag.route"
#: Every trigger decision, fired or not: ``TriggerDecision.to_dict()``.
DECISION_EVENT = "active_rag.decision"
#: Every accepted output token: ``{"text", "token_id", "position", "logprob", "entropy"}``.
TOKEN_EVENT = "active_rag.token"


def token_dict(event: TokenEvent) -> dict[str, Any]:
    """The payload of :data:`TOKEN_EVENT`."""
    return {
        "text": event.text,
        "token_id": event.token_id,
        "position": event.position,
        "logprob": event.logprob,
        "entropy": event.entropy,
    }


def route_dict(decision: RouteDecision) -> dict[str, Any]:
    """The public view of a :class:`~active_rag.RouteDecision` (without the long prompt)."""
    return {"retrieve": decision.retrieve, "router": decision.router, "raw_output": decision.raw_output}


def dispatch(name: str, data: dict[str, Any], config: RunnableConfig | None) -> None:
    """Dispatch a custom event to the run whose child ``config`` is given (a no-op outside a run)."""
    try:
        dispatch_custom_event(name, data, config=config)
    except RuntimeError as exc:  # no parent run (called outside a Runnable)
        if "parent run id" not in str(exc):
            raise


async def adispatch(name: str, data: dict[str, Any], config: RunnableConfig | None) -> None:
    """Async :func:`dispatch`."""
    try:
        await adispatch_custom_event(name, data, config=config)
    except RuntimeError as exc:
        if "parent run id" not in str(exc):
            raise


__all__ = ["DECISION_EVENT", "RETRIEVAL_EVENT", "ROUTE_EVENT", "TOKEN_EVENT", "route_dict", "token_dict", "dispatch", "adispatch"]
