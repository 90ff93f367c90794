"""``/healthz``: is the database up, is Redis up, does at least one worker answer? And the
apps' own checks, named in ``settings.HEALTH_CHECKS`` (the turns: the reaper's last run, the
worker processes alive, turns stale past the limit, beat's last tick).

Each check returns ``{"ok": bool, "latency_ms": float, ...}``. The endpoint answers 200 only when
every check passes, 503 otherwise, so a load balancer or the dev runner can rely on the status.
``?deep=1`` also sends a probe task through each Celery queue and waits for a worker to run it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import redis
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.utils.module_loading import import_string
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from .celery import app as celery_app
from .tasks import PROBE_KEY, health_probe

QUEUES = ("turns", "maintenance")


def _timed(check: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        result = check()
    except Exception as exc:  # noqa: BLE001 - a health check reports every failure
        # The endpoint is public: details (hosts, ports) only in development.
        detail = f"{type(exc).__name__}: {exc}" if settings.DEBUG else type(exc).__name__
        result = {"ok": False, "error": detail}
    result["latency_ms"] = round((time.perf_counter() - started) * 1000, 2)
    return result


def check_database() -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return {"ok": True, "vendor": connection.vendor}


def _redis_client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1)


def check_redis() -> dict[str, Any]:
    client = _redis_client()
    try:
        client.ping()
    finally:
        client.close()
    return {"ok": True, "embedded": settings.REDIS_IS_EMBEDDED}


def check_workers(timeout: float = 1.0) -> dict[str, Any]:
    # limit=1: answer as soon as one worker replies instead of waiting out the timeout.
    replies = celery_app.control.ping(timeout=timeout, limit=1) or []
    workers = sorted(name for reply in replies for name in reply)
    if not workers:
        return {"ok": False, "workers": [], "error": "No Celery worker answered a ping."}
    return {"ok": True, "workers": workers}


def check_queues(timeout: float = 3.0) -> dict[str, Any]:
    """Send a probe through every queue and wait for workers to answer it."""
    tokens = {queue: uuid.uuid4().hex for queue in QUEUES}
    for queue, token in tokens.items():
        health_probe.apply_async(args=[token, queue], queue=queue, routing_key=queue, expires=timeout)
    client = _redis_client()
    pending = dict(tokens)
    deadline = time.monotonic() + timeout
    try:
        while pending and time.monotonic() < deadline:
            for queue, token in list(pending.items()):
                if client.get(PROBE_KEY.format(token=token)) is not None:
                    del pending[queue]
            if pending:
                time.sleep(0.05)
    finally:
        client.close()
    if pending:
        return {"ok": False, "error": f"No worker took a task from: {', '.join(sorted(pending))}."}
    return {"ok": True, "queues": list(QUEUES)}


def run_checks(*, deep: bool = False) -> dict[str, Any]:
    checks = {"database": _timed(check_database), "redis": _timed(check_redis)}
    if checks["redis"]["ok"]:
        checks["worker"] = _timed(check_workers)
        if deep and checks["worker"]["ok"]:
            checks["queues"] = _timed(check_queues)
    else:
        checks["worker"] = {"ok": False, "error": "Skipped: Redis (the broker) is down.", "latency_ms": 0.0}
    # The apps' checks read the database and Redis: without them, they have nothing to say.
    down = [name for name in ("database", "redis") if not checks[name]["ok"]]
    for name, path in settings.HEALTH_CHECKS.items():
        checks[name] = ({"ok": False, "error": f"Skipped: {' and '.join(down)} down.", "latency_ms": 0.0}
                        if down else _timed(import_string(path)))
    return {"status": "ok" if all(c["ok"] for c in checks.values()) else "error", "checks": checks}


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    report = run_checks(deep=request.GET.get("deep") in {"1", "true", "yes"})
    return JsonResponse(report, status=200 if report["status"] == "ok" else 503)
