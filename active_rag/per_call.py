"""One configured engine, many calls: what the LangChain and LlamaIndex adapters share about running a question.

An adapter holds *one* method spec, the configured :class:`active_rag.ActiveRAG` (its model, trigger, query formulator,
context policy, prompt, router), and per question swaps only what belongs to that question:

- :func:`engine_for_call` gives a shallow copy of the configured engine with the call's ``retriever`` (a LangChain
  retriever adapter whose calls run under the question's run, a LlamaIndex adapter that remembers the question's nodes,
  a graph's bridge) and, where the caller decided the route itself, its ``router``. The copy shares every component
  with the configured engine, which stays as it was: concurrent questions never share a retriever, and nothing of one
  question's run is kept on the shared engine. ``ActiveRAG.stream`` keeps a run's state in the run, not on the engine,
  so copies run side by side.
- :class:`EngineCache` holds the configured engines of a settings holder whose settings may change (the LangChain
  runnable's fields, its ``configurable`` keys, per-call overrides): each is built once, at the first call with its
  settings, and built again when they change.
- :data:`PER_CALL_RETRIEVER` stands in the configured engine for the retriever that each call brings, so the engine
  knows it retrieves (a method that retrieves refuses to be built without a retriever) without holding one of its own.
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from .types import Passage

E = TypeVar("E")

_KEEP: Any = object()  # engine_for_call: leave this attribute as the configured engine has it


class PerCallRetriever:
    """The retriever of a configured engine whose every call brings its own (:func:`engine_for_call`): it is never
    asked for passages; when it is, the call's retriever was not swapped in, and it says so."""

    def retrieve(self, query: str, k: int) -> list[Passage]:
        raise RuntimeError(
            "This engine is the configured one that each call copies with its own retriever (engine_for_call); "
            "run a per-call copy, not the configured engine itself."
        )

    def __repr__(self) -> str:
        return "PerCallRetriever()"


#: The stand-in retriever of a configured engine (see :class:`PerCallRetriever`).
PER_CALL_RETRIEVER = PerCallRetriever()


def engine_for_call(engine: E, *, retriever: Any = _KEEP, router: Any = _KEEP) -> E:
    """A shallow copy of the configured ``engine`` for one call, with ``retriever`` and ``router`` swapped in when
    given (``None`` included: no retriever, no router); ``engine`` itself is left as it was."""
    call = copy.copy(engine)
    if retriever is not _KEEP:
        call.retriever = retriever  # type: ignore[attr-defined]
    if router is not _KEEP:
        call.router = router  # type: ignore[attr-defined]
    return call


def _snapshot(value: Any) -> Any:
    """``value`` with its dicts, lists and tuples copied (so a later change to them in place is seen as a change); any
    other object is kept as it is and compared by identity (:func:`_same`)."""
    if isinstance(value, Mapping):
        return {k: _snapshot(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_snapshot(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_snapshot(v) for v in value)
    return value


def _same(a: Any, b: Any) -> bool:
    """Whether two settings snapshots name the same engine: equal plain values (strings, numbers, booleans, ``None``,
    of the same type), containers of the same such values, and otherwise the very same objects."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, (str, int, float, bool, bytes)):
        return bool(a == b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return False


class EngineCache:
    """Configured engines by the settings they were built from, the ``size`` most recently used.

    ``get(settings, build)`` returns the engine built for settings that are the same as ``settings`` (plain values by
    equality, other objects by identity: a trigger or prompt object is the same setting only as the same object), or
    builds it with ``build()`` and keeps it. A failed build keeps nothing. Safe to share between threads; a copy (of the
    object holding it, e.g. ``copy.deepcopy`` of a runnable) starts empty, and so does an unpickled one."""

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self._entries: OrderedDict[int, tuple[Any, Any]] = OrderedDict()  # serial -> (settings snapshot, engine)
        self._serial = 0
        self._lock = threading.Lock()

    def get(self, settings: Mapping[str, Any] | Sequence[Any], build: Callable[[], E]) -> E:
        snapshot = _snapshot(settings)
        with self._lock:
            for serial, (held, engine) in self._entries.items():
                if _same(held, snapshot):
                    self._entries.move_to_end(serial)
                    return engine  # type: ignore[no-any-return]
            engine = build()
            self._serial += 1
            self._entries[self._serial] = (snapshot, engine)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
            return engine

    def clear(self) -> None:
        """Forget every engine (the next call builds its own)."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def __copy__(self) -> EngineCache:
        return EngineCache(self.size)

    def __deepcopy__(self, memo: dict[int, Any]) -> EngineCache:
        return EngineCache(self.size)

    def __reduce__(self) -> tuple[Any, ...]:
        return (EngineCache, (self.size,))


__all__ = ["EngineCache", "PER_CALL_RETRIEVER", "PerCallRetriever", "engine_for_call"]
