"""What ``/healthz`` reports of the turns (named in ``settings.HEALTH_CHECKS``): the reapers'
last run, the worker processes alive, running turns nobody runs any more, and beat's last tick.

Each check returns ``{"ok": bool, ...}`` like the platform's own checks.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta
from typing import Any

import redis
from django.conf import settings
from django.db.models import Count, Max, Q
from django.utils import timezone

from agents.models import TurnWorker
from agents.turns.reaper import Silence, traces_lost

logger = logging.getLogger(__name__)

BEAT_TICK_KEY = "agentsite:turns:beat-tick"
# Late by this many of their intervals, the reapers or beat are reported down.
LATE_INTERVALS = 5
BEAT_LATE_INTERVALS = 3


def _redis() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1)


def beat_tick_record() -> None:
    """Beat is alive: it started, or the reap it sends ran. Never raises: a reap runs whether
    or not Redis takes the note."""
    client = _redis()
    try:
        client.set(BEAT_TICK_KEY, repr(time.time()))
    except redis.RedisError:
        logger.warning("could not record beat's tick in Redis", exc_info=True)
    finally:
        client.close()


def _age(moment: datetime, now: datetime) -> float:
    return round(max((now - moment).total_seconds(), 0.0), 1)


def check_reaper(now: datetime | None = None) -> dict[str, Any]:
    """Every worker process reaps every ``TURN_REAPER_INTERVAL_S``: the newest run is recent."""
    now = now or timezone.now()
    limit = LATE_INTERVALS * settings.TURN_REAPER_INTERVAL_S
    last = TurnWorker.objects.aggregate(last=Max("reaped_at"))["last"]
    if last is None:
        return {"ok": False, "last_run_s": None, "limit_s": limit,
                "error": "No worker process has run the reaper."}
    age = _age(last, now)
    result = {"ok": age <= limit, "last_run_s": age, "limit_s": limit}
    if not result["ok"]:
        result["error"] = f"No reaper has run for {age:g} s: the turns of a worker that dies stay stuck."
    return result


def check_workers(now: datetime | None = None) -> dict[str, Any]:
    """The worker processes that beat (``alive``), and those silent long enough to count as
    dead whose rows are not yet forgotten (``dead``)."""
    now = now or timezone.now()
    dead_before = now - timedelta(seconds=settings.TURN_WORKER_DEAD_AFTER_S)
    counts = TurnWorker.objects.aggregate(alive=Count("pk", filter=Q(beat_at__gte=dead_before)),
                                          dead=Count("pk", filter=Q(beat_at__lt=dead_before)))
    result = {"ok": counts["alive"] > 0, **counts}
    if not result["ok"]:
        result["error"] = "No worker process that runs turns is alive."
    return result


def check_turns(now: datetime | None = None) -> dict[str, Any]:
    """Running turns whose worker stopped beating or whose heartbeat went stale: the reaper
    hands them back within an interval; any that stay mean it does not."""
    stale = traces_lost(Silence.at(now or timezone.now())).count()
    result = {"ok": stale == 0, "stale": stale}
    if stale:
        result["error"] = f"{stale} running turn(s) whose worker stopped are not resumed yet."
    return result


def check_beat(now: float | None = None) -> dict[str, Any]:
    """Beat's last tick (its start, or the last reap it sent that ran): beat sends the reap
    every ``TURN_BEAT_REAP_S``."""
    limit = BEAT_LATE_INTERVALS * settings.TURN_BEAT_REAP_S
    client = _redis()
    try:
        tick = client.get(BEAT_TICK_KEY)
    finally:
        client.close()
    if tick is None:
        return {"ok": False, "last_tick_s": None, "limit_s": limit,
                "error": "Beat has not ticked since Redis started: is `celery beat` running?"}
    age = round(max((now or time.time()) - float(tick), 0.0), 1)
    result = {"ok": age <= limit, "last_tick_s": age, "limit_s": limit}
    if not result["ok"]:
        result["error"] = f"Beat has not ticked for {age:g} s: is `celery beat` running?"
    return result
