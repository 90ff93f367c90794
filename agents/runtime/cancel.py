"""Cancellation of a running turn, seen at once in every state.

``CancelToken.cancel()`` may be called from the event loop running the turn or from any other
thread (a worker's signal listener). Work the loop waits on runs through ``guarded``, which
races it against the token and an optional timeout: when the token fires, the work is cancelled
(closing an HTTP stream, abandoning a tool) and ``TurnCancelled`` is raised without waiting
for work that ignores cancellation for longer than a short grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")

DEFAULT_REASON = "Cancelled by user."
# How long cancelled work may take to clean up (close its stream) before it is abandoned.
CLEANUP_GRACE_S = 0.25


class TurnCancelled(Exception):
    def __init__(self, reason: str = DEFAULT_REASON) -> None:
        super().__init__(reason)
        self.reason = reason


class StepTimedOut(TimeoutError):
    """The time allowed for one step (model call, tool, approval) ran out."""


class CancelToken:
    def __init__(self) -> None:
        self._reason: str | None = None
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._future: asyncio.Future[str] | None = None

    @property
    def cancelled(self) -> bool:
        return self._reason is not None

    @property
    def reason(self) -> str | None:
        return self._reason

    def cancel(self, reason: str = DEFAULT_REASON) -> None:
        """Request cancellation; idempotent (the first reason is kept), thread-safe."""
        with self._lock:
            if self._reason is not None:
                return
            self._reason = reason or DEFAULT_REASON
            loop, future = self._loop, self._future
        if future is None or loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._resolve()
        else:
            loop.call_soon_threadsafe(self._resolve)

    def raise_if_cancelled(self) -> None:
        if self._reason is not None:
            raise TurnCancelled(self._reason)

    async def wait(self) -> str:
        """Return the reason once the token is cancelled."""
        return await asyncio.shield(self._waiter())

    def _waiter(self) -> asyncio.Future[str]:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._future is None or self._loop is not loop:
                self._loop = loop
                self._future = loop.create_future()
            future = self._future
            reason = self._reason
        if reason is not None and not future.done():
            future.set_result(reason)
        return future

    def _resolve(self) -> None:
        future = self._future
        if future is not None and not future.done():
            future.set_result(self._reason or DEFAULT_REASON)


def _discard_outcome(task: asyncio.Future[object]) -> None:
    if not task.cancelled():
        task.exception()


async def guarded(aw: Awaitable[T], *, cancel: CancelToken | None = None,
                  limit_s: float | None = None) -> T:
    """Await ``aw`` unless ``cancel`` fires (``TurnCancelled``) or ``limit_s`` seconds pass
    (``StepTimedOut``). On either, the work is cancelled and given ``CLEANUP_GRACE_S`` to
    finish its cleanup; work that ignores cancellation is abandoned."""
    if cancel is not None and cancel.cancelled:
        if asyncio.iscoroutine(aw):  # never started: close it, or Python warns it was not awaited
            aw.close()
        cancel.raise_if_cancelled()
    if cancel is None and not limit_s:
        return await aw
    task = asyncio.ensure_future(aw)
    waiters: set[asyncio.Future[object]] = {task}
    token_future = cancel._waiter() if cancel is not None else None
    if token_future is not None:
        waiters.add(token_future)
    try:
        done, _ = await asyncio.wait(waiters, timeout=limit_s or None,
                                     return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if task in done:
        return task.result()
    await _stop(task)
    if cancel is not None and cancel.cancelled:
        raise TurnCancelled(cancel.reason or DEFAULT_REASON)
    raise StepTimedOut


async def _stop(task: asyncio.Future[object]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait({task}, timeout=CLEANUP_GRACE_S)
    if task.done():
        _discard_outcome(task)
    else:
        task.add_done_callback(_discard_outcome)
