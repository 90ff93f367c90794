"""The inspector's socket, through the full ASGI stack. (The chat's socket:
``tests/agents/chat/test_consumers.py``.)"""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from tests.helpers import announce_delta, communicator, session_cookie

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("close_thread_connections")]


async def test_team_member_receives_trace_events(alice, sample_trace):
    cookie = await sync_to_async(session_cookie)(alice)
    ws = communicator(f"/ws/traces/{sample_trace.uuid}/", cookie=cookie)
    assert (await ws.connect())[0]
    await announce_delta(sample_trace, text="Hel")
    event = await ws.receive_json_from(timeout=2)
    assert event == {"event": "delta", "trace": sample_trace.uuid.hex, "seq": sample_trace.event_seq, "step": 3, "index": 0, "offset": 0, "text": "Hel"}
    await ws.disconnect()


async def test_charlie_and_strangers_are_refused(charlie, sample_trace):
    cookie = await sync_to_async(session_cookie)(charlie)
    connected, code = await communicator(f"/ws/traces/{sample_trace.uuid}/", cookie=cookie).connect()
    assert not connected and code == 4403
    connected, code = await communicator(f"/ws/traces/{sample_trace.uuid}/").connect()
    assert not connected and code == 4403


async def test_foreign_origin_is_refused(alice, sample_trace):
    cookie = await sync_to_async(session_cookie)(alice)
    connected, _ = await communicator(f"/ws/traces/{sample_trace.uuid}/", cookie=cookie, origin="https://evil.example").connect()
    assert not connected
