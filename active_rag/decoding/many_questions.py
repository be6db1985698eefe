"""Many questions answered at once, each in its own thread: ``ActiveRAG.run_batch`` and ``ActiveRAG.stream_batch``.

Each question runs the ordinary loop (:meth:`ActiveRAG.stream`) in a worker thread, with its own trigger
state, crops, retrievals, documents and prompt. The model's :class:`~active_rag.decoding.decode_scheduler.DecodeScheduler`
merges the decode steps of the questions in flight into one batched forward per step. When a question
retrieves, its thread re-prefills its new prompt (starting from the prefix cache) and rejoins the batch;
when it finishes, the next waiting question takes its thread: continuous batching with at most
``batch_size`` questions in flight. Retrievals of different questions run concurrently.

A question whose retriever (or anything else) raises fails alone: the others finish, and the failure is
reported in its place (``return_exceptions=True``) or raised as :class:`~active_rag.errors.BatchError`
after all have finished, with the results that did complete attached.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from ..errors import BatchError
from ..types import ActiveRAGResult, StreamEvent

_DONE = object()


class Streams(Protocol):
    """What answers one question as a stream of events: :class:`~active_rag.engine.loop.ActiveRAG` (this module sits
    below the loop, which calls it, so it names only the method it uses)."""

    def stream(self, question: str) -> Iterator[StreamEvent]: ...


def _check_batch_size(batch_size: int) -> int:
    from ..validation import check_int

    return check_int("batch_size", batch_size, minimum=1, hint="It is the number of questions decoded together, e.g. 8")


def run_batch(
    rag: Streams, questions: Sequence[str], *, batch_size: int = 8, return_exceptions: bool = False
) -> list[ActiveRAGResult | BaseException]:
    """Answer ``questions`` with up to ``batch_size`` in flight; results in input order."""
    _check_batch_size(batch_size)
    questions = list(questions)
    results: list[ActiveRAGResult | BaseException | None] = [None] * len(questions)
    for index, event in stream_batch(rag, questions, batch_size=batch_size, return_exceptions=True):
        if isinstance(event, (ActiveRAGResult, BaseException)):
            results[index] = event
    failures = [(i, r) for i, r in enumerate(results) if isinstance(r, BaseException)]
    if failures and not return_exceptions:
        raise BatchError(failures, results)
    return results  # type: ignore[return-value]


def stream_batch(
    rag: Streams, questions: Sequence[str], *, batch_size: int = 8, return_exceptions: bool = False
) -> Iterator[tuple[int, StreamEvent | BaseException]]:
    """Yield ``(question index, event)`` as the questions advance together.

    The events of each question are those of :meth:`ActiveRAG.stream`, in its order; questions interleave.
    A question that fails yields ``(index, exception)`` when ``return_exceptions``, otherwise the first
    failure is raised once the questions in flight have finished. Closing the iterator early stops
    every question at its next event and frees its decoding slot.
    """
    _check_batch_size(batch_size)
    questions = list(questions)
    events: queue.Queue[tuple[int, object]] = queue.Queue()
    stop = threading.Event()

    def work(index: int) -> None:
        try:
            if stop.is_set():
                return
            stream = rag.stream(questions[index])
            try:
                for event in stream:
                    if stop.is_set():
                        return
                    events.put((index, event))
            finally:
                stream.close()  # frees the decoding slot at once, also when stopped early
        except BaseException as error:  # reported in the question's place
            events.put((index, error))
        finally:
            events.put((index, _DONE))

    pool = ThreadPoolExecutor(max_workers=min(batch_size, max(len(questions), 1)), thread_name_prefix="active-rag")
    try:
        for index in range(len(questions)):
            pool.submit(work, index)
        finished = 0
        first_error: BaseException | None = None
        while finished < len(questions):
            index, event = events.get()
            if event is _DONE:
                finished += 1
                continue
            if isinstance(event, BaseException) and not return_exceptions:
                first_error = first_error or event
                continue
            yield index, event  # type: ignore[misc]
        if first_error is not None:
            raise first_error
    finally:
        stop.set()  # questions still in flight stop at their next event
        pool.shutdown(wait=False, cancel_futures=True)


__all__ = ["run_batch", "stream_batch"]
