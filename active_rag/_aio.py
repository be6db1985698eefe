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


async def run_in_thread(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in a worker thread of the running loop's default executor."""
    return await asyncio.to_thread(fn, *args, **kwargs)


async def aiter_in_thread(make_iter: Callable[[], Iterator[T]]) -> AsyncIterator[T]:
    """Yield the items of ``make_iter()`` as a worker thread produces them, without blocking the loop.

    ``make_iter`` is called in the worker thread, and the whole iteration stays in that thread.
    Exceptions raised there are re-raised here unchanged. When the consumer stops early (``break``,
    cancellation), the worker stops before producing the next item and the iterator is closed there.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[Any, BaseException | None]] = asyncio.Queue()
    stop = threading.Event()

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
            put(_DONE, exc)
            return
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()
        put(_DONE)

    context = contextvars.copy_context()
    worker = loop.run_in_executor(None, functools.partial(context.run, work))
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


__all__ = ["aiter_in_thread", "run_in_thread"]
