"""The turns this process runs, and handing them back.

A worker that is told to stop (SIGTERM, Celery's warm shutdown) hands its running turns back
(``turns_hand_back``) instead of letting a later SIGKILL cut them off: each turn's recorder stops
recording, its task is cancelled, and its trace goes back to the queue, where another worker
continues it from its last recorded step (``execution.TurnRun.hand_back``). Nothing the
cancellation causes (a tool's "cancelled" result) is recorded, so the trace reads as if the
worker had simply stopped there."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class RunningTurn(Protocol):
    """What the registry needs of a running turn (``execution.TurnRun``)."""

    handed_back: bool
    ended: threading.Event

    def hand_back(self, reason: str) -> None: ...


class RunningTurns:
    """The turns this process runs, so that a worker asked to stop can hand them back. Once
    closed (the worker is stopping), a turn that starts is handed back at once."""

    def __init__(self) -> None:
        self._runs: set[RunningTurn] = set()
        self._lock = threading.Lock()
        self.closed_for = ""

    def add(self, run: RunningTurn) -> None:
        with self._lock:
            self._runs.add(run)
            reason = self.closed_for
        if reason:
            run.hand_back(reason)

    def discard(self, run: RunningTurn) -> None:
        with self._lock:
            self._runs.discard(run)

    def close(self, reason: str) -> list[RunningTurn]:
        with self._lock:
            self.closed_for = reason
            return list(self._runs)

    def reopen(self) -> None:
        with self._lock:
            self.closed_for = ""

    def __len__(self) -> int:
        with self._lock:
            return len(self._runs)


RUNNING = RunningTurns()


def turns_hand_back(*, reason: str = "handoff", wait_s: float = 10.0) -> int:
    """Hand every turn this process runs, and every turn it starts from now on, back to the
    queue to be continued elsewhere from its last recorded step (a worker that is stopping).
    Waits up to ``wait_s`` for them; returns how many were handed back by then. Any thread."""
    runs = RUNNING.close(reason)
    for run in runs:
        run.hand_back(reason)
    deadline = time.monotonic() + wait_s
    for run in runs:
        run.ended.wait(max(deadline - time.monotonic(), 0))
    return sum(run.handed_back for run in runs)


def turns_handing_back() -> str:
    """Why this process hands its turns back ("" while it runs them)."""
    return RUNNING.closed_for
