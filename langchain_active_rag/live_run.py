"""A run of the engine that a LangGraph graph advances one step at a time (:mod:`langchain_active_rag.graph`).

The engine's run (:meth:`active_rag.ActiveRAG.stream`) is a generator that holds the run's KV-cached decoding session;
a graph node cannot put a generator in a checkpoint. So the run stays alive in the process, in a
:class:`LiveRuns` registry, keyed by the ``run_id`` the graph's state carries, and every node that needs the engine
advances that same run: nothing the engine has read is read again when the graph goes on after a retrieval.

The engine calls its retriever synchronously, in the middle of a step (:func:`active_rag.retrieval.rankings.fetch_rankings`).
A :class:`LiveRun` gives the engine a retriever of its own (:class:`GraphRetriever`) whose ``retrieve(query, k)``
hands the call to the graph and waits for the graph's passages, so the graph's ``retrieve`` node (any LangChain
retriever, a human who edits the query, a node that filters the passages) answers the engine's call. To wait there,
the engine's generator runs on a thread of its own, driven in lock-step by :meth:`LiveRun.step`: the engine never
runs ahead of the graph. Nothing of the method is here: the thread runs the engine's own ``stream``.

A run whose graph is never resumed (a human never answers an interrupt) keeps its thread and KV session until
:meth:`LiveRuns.close` or until ``max_live`` newer runs evict it. A run that is not in the registry (the process
restarted, the run was closed or evicted) cannot be resumed: :class:`LiveRunGoneError` says so.
"""

from __future__ import annotations

import atexit
import contextvars
import queue
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from active_rag._aio import CANCELLED
from active_rag.errors import ActiveRAGError
from active_rag.types import Passage, StreamEvent

__all__ = ["GraphRetriever", "LiveRun", "LiveRunGoneError", "LiveRunMismatchError", "LiveRuns", "RetrieverCall"]


class LiveRunGoneError(ActiveRAGError):
    """The graph's state names an engine run that this process does not hold: the process restarted (a persistent
    checkpointer keeps the state, not the KV session), or the run was closed, finished or evicted. Ask the question
    again in a new run (``graph.invoke({"question": ...}, config)``)."""


class LiveRunMismatchError(ActiveRAGError):
    """The graph resumed from a checkpoint the engine's run has already gone past (time travel, a replayed or forked
    thread): the engine cannot go back. Ask the question again in a new run."""


@dataclass(frozen=True)
class RetrieverCall:
    """The engine asks its retriever for ``k`` passages with ``query`` (the query formulator's) and waits."""

    query: str
    k: int


class _Closed(BaseException):
    """Raised inside the engine's thread to unwind a run that was closed while it waited for passages (a
    ``BaseException``, so the engine does not report it as a retriever failure)."""


_NEXT, _ANSWER, _CLOSE = "next", "answer", "close"


class GraphRetriever:
    """The retriever a :class:`LiveRun`'s engine calls: each ``retrieve(query, k)`` is handed to the graph.

    ``source`` is the retriever the graph's nodes call (a :class:`~langchain_active_rag.adapter.RetrieverAdapter`):
    its name index (linked retrieval looks names up there instead of calling the retriever) and the retriever it
    wraps are the engine's view of it."""

    def __init__(self, run: LiveRun, source: Any = None) -> None:
        self._run = run
        self.source = source

    def retrieve(self, query: str, k: int) -> list[Passage]:
        return self._run._wait_for_passages(RetrieverCall(query=query, k=k))

    @property
    def name_index(self) -> Any:
        return getattr(self.source, "name_index", None)

    @property
    def retriever(self) -> Any:  # the user's retriever, as the engine's messages name it
        return getattr(self.source, "retriever", self.source)


