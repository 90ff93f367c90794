"""The turn task and the reaper. Short on purpose: what they do is in ``agents.turns.execution``
and ``agents.turns.reaper``. Each is also registered under the name it had before the turns had
a room of their own, so tasks already queued under the old name still run."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from celery.signals import beat_init, worker_shutdown

from agents.turns.execution import TurnDb, turn_execute
from agents.turns.health import beat_tick_record
from agents.turns.reaper import trace_reap
from agents.turns.workers import worker_name

TURN_OPTIONS: dict[str, Any] = {"bind": True, "acks_late": True, "reject_on_worker_lost": True,
                                "ignore_result": True}


def _turn_run(self: Any, trace_id: int) -> str:
    """Run the turn of trace ``trace_id``. A second delivery finds nothing to claim and returns.
    The claim records this process's name, the one it beats under (``agents.turns.workers``)."""
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


@beat_init.connect
def _beat_started(**kwargs: Any) -> None:
    """Beat's first tick is its start: ``/healthz`` knows it is up before its first reap."""
    beat_tick_record()
