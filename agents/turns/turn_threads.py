"""A turn's threads: the database thread it does its queries in (``TurnDb``), and the event
loop a worker thread keeps from one turn to the next (``thread_loop_run``)."""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from django.conf import settings
from django.db import close_old_connections, connections

from agentsite.db import ConnectionLost, commit_lazily, releasing

logger = logging.getLogger(__name__)
T = TypeVar("T")
# Why a turn whose database connection broke was handed back (its resumption step says so).
CONNECTION_LOST_REASON = "database connection lost"


class TurnDb:
    """A database thread for one turn at a time. ``await db(fn, ...)`` from the loop,
    ``db.call(fn, ...)`` from synchronous code.

    Threads are kept between turns (``acquire``/``release``), so a worker holds at most as many
    connections as it runs turns at once and does not open one per turn; on release the
    thread's connection gets the end-of-request treatment (``close_old_connections``: closed
    when ``CONN_MAX_AGE`` is over or it is broken; SQLite keeps it among its idle ones).

    Its transactions commit without waiting for the disk (``agentsite.db.commit_lazily``,
    unless ``DATABASE_STEPS_WAIT_FOR_DISK``): a turn is resumed from what of it the database
    kept; its end waits (``trace_close``), and with it everything before it."""

    _idle: list[TurnDb] = []  # noqa: RUF012 - the process-wide pool, shared on purpose
    _lock = threading.Lock()
    MAX_IDLE = 256

    def __init__(self, name: str = "turn-db") -> None:
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name, initializer=commit_lazily,
                                           initargs=(not settings.DATABASE_STEPS_WAIT_FOR_DISK,))
        # Called (in the turn's loop) when a call's connection broke: the turn being run
        # hands itself back instead of failing (``TurnRun``).
        self.on_connection_lost: Callable[[str], bool] | None = None

    @classmethod
    def acquire(cls) -> TurnDb:
        with cls._lock:
            if cls._idle:
                return cls._idle.pop()
        return cls()

    def release(self) -> None:
        try:
            self.call(close_old_connections)
        except Exception:  # noqa: BLE001 - a thread whose connection misbehaves is retired
            logger.warning("could not release a turn's database connection", exc_info=True)
            self.close()
            return
        with self._lock:
            if len(self._idle) < self.MAX_IDLE:
                self._idle.append(self)
                return
        self.close()

    @classmethod
    def close_idle(cls) -> None:
        """Close every pooled thread and its connection (a worker's shutdown; tests)."""
        with cls._lock:
            idle, cls._idle = cls._idle, []
        for db in idle:
            db.close()

    def call(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        return self.executor.submit(releasing(fn), *args, **kwargs).result()

    async def __call__(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        # Pooled connections go back after each call: a turn waiting on its model holds none.
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self.executor,
                                              functools.partial(releasing(fn), *args, **kwargs))
        except ConnectionLost as exc:
            if self.on_connection_lost is None or not self.on_connection_lost(str(exc)):
                raise
            # Raised where the turn's code would take it for a failure of its own (the loop's
            # catch-all): the turn stops as a hand-back does, by cancellation.
            raise asyncio.CancelledError(CONNECTION_LOST_REASON) from exc

    def close(self) -> None:
        """Close the thread's connections and stop the thread."""
        try:
            self.executor.submit(connections.close_all).result(timeout=30)
        except Exception:  # noqa: BLE001 - a broken connection is closed by the server anyway
            logger.warning("could not close the turn's database connection", exc_info=True)
        finally:
            self.executor.shutdown(wait=True)


class _ThreadLoop:
    """A thread's event loop, closed when the thread ends (its thread-local goes with it),
    in that thread, so the channel layer closes its connections there. Were the loop itself
    left to the garbage collector, its close could come in a thread whose own loop is
    running, where it cannot run."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def __del__(self) -> None:
        loop = self.loop
        if loop.is_closed():
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop runs here: close it as usual, the layer's flush included
            loop.close()
        else:  # another loop runs in this thread: release this one's selector without running it
            type(loop).close(loop)


_thread_loops = threading.local()


def thread_loop_run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to its end in this thread's event loop, made on the thread's first turn
    and kept for its next ones. As ``asyncio.run``, what the coroutine left running is
    cancelled at its end; unlike it, the loop and what is bound to it (the channel layer's Redis
    connections) stay for the next turn."""
    held = getattr(_thread_loops, "held", None)
    if held is None or held.loop.is_closed():
        held = _thread_loops.held = _ThreadLoop()
    loop = held.loop
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(coroutine)
    finally:
        left = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for task in left:
            task.cancel()
        if left:
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        asyncio.set_event_loop(None)