class LiveRun:
    """One question's engine run, advanced by :meth:`step` and answered by :meth:`answer`.

    ``make_engine(retriever)`` builds the :class:`active_rag.ActiveRAG` with the run's :class:`GraphRetriever`. The
    generator starts on the first :meth:`step`. ``step_count`` counts the nodes' steps (the graph's state records it,
    so that a node resumed from an older checkpoint is refused: :class:`LiveRunMismatchError`)."""

    def __init__(self, run_id: str, question: str, make_engine: Any, source: Any = None) -> None:
        self.run_id = run_id
        self.question = question
        self.retriever = GraphRetriever(self, source)
        self.engine = make_engine(self.retriever)
        self.pending: RetrieverCall | None = None
        self.result: Any = None
        self.finished = False
        self.closed = False
        self.step_count = 0
        self.extras: dict[str, Any] = {}  # per-run objects of the graph's nodes (tracer, answer stream, ...)
        self._commands: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._messages: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._running = False  # the engine's thread is inside one next() of the generator
        self._cancel = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the graph's side --------------------------------------------------------------------------------
    def step(self) -> StreamEvent | RetrieverCall:
        """The engine's next event, or the :class:`RetrieverCall` it now waits on; the engine's own error is raised
        here (and the run is over). After the last event (the :class:`~active_rag.ActiveRAGResult`) a step raises
        ``StopIteration``."""
        if self.closed:
            raise LiveRunGoneError(f"The engine run {self.run_id!r} was closed (LiveRuns.close, or evicted by max_live).")
        if self.pending is not None:
            raise RuntimeError(f"the engine waits for passages for {self.pending.query!r}: answer() the call first")
        if self.finished:
            raise StopIteration
        if self._thread is None:
            context = contextvars.Context()  # the engine's own: nothing of the first node's run is kept alive
            context.run(CANCELLED.set, self._cancel)  # close() stops a decoding step in progress
            self._thread = threading.Thread(target=context.run, args=(self._work,), daemon=True,
                                            name=f"active-rag-live-{self.run_id[:8]}")
            self._thread.start()
        if not self._running:
            self._running = True
            self._commands.put((_NEXT, None))
        kind, value = self._messages.get()
        if kind == "call":
            self.pending = value
            return value
        self._running = False
        if kind == "event":
            return value
        self.finished = True
        if kind == "closed":
            raise LiveRunGoneError(f"The engine run {self.run_id!r} was closed while it was advanced.")
        if kind == "error":
            raise value
        raise StopIteration

    def answer(self, passages: list[Passage] | BaseException) -> None:
        """Answer the pending :class:`RetrieverCall` with ``passages`` (best first), or fail it with an exception
        (the engine reports it as its :class:`~active_rag.errors.RetrieverError`). The engine goes on at the next
        :meth:`step`."""
        if self.pending is None:
            raise RuntimeError("the engine waits for no passages")
        self.pending = None
        self._commands.put((_ANSWER, passages))

    def close(self) -> None:
        """Stop the engine's thread and let go of its KV session (a decoding step in progress stops at once)."""
        self._cancel.set()
        self.finished = self.closed = True
        if self._thread is not None:
            self._commands.put((_CLOSE, None))
            self._messages.put(("closed", None))  # a step() waiting in another thread returns

    # -- the engine's side (its own thread) ------------------------------------------------------------------
    def _wait_for_passages(self, call: RetrieverCall) -> list[Passage]:
        self._messages.put(("call", call))
        kind, value = self._commands.get()
        if kind == _CLOSE:
            raise _Closed
        if isinstance(value, BaseException):
            raise value
        return list(value)

    def _work(self) -> None:
        events = self.engine.stream(self.question)
        try:
            while True:
                kind, _ = self._commands.get()
                if kind == _CLOSE:
                    return
                try:
                    event = next(events)
                except StopIteration:
                    self._messages.put(("end", None))
                    return
                except _Closed:
                    return
                except BaseException as exc:  # noqa: BLE001 - handed to the graph's node
                    self._messages.put(("error", exc))
                    return
                self._messages.put(("event", event))
        finally:
            try:
                events.close()
            except BaseException:  # noqa: BLE001 - a run that is being torn down
                pass


class LiveRuns:
    """The live runs of one graph, by ``run_id`` (thread-safe). At most ``max_live`` at once: a new run evicts (and
    closes) the run least recently advanced, so that abandoned threads (an interrupt never answered) do not pile up."""

    def __init__(self, max_live: int = 32) -> None:
        if max_live < 1:
            raise ValueError("max_live must be at least 1")
        self.max_live = max_live
        self._runs: OrderedDict[str, LiveRun] = OrderedDict()
        self._lock = threading.Lock()
        weakref.finalize(self, _close_all, self._runs)  # a graph dropped with runs still live lets them go
        _REGISTRIES.add(self)

    def add(self, run: LiveRun) -> LiveRun:
        with self._lock:
            self._runs[run.run_id] = run
            evicted = []
            while len(self._runs) > self.max_live:
                evicted.append(self._runs.popitem(last=False)[1])
        for old in evicted:
            old.close()
        return run

    def get(self, run_id: str | None, step: int | None = None) -> LiveRun:
        """The live run ``run_id``, checked against the state's ``step`` count; :class:`LiveRunGoneError` when this
        process does not hold it, :class:`LiveRunMismatchError` when it has gone past the state's step."""
        with self._lock:
            run = self._runs.get(run_id) if run_id else None
            if run is not None:
                self._runs.move_to_end(run_id)  # type: ignore[arg-type]
        if run is None:
            raise LiveRunGoneError(
                f"The engine run {run_id!r} that this graph state continues is not in this process: its KV session "
                "lives only in the process that started it (a checkpointer saves the state, not the session), and it "
                "ends when the run finishes, is closed or is evicted (max_live). Ask the question again in a new run."
            )
        if step is not None and step != run.step_count:
            raise LiveRunMismatchError(
                f"The graph resumed from a checkpoint at step {step} of engine run {run_id!r}, which is at step "
                f"{run.step_count}: the engine cannot go back. Ask the question again in a new run."
            )
        return run

    def pop(self, run_id: str) -> None:
        """Forget a finished run, ending its thread (after the result it still waits for the command that would find
        the generator's end)."""
        with self._lock:
            run = self._runs.pop(run_id, None)
        if run is not None:
            run.close()

    def close(self, run_id: str | None = None) -> None:
        """Close the run ``run_id`` (``None``: every run) and forget it."""
        with self._lock:
            runs = list(self._runs.values()) if run_id is None else [self._runs[run_id]] if run_id in self._runs else []
            for run in runs:
                self._runs.pop(run.run_id, None)
        for run in runs:
            run.close()

    def __len__(self) -> int:
        with self._lock:
            return len(self._runs)

    def __contains__(self, run_id: object) -> bool:
        with self._lock:
            return run_id in self._runs


def _close_all(runs: OrderedDict[str, LiveRun]) -> None:
    for run in list(runs.values()):
        run.close()
    runs.clear()


_REGISTRIES: weakref.WeakSet[LiveRuns] = weakref.WeakSet()


@atexit.register
def _close_everything() -> None:
    """At exit, end the engine threads still waiting (a daemon thread stopped inside a decoding library at
    interpreter shutdown can abort the process)."""
    runs = [run for registry in list(_REGISTRIES) for run in list(registry._runs.values())]
    for registry in list(_REGISTRIES):
        registry.close()
    for run in runs:
        if run._thread is not None:
            run._thread.join(timeout=2)
