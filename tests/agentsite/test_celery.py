"""A real round trip: a task enqueued here runs in a worker process through the real broker."""

from __future__ import annotations

import time
import uuid

import pytest
import redis

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
    from agentsite.celery import app

    assert app.conf.task_acks_late is True
    assert app.conf.task_reject_on_worker_lost is True
    assert app.conf.accept_content == ["json"] and app.conf.task_serializer == "json"
    assert {q.name for q in app.conf.task_queues} == {"turns", "maintenance"}
    assert app.amqp.router.route({}, "agentsite.tasks.health_probe")["queue"].name == "maintenance"
