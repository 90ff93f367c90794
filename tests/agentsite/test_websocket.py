"""Websockets through the whole ASGI stack of ``agentsite.asgi``: Origin check, session auth,
then the consumer's own team check."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from tests.helpers import communicator, session_cookie

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("close_thread_connections")]


async def test_member_connects_and_receives_team_events(alice, team_a):
    cookie = await sync_to_async(session_cookie)(alice)
    ws = communicator(f"/ws/team/{team_a.uuid}/", cookie=cookie)
    connected, _ = await ws.connect()
    assert connected
    await get_channel_layer().group_send(team_a.group_name, {"type": "team.event", "event": "members.changed", "data": {"user": 0}})
    assert await ws.receive_json_from(timeout=2) == {"event": "members.changed", "data": {"user": 0}}
    await ws.disconnect()


async def test_foreign_origin_is_refused(alice, team_a):
    cookie = await sync_to_async(session_cookie)(alice)
    ws = communicator(f"/ws/team/{team_a.uuid}/", cookie=cookie, origin="http://evil.example")
    connected, _ = await ws.connect()
    assert not connected


async def test_missing_origin_is_refused(alice, team_a):
    cookie = await sync_to_async(session_cookie)(alice)
    ws = communicator(f"/ws/team/{team_a.uuid}/", cookie=cookie, origin=None)
    connected, _ = await ws.connect()
    assert not connected


async def test_no_session_is_refused(team_a):
    ws = communicator(f"/ws/team/{team_a.uuid}/")
    connected, code = await ws.connect()
    assert not connected and code == 4403


async def test_charlie_is_refused_on_team_a(charlie, team_a):
    cookie = await sync_to_async(session_cookie)(charlie)
    ws = communicator(f"/ws/team/{team_a.uuid}/", cookie=cookie)
    connected, code = await ws.connect()
    assert not connected and code == 4403


async def test_a_removed_member_is_disconnected(alice, bob, team_a):
    from agentsite import services
    from agentsite.models import Membership

    cookie = await sync_to_async(session_cookie)(bob)
    ws = communicator(f"/ws/team/{team_a.uuid}/", cookie=cookie)
    assert (await ws.connect())[0]

    def remove() -> None:
        owner = Membership.objects.get(user=alice)
        services.membership_remove(actor=owner, membership=Membership.objects.get(user=bob))

    await sync_to_async(remove)()  # transaction=True: on_commit fires and announces the change
    output = await ws.receive_output(timeout=2)
    assert output == {"type": "websocket.close", "code": 4403}
