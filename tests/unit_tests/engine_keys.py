"""A stand-in engine for the tests of evaluation rows' keys (``method_engines._engine_key``): what changes a key is
the environment and the decode path, not the engine, so one fake engine serves them all."""

from __future__ import annotations

from typing import Any


class FakeRag:
    """The attributes ``_engine_key`` reads of an engine, with a model that is neither packed nor on a GPU."""

    model = object()
    prompt = type("P", (), {"direct": "d", "with_docs": "w"})()
    max_new_tokens, answer_phrase, router, follow_links = 8, None, None, False

    def describe(self) -> dict:
        return {"method": "sr-rag"}


def engine_key(dataset: str = "hotpotqa") -> Any:
    """The key of :class:`FakeRag`'s rows on ``dataset`` under the environment as it is now."""
    from active_rag.evaluation import method_engines
    from active_rag.evaluation.config import EvalConfig

    return method_engines._engine_key(FakeRag(), EvalConfig(dataset=dataset), "m")  # type: ignore[arg-type]
