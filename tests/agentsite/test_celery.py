"""A real round trip: a task enqueued here runs in a worker process through the real broker."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
import redis

from agents.turns.lifecycle import turn_task_send
from agentsite.celery import SentTask, app
from agentsite.tasks import PROBE_KEY, health_probe

pytestmark = pytest.mark.worker


@pytest.mark.parametrize("queue", ["turns", "maintenance"])
def test_task_round_trip_through_each_queue(use_redis, celery_worker_process, queue):
    token = uuid.uuid4().hex
    health_probe.apply_async(args=[token, queue], queue=queue, routing_key=queue)
    client = redis.Redis.from_url(use_redis)
    deadline = time.monotonic() + 10
    value = None
    while time.monotonic() < deadline and value is None:
        value = client.get(PROBE_KEY.format(token=token))
        time.sleep(0.02)
    assert value == queue.encode()


def test_the_app_is_configured_for_late_acks_and_json(use_redis):
    assert app.conf.task_acks_late is True
    assert app.conf.task_reject_on_worker_lost is True
    assert app.conf.accept_content == ["json"] and app.conf.task_serializer == "json"
    assert {q.name for q in app.conf.task_queues} == {"turns", "maintenance"}
    assert app.amqp.router.route({}, "agentsite.tasks.health_probe")["queue"].name == "maintenance"


def test_a_turn_sent_from_a_thread_of_its_own_builds_no_result_backend_there(use_redis):
    """Every web request has a thread of its own: Celery's result class made the app's result
    backend in each (``agentsite.celery.SentTask``). The task still reaches the broker."""
    client = redis.Redis.from_url(use_redis)
    client.delete("turns")
    seen: dict[str, object] = {}

    def request() -> None:
        seen["sent"] = turn_task_send(trace_id=424242)
        seen["backend"] = getattr(app._local, "backend", None)  # Celery's per-thread slot

    thread = threading.Thread(target=request)
    thread.start()
    thread.join(10)
    assert seen == {"sent": True, "backend": None}
    assert SentTask("x").id == "x"
