"""The channel layer (channels_redis's, with a group send in fewer round trips), on a real Redis:
members get what is sent, capacity and expiry hold, and an empty group costs one round trip."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync

from agentsite.channel_layer import RedisChannelLayer
from tests.helpers import work_counted


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
