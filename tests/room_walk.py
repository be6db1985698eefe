"""A walk of one question through the rooms of the code: which rooms a call enters, in what order.

The rooms are the layers of ``active_rag`` (:data:`ROOMS`, whose imports ``tests/unit_tests/test_import_structure.py`` checks: the
top-level modules as the floor, then kernels and models, decoding and retrieval, answer, components, engine) and the
two adapters above them. The walk runs a real call under :func:`sys.setprofile` and records, for every function of
the three packages it enters, the rooms on the stack below it, consecutive frames of one room counted once (a *room
path*: ``langchain_active_rag -> engine -> decoding -> models``). Code that runs once per process (a module's body,
a class body run by a lazy import) is left out, and so is the retriever a user plugs in, from its adapter
(``RetrieverAdapter``, LlamaIndex's wrapper) down: its code is the user's, as a LangChain retriever's would be.

A room entered twice on one path (``engine -> decoding -> engine``) is a callback that climbs back up: a room that
hands a function of its own to a lower room, which calls it. A walk that enters each room once has none.

    python tests/room_walk.py [PRESET]     # the LangChain runnable on a tiny random model: its room paths
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ADAPTERS = ("langchain_active_rag", "llamaindex_active_rag")
#: The rooms of ``active_rag``, lowest first: a module imports only from its own room or lower ones (the package's
#: top-level modules are the floor: types, errors, text, stop rules...; tests/unit_tests/test_import_structure.py
#: checks it). The adapters sit above all of them.
ROOMS = (("top",), ("kernels", "models"), ("decoding", "retrieval", "remote"), ("answer",), ("components",),
         ("engine",), ("evaluation", "cli", "viz"))
#: classes whose methods are the plugged-in retriever's (left out of the walk with everything they call)
RETRIEVER_PORTS = ("RetrieverAdapter", "LlamaIndexRetrieverAdapter")


def room_of(module: str | None) -> str | None:
    """The room of a module of the three packages (``None``: not theirs)."""
    if not module:
        return None
    parts = module.split(".")
    if parts[0] in ADAPTERS:
        return parts[0]
    if parts[0] != "active_rag":
        return None
    return parts[1] if len(parts) > 1 and (ROOT / "active_rag" / parts[1] / "__init__.py").exists() else "top"


def floor_of(room: str) -> int:
    """The room's floor (the adapters above every room of active_rag)."""
    return next((i for i, names in enumerate(ROOMS) if room in names), len(ROOMS))


def _is_port(frame: FrameType) -> bool:
    owner = frame.f_locals.get("self")
    return owner is not None and any(c.__name__ in RETRIEVER_PORTS for c in type(owner).__mro__)


def room_paths(call: Callable[[], Any], entry: tuple[str, ...] | None = ADAPTERS) -> set[tuple[str, ...]]:
    """Run ``call`` and return the room paths of every function of the three packages it entered (from an entry
    point in one of the rooms ``entry``, by default an adapter's; ``None``: any; see the module docstring)."""
    paths: set[tuple[str, ...]] = set()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or room_of(frame.f_globals.get("__name__")) is None:
            return
        rooms: list[str] = []
        f: FrameType | None = frame
        while f is not None:
            name = f.f_code.co_name
            room = room_of(f.f_globals.get("__name__"))
            if room is not None:
                if name == "<module>" or _is_port(f) or _is_class_body(f):
                    return
                if not rooms or rooms[-1] != room:
                    rooms.append(room)
            f = f.f_back
        paths.add(tuple(reversed(rooms)))

    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    return {p for p in paths if p and (entry is None or p[0] in entry)}


def _is_class_body(frame: FrameType) -> bool:
    """A class body being run (by an import): its code's locals hold ``__qualname__`` and ``__module__``."""
    return "__module__" in frame.f_locals and "__qualname__" in frame.f_locals and frame.f_code.co_name != "__init__"


def maximal(paths: Iterable[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """The paths that are not the start of a longer one, sorted."""
    paths = set(paths)
    return sorted(p for p in paths if not any(q != p and q[: len(p)] == p for q in paths))


def returns(paths: Iterable[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """The paths that enter a room they have left (a callback climbing back up)."""
    return [p for p in maximal(paths) if len(set(p)) < len(p)]


def climbs(paths: Iterable[tuple[str, ...]]) -> list[tuple[str, str]]:
    """The steps of the paths from a room to a higher one (by :data:`ROOMS`), once each."""
    return sorted({(a, b) for p in paths for a, b in zip(p, p[1:]) if floor_of(a) < floor_of(b)})


def langchain_call(preset: str | None = None) -> Callable[[], Any]:
    """A call of the LangChain runnable on a tiny random model and a BM25 retriever over five documents (built and
    warmed up once, so that only the call's own code is walked)."""
    spec = importlib.util.spec_from_file_location("room_walk_fixtures", ROOT / "tests" / "conftest.py")
    assert spec is not None and spec.loader is not None
    fixtures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fixtures)  # the tests' tiny model and tokenizer, whichever conftest pytest imported
    build_tiny_model, build_tokenizer = fixtures.build_tiny_model, fixtures.build_tokenizer
    from langchain_core.documents import Document

    from active_rag import ActiveLM
    from langchain_active_rag import ActiveRAG, BM25sRetriever

    tokenizer = build_tokenizer()
    lm = ActiveLM(build_tiny_model(len(tokenizer)), tokenizer, name="tiny-llama")
    docs = [Document(page_content=t, metadata={"title": n}) for n, t in [
        ("Kasper Schmeichel", "Kasper Schmeichel is a Danish footballer. He is the son of Peter Schmeichel."),
        ("Peter Schmeichel", "Peter Schmeichel was voted the IFFHS World's Best Goalkeeper in 1992 and 1993."),
        ("Scott Derrickson", "Scott Derrickson is an American director."),
        ("Ed Wood", "Ed Wood was an American filmmaker."),
        ("Manchester United", "Manchester United is a football club in Manchester."),
    ]]
    rag = ActiveRAG(lm, BM25sRetriever.from_documents(docs, k=3), max_new_tokens=24,
                    **({"preset": preset} if preset else {}))
    question = "Who is the father of Kasper Schmeichel?"
    rag.invoke(question)  # imports and first-call caches: not the walk
    return lambda: rag.invoke(question)


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    found = room_paths(langchain_call(sys.argv[1] if len(sys.argv) > 1 else None))
    for path in maximal(found):
        print(" -> ".join(path))
    print(f"{len(maximal(found))} room paths; rooms entered again on a path: {len(returns(found))}; "
          f"climbs back up: {climbs(found) or 0}")
