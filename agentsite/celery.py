"""The Celery app: Redis broker, JSON only, late acks, and two queues.

* ``turns``       agent turns (long, mostly waiting on model APIs);
* ``maintenance`` housekeeping (health probes, the reaper, roll-ups).

Workers use the thread pool: a turn spends seconds waiting on a model, so one process carries
many turns at once (``CELERY_WORKER_CONCURRENCY``).

A worker survives a restart of Redis while it runs turns: importing this module mends a fault
of the Redis transport (``channel_closed_patch``), and the worker's ``Consumer`` reconnects
within a second of Redis's return.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import redis
from celery import Celery
from celery.worker.consumer import Consumer as CeleryConsumer
from django.conf import settings
from kombu import Connection, Exchange, Queue
from kombu.transport import redis as kombu_redis

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")

app = Celery("agentsite")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.task_queues = tuple(Queue(name, Exchange(name, type="direct"), routing_key=name) for name in ("turns", "maintenance"))
app.conf.task_default_queue = "turns"
app.conf.task_default_exchange = "turns"
app.conf.task_default_routing_key = "turns"
app.conf.task_routes = {
    "agentsite.tasks.*": {"queue": "maintenance", "routing_key": "maintenance"},
    "agents.turns.tasks.reap": {"queue": "maintenance", "routing_key": "maintenance"},
    "traces.tasks.*": {"queue": "maintenance", "routing_key": "maintenance"},
}
# Named, not imported: the task modules load once Django is set up.
app.autodiscover_tasks(["agentsite", "agents.turns", "traces"])


class SentTask:
    """What sending a task whose result nobody reads hands back (``send_task``'s ``result_cls``,
    with ``ignore_result``): its id. Celery's own result class asks for the app's result backend,
    which Celery makes once per thread, and in the web process every request has a thread of its
    own."""

    __slots__ = ("id", "ignored")

    def __init__(self, id: str) -> None:  # noqa: A002 - Celery passes it as ``id``
        self.id = id


# -- a worker survives a Redis restart ----------------------------------------------------------
class Consumer(CeleryConsumer):
    """The worker's consumer (``CELERY_WORKER_CONSUMER``): it tries to reconnect to a lost broker
    every ``BROKER_RECONNECT_MAX_S`` at most. Celery's own back-off (2, 4, 6 ... 30 s, with no
    setting) would leave turns sent during a Redis outage waiting up to 30 s after Redis came
    back."""

    def ensure_connected(self, conn: Connection) -> Connection:
        every = max(0.1, float(settings.BROKER_RECONNECT_MAX_S))
        conn.ensure_connection = functools.partial(  # type: ignore[method-assign]
            conn.ensure_connection, interval_start=min(every, 0.5), interval_step=0.5,
            interval_max=every)
        return super().ensure_connected(conn)


# Celery 5.7.0 closes the consumer's connection after ``Connection.collect()`` once the broker
# is lost (celery/celery#10242, for the reconnect hang of #9705). When Redis dies while a BRPOP
# is in flight and an acks_late task is unacknowledged, ``collect`` leaves the channel half
# closed (its ``close`` stops at the failed BRPOP read) and detaches the transport from its
# connection. The second ``close`` then restores the unacknowledged message through
# ``Channel._connparams``, which reads ``self.connection.client.hostname`` of ``None``: an
# AttributeError that no cleanup path expects, so the worker exits with "Unrecoverable error:
# AttributeError("'NoneType' object has no attribute 'hostname'")" (the symptom of
# celery/kombu#582). The task's ack after the reconnect, on the old channel, fails the same way.
# No release mends it (celery and kombu 5.7.0 are the newest; 5.6 has not the bug but has the
# hang). A channel that was closed (``connection`` None) or whose transport was detached has lost
# its broker: raising the connection error every caller already handles lets the worker
# reconnect, and log the ack it could not send.
def channel_closed_patch() -> None:
    """Make a Redis channel that lost its transport raise ``redis.ConnectionError`` instead of
    AttributeError. Idempotent."""
    original = kombu_redis.Channel._connparams
    if getattr(original, "agentsite_patched", False):
        return

    @functools.wraps(original)
    def _connparams(self: kombu_redis.Channel, asynchronous: bool = False) -> dict[str, Any]:
        if self.connection is None or self.connection.client is None:
            raise redis.ConnectionError("this channel's connection to the broker was closed")
        return original(self, asynchronous=asynchronous)

    _connparams.agentsite_patched = True  # type: ignore[attr-defined]
    kombu_redis.Channel._connparams = _connparams


channel_closed_patch()


# -- one Redis client per channel ---------------------------------------------------------------
class BrokerChannel(kombu_redis.Channel):
    """kombu's Redis channel, sending its commands (a task's publish, its ack) through one
    ``redis.Redis`` client kept per channel. kombu builds a new client for every command, and a
    client's construction copies its table of response callbacks: 2-3 % of a web process's and
    a worker's CPU, once per turn each. A client shares its channel's connection pool and takes a
    connection from it per command, so threads may share it (redis-py's own rule); a channel
    whose pool was replaced gets a new one."""

    _command_client: redis.Redis | None = None

    def _create_client(self, asynchronous: bool = False) -> redis.Redis:
        if asynchronous:
            return super()._create_client(asynchronous=True)
        client = self._command_client
        if client is None or client.connection_pool is not self.pool:
            client = self._command_client = super()._create_client()
        return client


class BrokerTransport(kombu_redis.Transport):
    """The Redis transport with ``BrokerChannel`` (``CELERY_BROKER_TRANSPORT``)."""

    Channel = BrokerChannel
