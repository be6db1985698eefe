"""Retrievers' rankings as the engine takes them: checked (a list of :class:`~active_rag.types.Passage`) and, when a
query formulator wrote several queries, merged round-robin into one list of distinct passages.

:func:`fetch_rankings` is where the engine calls a retriever, so the calls are counted there: every call made inside
:func:`count_retriever_calls` (this thread or task) adds one to its counter, and :func:`fetch_passages` returns a
retrieval's passages with the calls they took (:attr:`Retrieval.retriever_calls
<active_rag.types.Retrieval.retriever_calls>`)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import RetrieverError
from ..types import Passage


@dataclass
class RetrieverCalls:
    """Calls of a retriever counted by :func:`count_retriever_calls` (``outer``: the enclosing block's counter,
    which counts them too)."""

    n: int = 0
    outer: RetrieverCalls | None = None


_CALLS: contextvars.ContextVar[RetrieverCalls | None] = contextvars.ContextVar("active_rag_retriever_calls", default=None)


@contextlib.contextmanager
def count_retriever_calls() -> Iterator[RetrieverCalls]:
    """Count the retriever calls :func:`fetch_rankings` makes in this block (this thread or task; blocks nest)."""
    calls = RetrieverCalls(outer=_CALLS.get())
    token = _CALLS.set(calls)
    try:
        yield calls
    finally:
        _CALLS.reset(token)


def fetch_passages(
    retriever: Any, queries: Sequence[str], k: int, held: set[str] | frozenset[str] = frozenset(),
) -> tuple[list[Passage], int]:
    """One retrieval's passages, the merged rankings of ``queries`` (at most ``k``, without the ``held`` passages),
    and the retriever calls they took."""
    with count_retriever_calls() as calls:
        passages = merge_rankings(fetch_rankings(retriever, queries, k, held), k)
    return passages, calls.n


def merge_rankings(rankings: Sequence[Sequence[Passage]], k: int) -> list[Passage]:
    """Round-robin merge of several ranked lists, without duplicates, keeping at most ``k``."""
    out: list[Passage] = []
    seen: set[str] = set()
    depth = max((len(r) for r in rankings), default=0)
    for d in range(depth):
        for ranking in rankings:
            if d < len(ranking) and ranking[d].id not in seen:
                seen.add(ranking[d].id)
                out.append(ranking[d])
    return out[:k]


def fetch_rankings(retriever: Any, queries: Sequence[str], k: int, held: set[str] | frozenset[str] = frozenset()) -> list[list[Passage]]:
    """Each query's checked ranking without the ``held`` passages: a context policy that keeps passages asks for
    ``k`` beyond those, so that every retrieval can add ones the prompt does not hold yet. A retriever's failure
    is a :class:`RetrieverError` naming the query and its cause."""
    rankings = []
    for q in queries:
        counter = _CALLS.get()
        while counter is not None:
            counter.n += 1
            counter = counter.outer
        try:
            ranking = retriever.retrieve(q, k + len(held))
        except Exception as exc:  # surfaced with its cause
            raise RetrieverError(
                f"The retriever {type(retriever).__name__} failed on query {q!r}: {type(exc).__name__}: {exc}. "
                "Nothing was generated past this point; fix the retriever (index path, server, credentials) and retry."
            ) from exc
        check_ranking(retriever, q, ranking)
        rankings.append([p for p in ranking if p.id not in held])
    return rankings


def check_ranking(retriever: Any, query: str, ranking: Any) -> None:
    """A retriever must return a list (or tuple) of :class:`Passage`; say what it returned instead."""
    name = type(retriever).__name__
    if not isinstance(ranking, (list, tuple)):
        raise RetrieverError(
            f"The retriever {name} returned a {type(ranking).__name__} for query {query!r}; "
            "retrieve(query, k) must return a list of active_rag.Passage."
        )
    wrong = [p for p in ranking if not isinstance(p, Passage)]
    if wrong:
        kinds = sorted({type(p).__name__ for p in wrong})
        what = "strings" if kinds == ["str"] else f"{', '.join(kinds)} objects"
        raise RetrieverError(
            f"The retriever {name} returned a {type(ranking).__name__} of {what} for query {query!r} "
            f"({len(wrong)} of {len(ranking)} items are not Passage): wrap each item as "
            "active_rag.Passage(id=..., text=..., title=...)."
        )


__all__ = ["RetrieverCalls", "check_ranking", "count_retriever_calls", "fetch_passages", "fetch_rankings", "merge_rankings"]
