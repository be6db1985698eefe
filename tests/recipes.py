"""The configurations that left the presets (docs/recipes.md) as ``ActiveRAG`` keyword arguments, for tests that
exercise their parts: ``ActiveRAG(lm, retriever, **recipe("look-again", top_k=2))``. ``test_recipes.py`` checks
that docs/recipes.md builds these very engines."""

from __future__ import annotations

from typing import Any

from active_rag import AnswerCheck, make_trigger
from active_rag.components.settings import engine_kwargs


def recipe(name: str, **overrides: Any) -> dict[str, Any]:
    """The keyword arguments of recipe ``name`` (fresh components each call), with ``overrides`` applied: flat
    names (``answer_check=...``, :data:`active_rag.components.settings.FLAT_NAMES`) set that field of ``answer``/``settings``."""
    check = {"look-again": dict(theta=1.0), "look-again-next-hop": dict(theta=1.0, select="grounded", query="draft"),
             "look-again-linked": dict(theta=1.0, select="grounded", query="linked"),
             "look-again-linked-second": dict(theta=1.0, select="grounded-second", query="linked")}
    kwargs: dict[str, Any] = {
        "dragin-accumulate": dict(trigger=make_trigger("rind", theta="auto"), query="attention", initial_retrieval=True,
                                  context="accumulate"),
        "flare-accumulate": dict(trigger=make_trigger("low-confidence", theta="auto"), query="masked-sentence",
                                 prompt="flare", initial_retrieval=True, context="accumulate"),
        "follow-bridge": dict(trigger="bridge", query="entity", initial_retrieval=True, context="accumulate"),
        "follow-bridge-reanswer": dict(trigger="bridge", query="entity", initial_retrieval=True, context="accumulate",
                                       reanswer=True),
    }.get(name) or dict(trigger="once", query="input", context="accumulate", answer_check=AnswerCheck(**check[name]),
                        **({} if name == "look-again" else {"answer_options": True}))
    return engine_kwargs({**kwargs, "method": name, **overrides})


def build(name: str, lm: Any, retriever: Any = None, **overrides: Any) -> Any:
    """The engine of preset or recipe ``name``."""
    from active_rag import ActiveRAG
    from active_rag.components.presets import PRESETS

    if name in PRESETS:
        return ActiveRAG.from_preset(name, lm, retriever, **overrides)
    return ActiveRAG(lm, retriever, **recipe(name, **overrides))


def adapter_kwargs(name: str, *, langchain: bool = False) -> dict[str, Any]:
    """What a LangChain (``langchain=True``) or LlamaIndex adapter takes to build preset or recipe ``name``: the
    LangChain runnable takes the engine's other settings in ``engine_options``."""
    from active_rag.components.presets import PRESETS

    if name in PRESETS:
        return {"preset": name}
    kwargs = recipe(name)
    if not langchain:
        return kwargs
    fields = ("trigger", "query", "context", "prompt")
    return {**{k: v for k, v in kwargs.items() if k in fields},
            "engine_options": {k: v for k, v in kwargs.items() if k not in fields}}
