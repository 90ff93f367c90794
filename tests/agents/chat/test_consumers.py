"""The chat's socket, through the full ASGI stack: the same events as the inspector's, deltas
as bare text, and only for the conversation's team."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from agents.chat.live import groups_for
from tests.helpers import announce_delta, communicator, session_cookie
from traces.record import live

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("close_thread_connections")]


async def test_conversation_socket_gets_the_same_events(alice, sample_trace):
    cookie = await sync_to_async(session_cookie)(alice)
    ws = communicator(f"/ws/conversations/{sample_trace.conversation.uuid}/", cookie=cookie)
    assert (await ws.connect())[0]

    def first_step():
        step = sample_trace.steps.get(seq=1)
        step.trace = sample_trace
        return step

    step = await sync_to_async(first_step)()
    payload = await sync_to_async(live.step_payload)(step)
    await live.publish(groups_for(sample_trace), payload)
    event = await ws.receive_json_from(timeout=2)
    assert event["event"] == "step" and event["id"] == "step-1" and 'id="step-1"' in event["html"]
    await ws.disconnect()


async def test_charlie_and_strangers_are_refused(charlie, sample_trace):
    cookie = await sync_to_async(session_cookie)(charlie)
    connected, code = await communicator(f"/ws/conversations/{sample_trace.conversation.uuid}/", cookie=cookie).connect()
    assert not connected and code == 4403
    connected, code = await communicator(f"/ws/conversations/{sample_trace.conversation.uuid}/").connect()
    assert not connected and code == 4403


async def test_foreign_origin_is_refused(alice, sample_trace):
    cookie = await sync_to_async(session_cookie)(alice)
    connected, _ = await communicator(f"/ws/conversations/{sample_trace.conversation.uuid}/", cookie=cookie, origin="https://evil.example").connect()
    assert not connected


async def test_the_chat_receives_deltas_as_bare_text_and_everything_else_as_json(alice, sample_trace):
    cookie = await sync_to_async(session_cookie)(alice)
    ws = communicator(f"/ws/conversations/{sample_trace.conversation.uuid}/", cookie=cookie)
    assert (await ws.connect())[0]
    await announce_delta(sample_trace, text='Hel "lo"\n')
    assert await ws.receive_from(timeout=2) == '~3|0|Hel "lo"\n'
    await live.publish([live.conversation_group(sample_trace.conversation.uuid)], {"event": "trace", "status": "running"})
    assert await ws.receive_json_from(timeout=2) == {"event": "trace", "status": "running"}
    await ws.disconnect()
