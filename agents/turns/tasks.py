"""The turn task. Short on purpose: everything it does is in ``agents.execution``."""

from __future__ import annotations

import socket
from typing import Any

from celery import shared_task
from celery.signals import worker_shutdown

from agents.turns.execution import TurnDb, turn_execute


@shared_task(name="agents.turns.tasks.run_turn", bind=True, acks_late=True,
             reject_on_worker_lost=True, ignore_result=True)
def run_turn(self, trace_id: int) -> str:
    """Run the turn of trace ``trace_id``. A second delivery finds nothing to claim and returns."""
    return turn_execute(trace_id=int(trace_id), worker=self.request.hostname or socket.gethostname())


@worker_shutdown.connect
def _close_turn_connections(**kwargs: Any) -> None:
    TurnDb.close_idle()
