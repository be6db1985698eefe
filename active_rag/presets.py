"""The papers' methods by name. Each preset is a trigger + query formulator + prompt + first-retrieval
choice; any field can be overridden, and any trigger can be combined with any query formulator."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import UnknownNameError


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    trigger: str
    query: str
    prompt: str = "dragin"
    initial_retrieval: bool = False
    trigger_kwargs: tuple[tuple[str, Any], ...] = ()
    query_kwargs: tuple[tuple[str, Any], ...] = ()


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("wo-rag", "no retrieval (DRAGIN §4.3)", "never", "input"),
        Preset("sr-rag", "single-round: retrieve once with the question, then answer", "once", "input"),
        Preset("fl-rag", "fixed length: retrieve every 16 tokens with the previous window (FLARE §4)",
               "fixed-length", "last-tokens", prompt="flare", initial_retrieval=True),
        Preset("fs-rag", "fixed sentence: retrieve every sentence with the previous sentence (IRCoT)",
               "fixed-sentence", "last-sentence", prompt="flare", initial_retrieval=True),
        Preset("self-ask", "question decomposition: retrieve for every 'Follow up:' question (Press et al.)",
               "follow-up", "follow-up", prompt="self-ask"),
        Preset("flare", "FLARE-direct: look-ahead sentence, retrieve if any token p < 0.8, masked query (beta 0.4)",
               "low-confidence", "masked-sentence", prompt="flare", initial_retrieval=True),
        Preset("flare-instruct", "FLARE-instruct: the model writes [Search(query)], '[' biased by +2.0",
               "search-tag", "search-tag", prompt="flare-instruct", initial_retrieval=True),
        Preset("dragin", "DRAGIN: RIND trigger (theta 1.2) + QFS attention query (top 35), truncate and continue",
               "rind", "attention"),
    )
}


def preset_kwargs(name: str) -> dict[str, Any]:
    """Keyword arguments for :class:`~active_rag.loop.ActiveRAG` that build the named method."""
    from .queries import make_query
    from .triggers import make_trigger

    if name not in PRESETS:
        raise UnknownNameError("method", name, PRESETS)
    p = PRESETS[name]
    return {
        "trigger": make_trigger(p.trigger, **dict(p.trigger_kwargs)),
        "query": make_query(p.query, **dict(p.query_kwargs)),
        "prompt": p.prompt,
        "initial_retrieval": p.initial_retrieval,
        "method": p.name,
    }
