"""The traces' beat tasks: the export's catch-up (``traces.export.delivery``)."""

from __future__ import annotations

from celery import shared_task

from traces.export.delivery import catch_up


@shared_task(name="traces.tasks.export_catch_up", ignore_result=True, acks_late=False)
def export_catch_up() -> dict[str, int]:
    """Send the ended turns the receivers have not accepted yet."""
    return catch_up()
