"""Run a synchronous generator in a worker thread and consume it from asyncio without blocking the loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import run_in_executor

T = TypeVar("T")
_DONE = object()


async def aiter_in_thread(make_iter: Callable[[], Iterator[T]], config: RunnableConfig | None = None) -> AsyncIterator[T]:
    """Yield the items of ``make_iter()`` as a worker thread (LangChain's executor) produces them.

    Exceptions raised in the thread are re-raised here unchanged. When the consumer stops early (break,
    cancellation), the worker stops at the next item and the generator is closed.
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
        iterator = make_iter()
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

    worker = asyncio.ensure_future(run_in_executor(config, work))
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
        elif not worker.cancelled() and worker.exception() is not None:  # pragma: no cover - work() catches all
            raise worker.exception()  # type: ignore[misc]
