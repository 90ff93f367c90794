"""The inspector's and the chat's sockets, through the full ASGI stack."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from agents.chat.live import groups_for
from tests.agentsite.test_websocket import communicator, session_cookie
from traces import live

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
async def _close_thread_connections():
    """Database work of these tests runs on sync_to_async's helper thread; close its
    connection afterwards, or PostgreSQL refuses to drop the test database."""
    yield
    from django.db import connections

    await sync_to_async(connections.close_all)()


async def test_team_member_receives_trace_events(alice, sample_trace):
    cookie = await sync_to_async(session_cookie)(alice)
    ws = communicator(f"/ws/traces/{sample_trace.uuid}/", cookie=cookie)
    assert (await ws.connect())[0]
    await text_delta(sample_trace, text="Hel")
    event = await ws.receive_json_from(timeout=2)
    assert event == {"event": "delta", "trace": sample_trace.uuid.hex, "seq": sample_trace.event_seq, "step": 3, "index": 0, "text": "Hel"}
    await ws.disconnect()


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


@pytest.mark.parametrize("kind", ["traces", "conversations"])
async def test_charlie_and_strangers_are_refused(charlie, sample_trace, kind):
    target = sample_trace.uuid if kind == "traces" else sample_trace.conversation.uuid
    cookie = await sync_to_async(session_cookie)(charlie)
    connected, code = await communicator(f"/ws/{kind}/{target}/", cookie=cookie).connect()
    assert not connected and code == 4403
    connected, code = await communicator(f"/ws/{kind}/{target}/").connect()
    assert not connected and code == 4403


@pytest.mark.parametrize("kind", ["traces", "conversations"])
async def test_foreign_origin_is_refused(alice, sample_trace, kind):
    target = sample_trace.uuid if kind == "traces" else sample_trace.conversation.uuid
    cookie = await sync_to_async(session_cookie)(alice)
    connected, _ = await communicator(f"/ws/{kind}/{target}/", cookie=cookie, origin="https://evil.example").connect()
    assert not connected


async def test_the_chat_receives_deltas_as_bare_text_and_everything_else_as_json(alice, sample_trace):
    cookie = await sync_to_async(session_cookie)(alice)
    ws = communicator(f"/ws/conversations/{sample_trace.conversation.uuid}/", cookie=cookie)
    assert (await ws.connect())[0]
    await text_delta(sample_trace, text='Hel "lo"\n')
    assert await ws.receive_from(timeout=2) == '~3|Hel "lo"\n'
    await live.publish([live.conversation_group(sample_trace.conversation.uuid)], {"event": "trace", "status": "running"})
    assert await ws.receive_json_from(timeout=2) == {"event": "trace", "status": "running"}
    await ws.disconnect()


async def text_delta(trace, *, text: str) -> None:
    """A model's text delta as a running turn announces it (``TraceRecorder.announce_delta``)."""
    payload = live.delta_payload(trace_uuid=trace.uuid, seq=trace.event_seq, step=3, index=0, text=text)
    await live.publish(groups_for(trace), payload)
