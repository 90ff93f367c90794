"""A request waiting for a turn's answer (a non-streamed completion, a send with ``wait``) is
woken by the turn's end signal, not by following every event of the turn, and still gets the
answer from the database when the signal never comes."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync

from agents.api import turn_stream
from agents.turns.services import turn_start
from agents.turns.signals import ENDED_KEY, _client
from agents.turns.tasks import turn_run
from agentsite.api_keys import api_key_create
from tests.members import member_of
from traces.models import Trace
from traces.record.live import uuid_hex

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def api_trace(conversation, alice, team_a, sent_turns):
    """A turn sent through an API key (only those signal their end), not yet run."""
    key, _ = api_key_create(membership=member_of(alice, team_a), name="ci", scopes=["chat"])
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="Hello")
    Trace.objects.filter(pk=trace.pk).update(api_key=key)
    trace.api_key_id = key.pk
    return trace


def wait(trace: Trace, **options) -> Trace:
    async def go() -> Trace:
        return await asyncio.wait_for(turn_stream.turn_wait(trace, timeout_s=60, **options), 20)

    return async_to_sync(go)()


def test_the_end_signal_wakes_the_request_at_once(api_trace, use_redis, monkeypatch, django_assert_num_queries):
    monkeypatch.setattr(turn_stream, "END_WAIT_S", 3600.0)  # only the signal can wake it in time
    assert turn_run(api_trace.pk) == "completed"
    key = ENDED_KEY.format(trace=uuid_hex(api_trace.uuid))
    assert _client(use_redis).llen(key) == 1  # the worker said so
    with django_assert_num_queries(1):  # the trace, read once the signal came
        ended = wait(api_trace, fresh=True)
    assert ended.status == "completed" and ended.answer
    assert _client(use_redis).llen(key) == 0


def test_without_the_signal_the_request_reads_the_trace(api_trace, settings, monkeypatch):
    settings.REDIS_URL = "redis://127.0.0.1:9/0"  # nothing listens there
    monkeypatch.setattr(turn_stream, "END_WAIT_S", 0.2)
    assert turn_run(api_trace.pk) == "completed"  # its end signal is lost
    assert wait(api_trace, fresh=True).status == "completed"
