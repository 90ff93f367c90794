"""The worker processes that run turns."""

from __future__ import annotations

from django.db import models


class TurnWorker(models.Model):
    """A worker process that runs turns, and when it last said it was alive. A running trace
    whose worker (``Trace.worker``, this ``name``) stopped beating is picked up by the reaper
    and resumed on another worker."""

    name = models.CharField(max_length=200, unique=True)
    pid = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField(auto_now_add=True)
    beat_at = models.DateTimeField(db_index=True)
    # When this process's reaper last ran (``/healthz`` reports the newest).
    reaped_at = models.DateTimeField(null=True, blank=True)
    # Set when the process began a warm shutdown (SIGTERM): its turns are handed back.
    stopping_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
