"""The name index of a framework's retriever, built from the documents the retriever holds: what the LangChain and
LlamaIndex adapters give linked retrieval (:mod:`active_rag.answer.links`), so that it looks names up instead of
asking the retriever once per name.

:func:`held_name_index` builds the index once per retriever, the first time linked retrieval asks for it, from the
documents the adapter lists (a vector store's, a BM25 retriever's), and attaches it
(:func:`~active_rag.retrieval.name_index.attach_name_index`); it remembers each passage's own framework object
(:func:`held_original`: a LangChain ``Document``, a LlamaIndex node), so that a passage the index found, which the
retriever never returned, is still shown as the user's own document. A store of more than
:data:`MAX_HELD_PASSAGES` documents is not indexed (building takes 2 to 4 s of one CPU core per 20,000 passages),
and a retriever that lists no documents is asked once per name: both are said once per retriever, in one logged line
that names the call attaching an index. An index attached before (by the user, or a
:class:`~active_rag.retrieval.bm25.BM25Index`'s own) always comes first.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..types import Passage
from .name_index import NameIndex, attach_name_index, name_index_of

__all__ = ["MAX_HELD_PASSAGES", "attach_held", "held_name_index", "held_original"]

logger = logging.getLogger("active_rag.retrieval")

#: The most documents a retriever's store may hold for its name index to be built without being asked.
MAX_HELD_PASSAGES = 100_000

#: What an adapter lists of a retriever: each passage with the framework object it was made from (or ``None``: the
#: retriever does not list the documents it searches). Called with the most it needs: ``MAX_HELD_PASSAGES + 1``.
HeldLister = Callable[[int], Sequence[tuple[Passage, Any]] | None]


@dataclass
class _Held:
    ref: Callable[[], Any]
    originals: dict[str, Any] = field(default_factory=dict)
    told: bool = False  # the one line was logged: the retriever lists no documents, or too many


_held: dict[int, _Held] = {}
_lock = threading.Lock()
_building = threading.Lock()  # one build at a time: concurrent questions wait for the first one's index


def _entry(retriever: Any) -> _Held:
    """This retriever's record, made on first use and dropped with the retriever."""
    key = id(retriever)
    with _lock:
        held = _held.get(key)
        if held is not None and held.ref() is retriever:
            return held

        def forget(_: Any, key: int = key) -> None:
            with _lock:
                _held.pop(key, None)

        try:
            ref: Callable[[], Any] = weakref.ref(retriever, forget)
        except TypeError:  # no weak references: kept, so that its id stays its own
            ref = lambda: retriever  # noqa: E731
        held = _held[key] = _Held(ref)
        return held


def attach_held(retriever: Any, pairs: Sequence[tuple[Passage, Any]], index: NameIndex | None = None) -> NameIndex:
    """Attach the name index of ``pairs`` (each passage with its framework object, or ``None``) to ``retriever``
    (``index``: that index, already built) and remember the objects, for :func:`held_original`. Returns the index."""
    index = attach_name_index(retriever, index if index is not None else [p for p, _ in pairs])
    held = _entry(retriever)
    held.originals = {p.id: original for p, original in pairs if original is not None}
    return index


def held_name_index(retriever: Any, held: HeldLister, *, kind: str, attach: str) -> NameIndex | None:
    """The name index of ``retriever``: one attached before, else one built once from ``held(MAX_HELD_PASSAGES + 1)``
    and attached; ``None`` when the retriever lists no documents, holds none yet, or holds more than
    :data:`MAX_HELD_PASSAGES` (said once, in one line naming ``kind``, the retriever's class, and ``attach``, the
    call that attaches an index)."""
    found = name_index_of(retriever)
    if found is not None:
        return found
    entry = _entry(retriever)
    if entry.told:
        return None
    with _building:
        found = name_index_of(retriever)
        if found is not None or entry.told:
            return found
        pairs = held(MAX_HELD_PASSAGES + 1)
        if pairs is None:
            entry.told = True
            logger.warning("%s does not list the documents it searches, so linked retrieval asks it once per name; "
                           "give it a name index once: %s", kind, attach)
            return None
        if len(pairs) > MAX_HELD_PASSAGES:
            entry.told = True
            logger.warning("%s holds over %d documents: no name index is built from them on its own, so linked "
                           "retrieval asks it once per name; build one once and attach it: %s",
                           kind, MAX_HELD_PASSAGES, attach)
            return None
        return attach_held(retriever, pairs) if pairs else None  # an empty store: look again once it holds some


def held_original(retriever: Any, passage_id: str) -> Any | None:
    """The framework object (Document, node) of a passage of ``retriever``'s name index, by its id; ``None`` when
    none was listed under that id."""
    with _lock:
        held = _held.get(id(retriever))
    if held is None or held.ref() is not retriever:
        return None
    return held.originals.get(passage_id)
