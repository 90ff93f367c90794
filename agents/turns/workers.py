"""The worker processes that run turns, and how each one says it is alive.

Every worker process that runs turns has an ``agents.TurnWorker`` row named after its Celery
node and its pid (``worker_name``: two processes of one host differ), the name its claims
record in ``Trace.worker``. A thread of the process renews the row's ``beat_at`` every
``TURN_WORKER_BEAT_S``; another runs the reaper every ``TURN_REAPER_INTERVAL_S`` and records
it in ``reaped_at``. So when a process dies, any other finds its running turns within
``TURN_WORKER_DEAD_AFTER_S`` and hands them back to be resumed; beat's reap every
``TURN_BEAT_REAP_S`` is the backstop for a pool whose every process is stuck.

Beats are written with each machine's clock and compared with another's: keep the clocks of
the machines in step (NTP), well within a second.

The threads start on Celery's worker signals (the process that runs the tasks: the worker
itself with the thread or solo pool, each child with prefork) and stop, removing the row, when
the process shuts down.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from celery import current_app
from celery.signals import (
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
)
from django.conf import settings
from django.db import connection
from django.db.models import Min, Q
from django.utils import timezone

from agents.models import TurnWorker
from agents.tools.mcp.watch import mcp_watch_start, mcp_watch_stop
from agents.turns.attachments import attachments_unsent_forget
from agents.turns.lifecycle import trace_hand_back
from agents.turns.reaper import trace_reap
from agentsite.db import connection_release
from traces.models import Trace

logger = logging.getLogger(__name__)

# Rows of processes silent this long are deleted (a process that comes back writes its row
# again); the reaper treats a missing row as a dead worker anyway.
FORGET_AFTER_S = 3600
FORGET_EVERY_S = 60
# A worker this far behind its beats is watched: the reaper wakes when it would count as dead.
LATE_BEATS = 1.5


def worker_name(hostname: str | None = None) -> str:
    """The name of this process's row and of its claims: its Celery node and its pid."""
    return f"{hostname or socket.gethostname()} pid {os.getpid()}"[:200]


# -- the rows -------------------------------------------------------------------------------------
def turn_worker_register(*, name: str, now: datetime | None = None) -> TurnWorker:
    """Write this process's row. A row of the same name is a process that died before it (the
    same node and pid after a restart, as in a container): the turns it still holds are handed
    back at once, since their claims read as this process's."""
    now = now or timezone.now()
    previous = TurnWorker.objects.filter(name=name).values_list("beat_at", flat=True).first()
    worker, _ = TurnWorker.objects.update_or_create(
        name=name, defaults={"pid": os.getpid(), "beat_at": now, "reaped_at": None,
                             "stopping_at": None})
    if previous is not None:
        held = Trace.objects.filter(status=Trace.Status.RUNNING, worker=name)
        for trace_id, attempt in held.values_list("pk", "attempts"):
            trace_hand_back(trace_id=trace_id, attempt=attempt, reason="worker_lost",
                            last_seen=previous, only=Q(worker=name), now=now)
    return worker


def turn_worker_beat(*, name: str, now: datetime | None = None) -> None:
    """Say this process is alive. A row that is gone (forgotten while the process was stopped,
    or deleted by hand) is written again."""
    now = now or timezone.now()
    if not TurnWorker.objects.filter(name=name).update(beat_at=now):
        turn_worker_register(name=name, now=now)


def turn_worker_reaped(*, name: str, now: datetime | None = None) -> None:
    TurnWorker.objects.filter(name=name).update(reaped_at=now or timezone.now())


def turn_worker_remove(*, name: str) -> None:
    """A process that stops cleanly takes its row with it: a turn it still held (it should
    hold none) is picked up by the next reap of any other process."""
    TurnWorker.objects.filter(name=name).delete()


def turn_workers_forget(*, now: datetime | None = None) -> int:
    before = (now or timezone.now()) - timedelta(seconds=FORGET_AFTER_S)
    deleted, _ = TurnWorker.objects.filter(beat_at__lt=before).delete()
    return deleted


def turn_worker_next_death(*, now: datetime | None = None) -> datetime | None:
    """When the earliest worker that has missed beats but is not yet dead will count as dead,
    so that the reaper can look then instead of up to an interval later."""
    now = now or timezone.now()
    dead_after = timedelta(seconds=settings.TURN_WORKER_DEAD_AFTER_S)
    late = (TurnWorker.objects
            .filter(beat_at__lt=now - timedelta(seconds=LATE_BEATS * settings.TURN_WORKER_BEAT_S),
                    beat_at__gte=now - dead_after)
            .aggregate(first=Min("beat_at"))["first"])
    return late + dead_after if late is not None else None


