"""The Celery app's mend of the Redis transport (``agentsite.celery.channel_closed_patch``),
against a Redis of the test's own that it kills."""

from __future__ import annotations

import contextlib
import logging
import signal
import time

from kombu import Connection, Consumer, Exchange, Queue

from agentsite.celery import BrokerChannel, BrokerTransport, app
from agentsite.processes import EmbeddedRedis, Printer, free_port


def test_a_channel_that_lost_redis_with_a_task_unacknowledged_fails_as_a_lost_connection(tmp_path, caplog):
    """What Celery 5.7's consumer does when Redis dies under it (``collect()``, then ``close()``)
    with a task unacknowledged and a BRPOP in flight: the close and the task's later ack fail as
    a lost connection (which the worker survives), not with kombu's AttributeError on a
    ``None`` client, which made the worker exit (``agentsite.celery.channel_closed_patch``)."""
    server = EmbeddedRedis(port=free_port(), data_dir=tmp_path / "redis")
    with open(tmp_path / "redis.log", "w") as log:
        server.start(Printer(log, color=False))
        try:
            server.wait_ready()
            conn = Connection(server.url)
            tasks = conn.default_channel
            turns = Queue("turns", Exchange("turns", type="direct"), routing_key="turns")
            received = []
            Consumer(tasks, queues=[turns], callbacks=[lambda body, message: received.append(message)]).consume()
            # the control channel (opened after, so closed first): an auto-delete fanout queue
            control = conn.channel()
            Consumer(control, queues=[Queue("control", Exchange("control", type="fanout"), auto_delete=True)],
                     callbacks=[lambda body, message: None]).consume()
            control.client.ping()
            with Connection(server.url) as producer:
                producer.Producer().publish({"task": 1}, exchange=turns.exchange, routing_key="turns", declare=[turns])
            deadline = time.monotonic() + 5
            while not received and time.monotonic() < deadline:
                with contextlib.suppress(TimeoutError):
                    conn.drain_events(timeout=0.2)
            assert len(received) == 1 and len(tasks.qos._delivered) == 1  # taken, not acknowledged
            tasks._brpop_start()  # the next BRPOP, in flight as the worker's event loop leaves it

            server.signal_group(signal.SIGKILL)
            server.wait(timeout=5)
            conn.collect(socket_timeout=1)
            assert not tasks.closed and tasks.connection.client is None  # half closed, detached

            conn.close()  # raised AttributeError: 'NoneType' object has no attribute 'hostname'
            caplog.clear()
            received[0].ack_log_error(logging.getLogger("test"), conn.connection_errors)
            assert "Couldn't ack" in caplog.text and "connection to the broker was closed" in caplog.text
        finally:
            server.stop(timeout=5)



def test_a_channel_sends_its_commands_through_one_client_and_a_new_one_after_its_pool_changed(tmp_path):
    """``agentsite.celery.BrokerChannel``: kombu built a Redis client for every publish and ack."""
    server = EmbeddedRedis(port=free_port(), data_dir=tmp_path / "redis")
    with open(tmp_path / "redis.log", "w") as log:
        server.start(Printer(log, color=False))
        try:
            server.wait_ready()
            turns = Queue("turns", Exchange("turns", type="direct"), routing_key="turns")
            with Connection(server.url, transport=BrokerTransport) as conn:
                channel = conn.default_channel
                assert isinstance(channel, BrokerChannel)
                producer = conn.Producer()
                for n in range(3):
                    producer.publish({"task": n}, exchange=turns.exchange, routing_key="turns", declare=[turns])
                first = channel._create_client()
                assert channel._create_client() is first
                assert channel._size("turns") == 3
                old_pool, channel._pool = channel._pool, None  # what a reconnect does
                second = channel._create_client()
                assert second is not first and second.connection_pool is channel.pool
                producer.publish({"task": 3}, exchange=turns.exchange, routing_key="turns")
                assert channel._size("turns") == 4
                old_pool.disconnect()
        finally:
            server.stop()


def test_the_site_sends_tasks_through_that_transport(settings):
    assert settings.CELERY_BROKER_TRANSPORT == "agentsite.celery:BrokerTransport"
    assert app.conf.broker_transport == settings.CELERY_BROKER_TRANSPORT
