"""The engine's triggers ("when") and query formulators ("what") as standalone LCEL Runnables.

``TriggerRunnable(trigger)`` input (any of):

- an :class:`active_rag.SegmentContext`;
- a list of tokens (a segment);
- a mapping ``{"segment": [tokens], "max_attention": [floats] | tensor | None, "output_text": str,
  "finished": bool}`` (``"tokens"`` is accepted for ``"segment"``).

A token is an :class:`active_rag.TokenStep` or a mapping with ``"text"`` (or ``"token"``; the
``active_rag.token`` events dispatched by :class:`~langchain_active_rag.ActiveRAG` can be fed back),
``"logprob"`` (or ``"prob"``), and optionally ``"entropy"``, ``"id"``, ``"position"`` (default: its
index in the segment; ``max_attention`` is indexed by position, as DRAGIN's ``a_max``). Output:
``TriggerDecision.to_dict()`` (fire, trigger, index, token, score, threshold, reason, query_hint,
token_scores).

``QueryRunnable(query)`` input: an :class:`active_rag.QueryContext` or a mapping ``{"question": str,
"output": [tokens] | str, "segment": [tokens], "decision": TriggerDecision | dict, "action": str,
"session_ids", "question_span", "output_start"}`` (only ``question`` is required; ``decision``
defaults to a fired decision without a token). Output: the query string (several queries joined by
``" | "`` as in the engine's trace), or the list with ``as_list=True``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig, RunnableSerializable
from pydantic import ConfigDict, InstanceOf

from active_rag import (
    QueryContext,
    QueryFormulator,
    SegmentContext,
    TokenStep,
    Trigger,
    TriggerDecision,
    make_query,
    make_trigger,
)

from ._convert import resolve_lm


def to_token_step(value: Any, index: int = 0) -> TokenStep:
    """A :class:`~active_rag.TokenStep` from a TokenStep or a token mapping (see the module docs)."""
    if isinstance(value, TokenStep):
        return value
    if isinstance(value, str):
        return TokenStep(id=0, text=value, logprob=0.0, entropy=0.0, position=index)
    if not isinstance(value, Mapping):
        raise TypeError(f"A token must be a TokenStep, a string or a mapping with 'text', got {type(value).__name__}.")
    text = value.get("text", value.get("token"))
    if not isinstance(text, str):
        raise ValueError(f"Token {index} has no 'text' (or 'token') string: {dict(value)!r}.")
    if value.get("logprob") is not None:
        logprob = float(value["logprob"])
    elif value.get("prob") is not None:
        prob = float(value["prob"])
        logprob = math.log(prob) if prob > 0 else float("-inf")
    else:
        logprob = 0.0
    position = value.get("position")
    return TokenStep(
        id=int(value.get("id", value.get("token_id", 0)) or 0),
        text=text,
        logprob=logprob,
        entropy=float(value.get("entropy") or 0.0),
        position=int(position) if position is not None else index,
    )


def to_token_steps(values: Sequence[Any] | str | None) -> list[TokenStep]:
    if values is None:
        return []
    if isinstance(values, str):  # already generated text, as one pseudo-token
        return [to_token_step(values)] if values else []
    return [to_token_step(v, i) for i, v in enumerate(values)]


def to_segment_context(value: Any) -> SegmentContext:
    """A :class:`~active_rag.SegmentContext` from the inputs :class:`TriggerRunnable` accepts."""
    if isinstance(value, SegmentContext):
        return value
    if isinstance(value, (list, tuple)):
        return SegmentContext(segment=to_token_steps(value))
    if not isinstance(value, Mapping):
        raise TypeError(
            f"TriggerRunnable takes a SegmentContext, a list of tokens or a mapping with 'segment', got {type(value).__name__}."
        )
    if "segment" not in value and "tokens" not in value:
        raise ValueError(f"The trigger input has no 'segment' (or 'tokens') key: keys are {sorted(map(str, value))}.")
    segment = to_token_steps(value.get("segment", value.get("tokens")))
    max_attention = value.get("max_attention")
    if max_attention is not None:
        import torch

        max_attention = torch.as_tensor(max_attention, dtype=torch.float32, device="cpu")  # as the engine's a_max
    return SegmentContext(
        segment=segment,
        max_attention=max_attention,
        output_text=str(value.get("output_text", "")),
        finished=bool(value.get("finished", False)),
    )


def to_decision(value: Any) -> TriggerDecision:
    if isinstance(value, TriggerDecision):
        return value
    if value is None:
        return TriggerDecision(fire=True, trigger="manual", reason="query formulated on request")
    if isinstance(value, Mapping):
        names = {f.name for f in dataclasses.fields(TriggerDecision)}
        data = {k: v for k, v in value.items() if k in names}
        data.setdefault("fire", True)
        data.setdefault("trigger", "manual")
        return TriggerDecision(**data)
    raise TypeError(f"'decision' must be a TriggerDecision or a mapping, got {type(value).__name__}.")


def to_query_context(value: Any, lm: Any = None) -> QueryContext:
    """A :class:`~active_rag.QueryContext` from the inputs :class:`QueryRunnable` accepts."""
    if isinstance(value, QueryContext):
        if value.lm is None and lm is not None:
            value.lm = lm
        return value
    if isinstance(value, str):
        value = {"question": value}
    if not isinstance(value, Mapping):
        raise TypeError(f"QueryRunnable takes a QueryContext or a mapping with 'question', got {type(value).__name__}.")
    if "question" not in value:
        raise ValueError(f"The query input has no 'question' key: keys are {sorted(map(str, value))}.")
    span = value.get("question_span")
    return QueryContext(
        question=str(value["question"]),
        output=to_token_steps(value.get("output")),
        segment=to_token_steps(value.get("segment")),
        decision=to_decision(value.get("decision")),
        action=str(value.get("action", "continue")),
        lm=lm,
        session_ids=list(value["session_ids"]) if value.get("session_ids") is not None else None,
        question_span=tuple(span) if span is not None else None,  # type: ignore[arg-type]
        output_start=value.get("output_start"),
    )


class TriggerRunnable(RunnableSerializable[Any, dict[str, Any]]):
    """An engine trigger as a Runnable: segment in, ``TriggerDecision.to_dict()`` out.

    >>> TriggerRunnable("low-confidence").invoke([{"token": " Paris", "prob": 0.3}])["fire"]
    True
    """

    trigger: str | InstanceOf[Trigger]
    trigger_options: dict[str, Any] = {}

    model_config = ConfigDict(arbitrary_types_allowed=True)

    def __init__(self, trigger: Any = None, **kwargs: Any) -> None:
        if trigger is None:
            raise TypeError("TriggerRunnable needs a trigger: a name (rind, low-confidence, ...) or a Trigger.")
        super().__init__(trigger=trigger, **kwargs)

    @property
    def engine_trigger(self) -> Trigger:
        """The engine trigger (raises ``UnknownNameError`` for an unknown name)."""
        return make_trigger(self.trigger, **self.trigger_options)

    def _check(self, value: Any) -> dict[str, Any]:
        return self.engine_trigger.check(to_segment_context(value)).to_dict()

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> dict[str, Any]:
        return self._call_with_config(self._check, input, config, **kwargs)


class QueryRunnable(RunnableSerializable[Any, Any]):
    """An engine query formulator as a Runnable: ``QueryContext`` (or mapping) in, query string out.

    >>> QueryRunnable("full-context").invoke({"question": "Who?", "output": "He was"})
    'Who? He was'
    """

    query: str | InstanceOf[QueryFormulator]
    query_options: dict[str, Any] = {}
    lm: Any = None
    """An ActiveLM (or ChatActiveHF / name) for formulators that need the model (generated-questions)."""
    as_list: bool = False

    model_config = ConfigDict(arbitrary_types_allowed=True)

    def __init__(self, query: Any = None, **kwargs: Any) -> None:
        if query is None:
            raise TypeError("QueryRunnable needs a query formulator: a name (attention, masked-sentence, ...) or an instance.")
        super().__init__(query=query, **kwargs)

    @property
    def engine_query(self) -> QueryFormulator:
        """The engine query formulator (raises ``UnknownNameError`` for an unknown name)."""
        return make_query(self.query, **self.query_options)

    def _formulate(self, value: Any) -> Any:
        formulator = self.engine_query
        lm = resolve_lm(self.lm) if self.lm is not None else None
        queries = [q.strip() for q in formulator.formulate(to_query_context(value, lm)) if q and q.strip()]
        return queries if self.as_list else " | ".join(queries)

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        return self._call_with_config(self._formulate, input, config, **kwargs)


__all__ = [
    "TriggerRunnable",
    "QueryRunnable",
    "to_token_step",
    "to_token_steps",
    "to_segment_context",
    "to_query_context",
]
