from __future__ import annotations

import logging
import time
from datetime import timedelta

import pytest
import redis
from django.urls import reverse
from django.utils import timezone

from agents.models import TurnWorker
from agents.turns.health import BEAT_TICK_KEY, beat_tick_record
from agents.turns.lifecycle import trace_claim
from agents.turns.services import turn_start
from agentsite.processes import free_port
from tests.helpers import wait_for
from tests.members import member_of


@pytest.mark.worker
def test_healthz_is_ok_with_database_redis_a_worker_its_reaper_and_beat(client, start_worker):
    from agentsite.celery import app

    process = start_worker()
    # what beat sends every 15 s, through the maintenance queue: its run is beat's tick
    redis.Redis.from_url(app.conf.broker_url).delete(BEAT_TICK_KEY)
    app.send_task("agents.turns.tasks.reap", queue="maintenance", routing_key="maintenance")
    wait_for(lambda: TurnWorker.objects.filter(reaped_at__isnull=False).exists(), timeout=10,
             what="the worker's reaper")
    wait_for(lambda: redis.Redis.from_url(app.conf.broker_url).get(BEAT_TICK_KEY), timeout=10,
             what="the reap beat sends")

    response = client.get(reverse("healthz"))
    body = response.json()
    assert response.status_code == 200, body
    assert body["status"] == "ok"
    checks = body["checks"]
    assert checks["database"]["ok"] and checks["redis"]["ok"]
    assert process.node in checks["worker"]["workers"]
    assert checks["reaper"]["ok"] and checks["reaper"]["last_run_s"] < 10
    assert (checks["workers"]["ok"], checks["workers"]["alive"]) == (True, 1)
    assert (checks["turns"]["ok"], checks["turns"]["stale"]) == (True, 0)
    assert checks["beat"]["ok"] and checks["beat"]["last_tick_s"] < 10
    assert response["Cache-Control"].startswith("max-age=0")


@pytest.mark.django_db(transaction=True)
def test_healthz_reports_the_reapers_last_run_the_workers_and_turns_stale_past_the_limit(
        client, use_redis, conversation, alice, sent_turns, settings):
    now = timezone.now()
    dead_after = settings.TURN_WORKER_DEAD_AFTER_S
    TurnWorker.objects.create(name="alive pid 1", beat_at=now, reaped_at=now - timedelta(seconds=1))
    TurnWorker.objects.create(name="dead pid 2", beat_at=now - timedelta(seconds=dead_after + 1),
                              reaped_at=now - timedelta(seconds=30))
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="What is 2 + 2?")
    trace_claim(trace_id=trace.pk, worker="dead pid 2")

    response = client.get(reverse("healthz"))
    checks = response.json()["checks"]
    assert response.status_code == 503
    assert checks["reaper"]["ok"] and 1 <= checks["reaper"]["last_run_s"] < 5
    assert checks["workers"] | {"latency_ms": 0} == {"ok": True, "alive": 1, "dead": 1, "latency_ms": 0}
    assert (checks["turns"]["ok"], checks["turns"]["stale"]) == (False, 1)
    assert "not resumed yet" in checks["turns"]["error"]

    # the reapers stopped: the newest run is older than a few intervals
    TurnWorker.objects.update(reaped_at=now - timedelta(seconds=60))
    reaper = client.get(reverse("healthz")).json()["checks"]["reaper"]
    assert (reaper["ok"], reaper["last_run_s"] >= 60) == (False, True)
    assert "No reaper has run for" in reaper["error"]


@pytest.mark.django_db
def test_healthz_notices_a_beat_that_stopped_ticking(client, use_redis, settings):
    client_redis = redis.Redis.from_url(use_redis)
    beat_tick_record()
    assert client.get(reverse("healthz")).json()["checks"]["beat"]["ok"] is True

    client_redis.set(BEAT_TICK_KEY, repr(time.time() - 4 * settings.TURN_BEAT_REAP_S))
    beat = client.get(reverse("healthz")).json()["checks"]["beat"]
    assert beat["ok"] is False and beat["last_tick_s"] >= 4 * settings.TURN_BEAT_REAP_S
    assert "is `celery beat` running?" in beat["error"]

    client_redis.delete(BEAT_TICK_KEY)
    beat = client.get(reverse("healthz")).json()["checks"]["beat"]
    assert (beat["ok"], beat["last_tick_s"]) == (False, None)


@pytest.mark.worker
def test_deep_healthz_sends_a_task_through_each_queue(client, db, use_redis, celery_worker_process):
    body = client.get(reverse("healthz") + "?deep=1").json()
    assert body["checks"]["queues"] == {"ok": True, "queues": ["turns", "maintenance"], "latency_ms": body["checks"]["queues"]["latency_ms"]}


def test_healthz_is_503_when_redis_is_down(client, db, settings):
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    response = client.get(reverse("healthz"))
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "error"
    assert body["checks"]["database"]["ok"] is True
    assert body["checks"]["redis"]["ok"] is False and "ConnectionError" in body["checks"]["redis"]["error"]
    assert body["checks"]["worker"]["ok"] is False
    # the turns' checks need the database and Redis: they say why they could not look
    assert body["checks"]["reaper"] == {"ok": False, "error": "Skipped: redis down.", "latency_ms": 0.0}


def test_healthz_is_503_without_a_worker(client, db, lonely_redis):
    body = client.get(reverse("healthz"))
    assert body.status_code == 503
    assert body.json()["checks"]["redis"]["ok"] is True
    assert body.json()["checks"]["worker"] == {"ok": False, "workers": [], "error": "No Celery worker answered a ping.", "latency_ms": body.json()["checks"]["worker"]["latency_ms"]}


def test_healthz_hides_error_details_in_production(client, db, settings):
    settings.DEBUG = False
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    body = client.get(reverse("healthz")).json()
    assert body["checks"]["redis"]["error"] == "ConnectionError"


def test_healthz_saying_not_yet_is_not_logged_as_an_error_and_other_errors_still_are(
        client, db, settings):
    # The dev runner asks /healthz until its own processes are up: five "ERROR … Service
    # Unavailable: /healthz" lines on every start said nothing. Other 5xx are still logged.
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    seen: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = seen.append
    django_logger = logging.getLogger("django")
    django_logger.addHandler(handler)
    try:
        assert client.get(reverse("healthz")).status_code == 503
        quiet = list(seen)
        logging.getLogger("django.request").error("Service Unavailable: %s", "/elsewhere",
                                                  extra={"status_code": 503})
    finally:
        django_logger.removeHandler(handler)
    assert quiet == []
    assert [r.getMessage() for r in seen] == ["Service Unavailable: /elsewhere"]
