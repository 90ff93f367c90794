"""Maintenance of traces: the reaper, run by Celery beat on the ``maintenance`` queue."""

from __future__ import annotations

from celery import shared_task

from .services import trace_reap


@shared_task(name="traces.tasks.reap", ignore_result=True, acks_late=False)
def reap() -> dict[str, list[int]]:
    """End or resume traces whose worker died, and send queued traces nobody sent."""
    report = trace_reap()
    return {"interrupted": report.interrupted, "timed_out": report.timed_out,
            "requeued": report.requeued, "dispatched": report.dispatched}
