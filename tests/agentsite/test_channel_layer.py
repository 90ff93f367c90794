"""The channel layer (channels_redis's, with a group send in fewer round trips), on a real Redis:
members get what is sent, capacity and expiry hold, and an empty group costs one round trip."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from contextlib import contextmanager

import pytest
from asgiref.sync import async_to_sync
from channels.layers import channel_layers
from django.urls import reverse

from agents.api.turn_stream import trace_listening
from agentsite import channel_layer
from agentsite.channel_layer import RedisChannelLayer
from agentsite.processes import EmbeddedRedis, Printer, free_port
from tests.helpers import communicator, session_cookie, work_counted
from traces.models import Trace


@pytest.fixture
def layer(redis_url):
    return RedisChannelLayer(hosts=[redis_url], capacity=3, expiry=60, prefix="asgi-test")


def test_members_get_what_is_sent_and_a_full_channel_drops_the_rest(layer):
    async def go():
        first, second = await layer.new_channel(), await layer.new_channel()
        await layer.group_add("g1", first)
        await layer.group_add("g1", second)
        for n in range(5):
            await layer.group_send("g1", {"type": "live.event", "n": n})
        got = [(await layer.receive(first))["n"] for _ in range(3)]
        also = (await layer.receive(second))["n"]
        await layer.group_discard("g1", first)
        await layer.group_discard("g1", second)
        await layer.flush()
        return got, also

    got, also = async_to_sync(go)()
    assert got == [0, 1, 2] and also == 0  # capacity 3: the last two were dropped


def test_a_send_to_an_empty_group_is_one_round_trip_and_to_a_member_two(layer):
    async def go():
        await layer.group_send("nobody-here", {"type": "live.event"})  # the connection is made
        with work_counted() as empty:
            await layer.group_send("nobody-here", {"type": "live.event"})
        channel = await layer.new_channel()
        await layer.group_add("g2", channel)
        with work_counted() as watched:
            await layer.group_send("g2", {"type": "live.event", "n": 1})
        message = await layer.receive(channel)
        await layer.flush()
        return empty.redis, watched.redis, message

    empty, watched, message = async_to_sync(go)()
    assert (empty, watched) == (1, 2) and message["n"] == 1


# -- a Redis that hangs (stopped, not dead) -------------------------------------------------------
@pytest.fixture
def freezable_redis(tmp_path):
    """An embedded Redis of this test's own, and a way to freeze it (SIGSTOP) and thaw it."""
    server = EmbeddedRedis(port=free_port(), data_dir=tmp_path / "redis")
    with open(tmp_path / "redis.log", "w") as log:
        server.start(Printer(log, color=False))
        server.wait_ready()

        @contextmanager
        def frozen():
            os.kill(server.proc.pid, signal.SIGSTOP)
            try:
                yield
            finally:
                os.kill(server.proc.pid, signal.SIGCONT)

        try:
            yield server.url, frozen
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
            server.stop(timeout=5)


@pytest.fixture
def fresh_stall_state(monkeypatch):
    """No earlier test's timeouts count against this one."""
    monkeypatch.setattr(channel_layer, "_stalled_until", 0.0)
    monkeypatch.setattr(channel_layer, "_last_timeout", float("-inf"))


# A send that would wait for a hung Redis forever fails the test here instead of hanging it.
@pytest.mark.timeout(60)
def test_a_hung_redis_makes_sends_give_up_then_skip_it(freezable_redis, settings, monkeypatch,
                                                       fresh_stall_state):
    url, frozen = freezable_redis
    settings.CHANNEL_LAYER_SEND_TIMEOUT_S = 0.5
    monkeypatch.setattr(channel_layer, "STALL_SKIP_S", 1.0)
    layer = RedisChannelLayer(hosts=[url], prefix="asgi-frozen")

    async def send(group):
        try:
            await layer.group_send(group, {"type": "live.event"})
            return "sent"
        except channel_layer.LayerUnavailable as exc:
            return "skipped" if "skipped" in str(exc) else "gave up"

    async def go():
        results = [await send("before")]  # connected while Redis answers
        with frozen():
            results.append(await send("during"))  # waits out the deadline
            results.append(await send("during"))  # again: Redis hangs
            results.append(await send("during"))  # not tried at all
        await asyncio.sleep(1.1)
        results.append(await send("after"))  # thawed: tried again, gets through
        await layer.flush()
        return results

    assert async_to_sync(go)() == ["sent", "gave up", "gave up", "skipped", "sent"]


@pytest.mark.timeout(60)
@pytest.mark.django_db
def test_a_message_sent_while_redis_hangs_is_stored_and_answered(
        freezable_redis, settings, client_for, alice, conversation, sent_turns, caplog,
        django_capture_on_commit_callbacks, fresh_stall_state):
    url, frozen = freezable_redis
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "agentsite.channel_layer.RedisChannelLayer",
                                           "CONFIG": {"hosts": [url]}}}
    channel_layers.backends.clear()
    client = client_for(alice)
    try:
        with frozen(), caplog.at_level(logging.WARNING):
            with django_capture_on_commit_callbacks(execute=True):
                response = client.post(reverse("message_send", args=[conversation.uuid]),
                                       {"text": "still there?"}, HTTP_HX_REQUEST="true")
    finally:
        channel_layers.backends.clear()
    assert response.status_code == 200
    trace = Trace.objects.get()
    assert trace.user_message.text == "still there?" and sent_turns == [trace.pk]
    # its announcement was given up, not waited for
    assert any("could not announce" in r.getMessage() and r.exc_info
               and isinstance(r.exc_info[1], channel_layer.LayerUnavailable) for r in caplog.records)


@pytest.mark.timeout(60)
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("close_thread_connections")
def test_while_redis_hangs_a_socket_is_refused_to_retry_and_a_request_reads_the_database(
        freezable_redis, settings, alice, sample_trace, fresh_stall_state):
    # Joining a group has the send's deadline: the page's socket is refused with "try again
    # later" (it reconnects and re-syncs) instead of hanging, and a request following a turn
    # is told to read the database instead of listening.
    url, frozen = freezable_redis
    settings.CHANNEL_LAYER_SEND_TIMEOUT_S = 0.5
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "agentsite.channel_layer.RedisChannelLayer",
                                           "CONFIG": {"hosts": [url]}}}
    channel_layers.backends.clear()
    cookie = session_cookie(alice)

    async def go():
        ws = communicator(f"/ws/traces/{sample_trace.uuid}/", cookie=cookie)
        assert (await ws.connect())[0]  # connected while Redis answers
        await ws.disconnect()
        with frozen():
            refused = await communicator(f"/ws/traces/{sample_trace.uuid}/", cookie=cookie).connect(timeout=5)
            async with trace_listening(sample_trace.uuid) as listener:
                listening = listener.layer
        return refused, listening

    try:
        refused, listening = async_to_sync(go)()
    finally:
        channel_layers.backends.clear()
    assert refused == (False, 1013) and listening is None
