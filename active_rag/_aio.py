"""The one sync-to-async bridge of the package: run the (synchronous, thread-safe) engine in worker threads.

The engine decodes in plain threads (and batches concurrent threads' forward passes itself), so every
async API of the adapters (``langchain_active_rag``, ``llamaindex_active_rag``) runs it through these two
functions instead of a bridge of its own:

- :func:`run_in_thread` awaits ``fn(*args, **kwargs)`` run in a worker thread;
- :func:`aiter_in_thread` consumes a synchronous generator that runs, from its first item to its last,
  in ONE worker thread (so thread-bound state such as context variables and tracing callbacks stays
  valid) and hands its items to the event loop as they are produced.

Both copy the caller's :mod:`contextvars` into the worker (as :func:`asyncio.to_thread` does), so
framework context (LangChain's current run, LlamaIndex's dispatcher spans) follows the work.

Each call gets a thread of its own, not one of the event loop's default executor (a few workers on a small
machine): concurrency is bounded by the decode scheduler's batch, never by the executor's size. A cancelled
caller stops its work: the worker sees :data:`CANCELLED` set and the next decoding step raises
:class:`~active_rag.errors.RunCancelledError` (:func:`check_cancelled`), so no thread decodes to the end for
nobody.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")
_DONE = object()

CANCELLED: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar("active_rag_cancelled", default=None)
"""Set in a worker's context by :func:`run_in_thread` / :func:`aiter_in_thread`: the event its caller sets when it
is cancelled or stops listening."""


def check_cancelled() -> None:
    """Raise :class:`~active_rag.errors.RunCancelledError` if the caller of this thread's work was cancelled (a
    decoding session calls it at every step)."""
    event = CANCELLED.get()
    if event is not None and event.is_set():
        from .errors import RunCancelledError

        raise RunCancelledError("The caller was cancelled (or stopped reading): decoding stopped at this step.")


def _start(loop: asyncio.AbstractEventLoop, fn: Callable[[], T]) -> asyncio.Future[T]:
    """Run ``fn`` in a new daemon thread; its result or exception lands in the returned future."""
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def target() -> None:
        result, error = None, None
        try:
            result = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting caller
            error = exc
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass

    threading.Thread(target=target, name="active-rag-worker", daemon=True).start()
    return future


def _in_context(event: threading.Event, fn: Callable[[], T]) -> Callable[[], T]:
    context = contextvars.copy_context()
    context.run(CANCELLED.set, event)
    return functools.partial(context.run, fn)


async def run_in_thread(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in a thread of its own; cancelling the caller stops the decoding it does."""
    loop = asyncio.get_running_loop()
    event = threading.Event()
    future = _start(loop, _in_context(event, functools.partial(fn, *args, **kwargs)))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        event.set()  # the worker raises RunCancelledError at its next decoding step
        future.add_done_callback(lambda f: f.cancelled() or f.exception())  # consumed: never "never retrieved"
        raise


async def aiter_in_thread(make_iter: Callable[[], Iterator[T]]) -> AsyncIterator[T]:
    """Yield the items of ``make_iter()`` as a worker thread produces them, without blocking the loop.

    ``make_iter`` is called in the worker thread, and the whole iteration stays in that thread.
    Exceptions raised there are re-raised here unchanged. When the consumer stops early (``break``,
    cancellation), the worker stops before producing the next item and the iterator is closed there.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[Any, BaseException | None]] = asyncio.Queue()
    stop = threading.Event()  # also the worker's CANCELLED event: a step in progress stops too

    def put(item: Any, error: BaseException | None = None) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, (item, error))
        except RuntimeError:  # the loop is closed: nobody is listening any more
            stop.set()

    def work() -> None:
        try:
            iterator = make_iter()
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            put(_DONE, exc)
            return
        try:
            for item in iterator:
                if stop.is_set():
                    break
                put(item)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            from .errors import RunCancelledError

            if not (stop.is_set() and isinstance(exc, RunCancelledError)):  # a stop the consumer asked for
                put(_DONE, exc)
                return
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()
        put(_DONE)

    worker = _start(loop, _in_context(stop, work))
    try:
        while True:
            item, error = await queue.get()
            if item is _DONE:
                if error is not None:
                    raise error
                break
            yield item
    finally:
        stop.set()
        if not worker.done():
            await asyncio.shield(worker)


__all__ = ["CANCELLED", "aiter_in_thread", "check_cancelled", "run_in_thread"]
