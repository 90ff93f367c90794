from __future__ import annotations

import redis
from celery import shared_task
from django.conf import settings

PROBE_KEY = "agentsite:health:probe:{token}"


@shared_task(name="agentsite.tasks.health_probe", ignore_result=True, acks_late=False)
def health_probe(token: str, queue: str) -> None:
    """Answer a deep health check: proves that a worker consumes ``queue``, not only that one
    is alive. The answer is a short-lived Redis key the health endpoint waits for."""
    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2)
    try:
        client.set(PROBE_KEY.format(token=token), queue, ex=60)
    finally:
        client.close()
