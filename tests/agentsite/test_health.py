from __future__ import annotations

import pytest
from django.urls import reverse

from agentsite.devrunner import free_port


@pytest.mark.worker
def test_healthz_is_ok_with_database_redis_and_a_worker(client, db, use_redis, celery_worker_process):
    response = client.get(reverse("healthz"))
    body = response.json()
    assert response.status_code == 200, body
    assert body["status"] == "ok"
    assert body["checks"]["database"]["ok"] and body["checks"]["redis"]["ok"]
    assert body["checks"]["worker"]["workers"] == [celery_worker_process] or celery_worker_process in body["checks"]["worker"]["workers"]
    assert response["Cache-Control"].startswith("max-age=0")


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