# -- the threads ----------------------------------------------------------------------------------
class TurnWorkerLife:
    """The beat and the reaper of one process, each in a daemon thread with its own database
    connection. A failure (the database down, locked, restarting) is logged and tried again at
    the next tick: the threads end only with ``stop``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.pid = os.getpid()
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(tick,), daemon=True,
                                         name=f"turn-worker-{tick.__name__.strip('_')}")
                        for tick in (self._beat, self._reap)]
        self.failing: dict[str, bool] = {}
        self.forgot_at = 0.0

    def start(self) -> None:
        """Register before the process takes its first task (a row of the same name is then
        a dead predecessor's, never this process's), and start the threads."""
        try:
            turn_worker_register(name=self.name)
        except Exception:  # noqa: BLE001 - the first beat that works writes the row
            logger.warning("turn worker %s: could not register", self.name, exc_info=True)
        finally:
            connection.close()  # the caller's thread keeps no connection of ours
        for thread in self.threads:
            thread.start()
        logger.info("turn worker %s: beating every %s s, reaping every %s s", self.name,
                    settings.TURN_WORKER_BEAT_S, settings.TURN_REAPER_INTERVAL_S)

    def stop(self, timeout: float = 5.0) -> None:
        self.stopping.set()
        for thread in self.threads:
            if thread.is_alive() and thread is not threading.current_thread():
                thread.join(timeout)
        try:
            turn_worker_remove(name=self.name)
        except Exception:  # noqa: BLE001 - the row then goes stale, with the same effect
            logger.warning("turn worker %s: could not remove its row", self.name, exc_info=True)

    def _run(self, tick: Callable[[], float]) -> None:
        # Workers that start together reap out of step.
        wait = random.uniform(0, settings.TURN_REAPER_INTERVAL_S) if tick == self._reap else 0.0  # noqa: S311
        try:
            while not self.stopping.wait(wait):
                started = time.monotonic()
                try:
                    wait = tick()
                    self._recovered(tick.__name__)
                    connection_release()  # a pooled connection goes back between ticks
                except Exception:  # noqa: BLE001 - logged; the next tick tries again
                    self._failed(tick.__name__)
                    connection.close()  # a broken connection is opened afresh next time
                    wait = settings.TURN_WORKER_BEAT_S
                wait = max(wait - (time.monotonic() - started), 0.0)
        finally:
            connection.close()

    def _beat(self) -> float:
        turn_worker_beat(name=self.name)  # writes the row if registering failed
        return settings.TURN_WORKER_BEAT_S

    def _reap(self) -> float:
        now = timezone.now()
        trace_reap(now=now)
        turn_worker_reaped(name=self.name, now=now)
        if time.monotonic() - self.forgot_at >= FORGET_EVERY_S:
            self.forgot_at = time.monotonic()
            turn_workers_forget(now=now)
            attachments_unsent_forget(now=now)
        wait = settings.TURN_REAPER_INTERVAL_S
        death = turn_worker_next_death()
        if death is not None:
            wait = min(wait, max((death - timezone.now()).total_seconds(), 0.0) + 0.05)
        return wait

    def _failed(self, what: str) -> None:
        # The traceback once, then a line per failure until it works again.
        logger.warning("turn worker %s: %s failed", self.name, what.strip("_"),
                       exc_info=not self.failing.get(what))
        self.failing[what] = True

    def _recovered(self, what: str) -> None:
        if self.failing.pop(what, False):
            logger.warning("turn worker %s: %s works again", self.name, what.strip("_"))


_life: TurnWorkerLife | None = None
_life_lock = threading.Lock()


def turn_worker_start(*, hostname: str | None) -> TurnWorkerLife:
    """Start this process's beat and reaper (and its listening to MCP servers), once per
    process."""
    global _life
    with _life_lock:
        if _life is None or _life.pid != os.getpid():
            _life = TurnWorkerLife(worker_name(hostname))
            _life.start()
            mcp_watch_start(_life.name)  # listens while this is the oldest worker alive
        return _life


def turn_worker_stop() -> None:
    global _life
    with _life_lock:
        life, _life = _life, None
    if life is not None and life.pid == os.getpid():
        mcp_watch_stop()
        life.stop()


def _consumes_turns(app: Any) -> bool:
    """A worker of the maintenance queue alone runs no turns (beat's reaps run there)."""
    return settings.CELERY_TASK_DEFAULT_QUEUE in app.amqp.queues.consume_from


@worker_process_init.connect
def _on_process_init(sender: Any = None, **kwargs: Any) -> None:
    """A prefork child (or the solo pool's worker), which runs the tasks itself."""
    if _consumes_turns(current_app):
        turn_worker_start(hostname=sender)


@worker_ready.connect
def _on_worker_ready(sender: Any = None, **kwargs: Any) -> None:
    """The worker itself, unless its pool runs the tasks in child processes (prefork)."""
    pool = getattr(sender, "pool", None)
    if type(pool).__module__ == "celery.concurrency.prefork":
        return
    if _consumes_turns(sender.app):
        turn_worker_start(hostname=sender.hostname)


@worker_shutdown.connect
@worker_process_shutdown.connect
def _on_shutdown(**kwargs: Any) -> None:
    turn_worker_stop()
