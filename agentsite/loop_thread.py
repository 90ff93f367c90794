"""An event loop in a thread of its own, for work of the process that outlives any request or
turn (its loop ends with it): started on first use and again in a child after a fork (a loop's
thread does not survive one). ``LoopThread(name).submit(coroutine)`` runs it there."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid = 0

    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop (started now when there is none in this process)."""
        with self._lock:
            if self._loop is None or self._pid != os.getpid() or self._loop.is_closed():
                self._loop, self._pid = asyncio.new_event_loop(), os.getpid()
                threading.Thread(target=self._loop.run_forever, name=self.name, daemon=True).start()
            return self._loop

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop())
