"""The turn task and the reaper. Short on purpose: what they do is in ``agents.turns.execution``
and ``agents.turns.reaper``. Each is also registered under the name it had before the turns had
a room of their own, so tasks already queued under the old name still run.

A worker told to stop (SIGTERM: Celery's warm shutdown) hands its running turns back to the queue
at once when ``TURN_SHUTDOWN`` is "handoff" (the default), so that another worker continues them;
with "wait" it lets them finish, as Celery's warm shutdown does by itself."""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery import shared_task
from celery.exceptions import Reject
from celery.signals import beat_init, worker_shutdown, worker_shutting_down
from django.conf import settings
from django.db import connections
from django.utils import timezone

from agents.models import TurnWorker
from agents.tools.mcp import mcp_servers_stop
from agents.turns.execution import turn_execute
from agents.turns.health import beat_tick_record
from agents.turns.reaper import trace_reap
from agents.turns.running import RUNNING, turns_hand_back, turns_handing_back
from agents.turns.turn_threads import TurnDb
from agents.turns.workers import worker_name

logger = logging.getLogger(__name__)

TURN_OPTIONS: dict[str, Any] = {"bind": True, "acks_late": True, "reject_on_worker_lost": True,
                                "ignore_result": True}


def _turn_run(self: Any, trace_id: int) -> str:
    """Run the turn of trace ``trace_id``. A second delivery finds nothing to claim and returns.
    The claim records this process's name, the one it beats under (``agents.turns.workers``)."""
    if turns_handing_back():
        # This worker is stopping: the message goes back to the queue for another one.
        raise Reject("this worker is stopping", requeue=True)
    return turn_execute(trace_id=int(trace_id), worker=worker_name(self.request.hostname))


def _reap() -> dict[str, list[int]]:
    """End or resume traces whose worker died, and send queued traces nobody sent. Beat sends
    it: that it ran is beat's tick, which ``/healthz`` reports."""
    beat_tick_record()
    report = trace_reap()
    return {"interrupted": report.interrupted, "timed_out": report.timed_out,
            "requeued": report.requeued, "dispatched": report.dispatched}


turn_run = shared_task(name="agents.turns.tasks.turn_run", **TURN_OPTIONS)(_turn_run)
reap = shared_task(name="agents.turns.tasks.reap", ignore_result=True, acks_late=False)(_reap)
# The names of earlier releases, for tasks already in the queue.
turn_run_legacy = shared_task(name="agents.tasks.run_turn", **TURN_OPTIONS)(_turn_run)
reap_legacy = shared_task(name="traces.tasks.reap", ignore_result=True, acks_late=False)(_reap)


@worker_shutdown.connect
def _close_turn_connections(**kwargs: Any) -> None:
    TurnDb.close_idle()
    mcp_servers_stop()


@beat_init.connect
def _beat_started(**kwargs: Any) -> None:
    """Beat's first tick is its start: ``/healthz`` knows it is up before its first reap."""
    beat_tick_record()


@worker_shutting_down.connect
def _hand_turns_back(sender: Any = None, **kwargs: Any) -> None:
    # Runs inside the main thread's signal handler, which may have interrupted anything (a
    # query on the main thread's connection, a held logging lock): the work goes to a thread.
    threading.Thread(target=worker_stopping, kwargs={"name": str(sender or "")},
                     name="turns-hand-back").start()


def worker_stopping(*, name: str) -> int:
    """A worker's warm shutdown: hand its running turns back (``TURN_SHUTDOWN`` "handoff", the
    default) or leave them to finish ("wait"), and note it on its ``TurnWorker`` row. Returns
    how many turns were handed back."""
    mode = settings.TURN_SHUTDOWN
    if mode not in ("handoff", "wait"):
        logger.warning("TURN_SHUTDOWN=%r is neither 'handoff' nor 'wait'; handing turns back", mode)
    running, handed = len(RUNNING), 0
    if mode == "wait":
        logger.info("worker stopping: waiting for %s running turns to finish", running)
    else:
        handed = turns_hand_back(reason="handoff")
        logger.info("worker stopping: handed %s of %s running turns back to the queue", handed, running)
    try:
        if name:
            TurnWorker.objects.filter(name=worker_name(name)).update(stopping_at=timezone.now())
    except Exception:  # noqa: BLE001 - the row is a report; the turns are what matter
        logger.warning("could not mark worker %s as stopping", name, exc_info=True)
    finally:
        connections.close_all()
    return handed
