"""Open websockets follow access (``agentsite.live``): a removed member, a deactivated account,
a conversation made private close their sockets within a second, whether the notice arrives or
not; a change that keeps access keeps the socket. And the handshake itself: the Origin must be
the site's own scheme, host and port; a path no route serves is closed as a 404."""

from __future__ import annotations

import asyncio
import time

import pytest
from asgiref.sync import sync_to_async

from agents.chat.services import conversation_share
from agents.models import Conversation
from agentsite import services
from agentsite.consumers import CLOSE_FORBIDDEN, CLOSE_NOT_FOUND
from agentsite.models import Membership
from tests.helpers import announce_delta, communicator, session_cookie
from tests.members import member_of

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("close_thread_connections")]


async def _open(user, path: str):
    cookie = await sync_to_async(session_cookie)(user)
    ws = communicator(path, cookie=cookie)
    connected, code = await ws.connect()
    assert connected, code
    return ws


async def _closed_within(ws, seconds: float) -> float:
    """Seconds until the socket closed with CLOSE_FORBIDDEN (frames before it are skipped)."""
    started = time.monotonic()
    while True:
        output = await ws.receive_output(timeout=seconds)
        if output["type"] == "websocket.close":
            assert output["code"] == CLOSE_FORBIDDEN
            return time.monotonic() - started


@pytest.fixture
def bobs_trace(agent, bob):
    from traces.sample import make_sample_trace

    conversation = Conversation.objects.create(team=agent.team, agent=agent, created_by=bob, title="Bob's")
    return make_sample_trace(conversation=conversation, user=bob, steps=3)


def _remove(team_member, by) -> None:
    owner = Membership.objects.get(user=by)
    services.membership_remove(actor=owner, membership=Membership.objects.get(user=team_member))


async def test_removing_a_member_closes_their_conversation_and_trace_sockets_at_once(alice, bob, bobs_trace):
    chat = await _open(bob, f"/ws/conversations/{bobs_trace.conversation.uuid}/")
    inspector = await _open(bob, f"/ws/traces/{bobs_trace.uuid}/")
    await sync_to_async(_remove)(bob, alice)
    assert await _closed_within(chat, 1.0) < 1.0
    assert await _closed_within(inspector, 1.0) < 1.0
    # The next answer reaches nobody on those sockets.
    await announce_delta(bobs_trace, text="secret next answer")
    assert await chat.receive_nothing(timeout=0.2)


async def test_a_role_change_that_keeps_access_keeps_the_socket(alice, bob, bobs_trace):
    chat = await _open(bob, f"/ws/conversations/{bobs_trace.conversation.uuid}/")

    def demote() -> None:
        services.membership_change_role(actor=Membership.objects.get(user=alice),
                                        membership=Membership.objects.get(user=bob), role="viewer")

    await sync_to_async(demote)()
    await asyncio.sleep(0.2)  # the notice has been handled: the socket stayed open
    await announce_delta(bobs_trace, text="still here")
    assert "still here" in await chat.receive_from(timeout=2)
    await chat.disconnect()


async def test_a_silent_removal_is_caught_before_the_next_frame_a_second_later(alice, bob, bobs_trace):
    """A membership deleted by a queryset sends no signal; the periodic check catches it."""
    chat = await _open(bob, f"/ws/conversations/{bobs_trace.conversation.uuid}/")
    await sync_to_async(Membership.objects.filter(user=bob).delete)()
    await announce_delta(bobs_trace, text="within the second")  # at most ~1 s may still pass
    await asyncio.sleep(1.05)
    await announce_delta(bobs_trace, text="after the second")
    frames = []
    while True:
        output = await chat.receive_output(timeout=2)
        if output["type"] == "websocket.close":
            assert output["code"] == CLOSE_FORBIDDEN
            break
        frames.append(output.get("text", ""))
    assert not any("after the second" in frame for frame in frames)


async def test_deactivating_an_account_closes_its_sockets(bob, bobs_trace):
    chat = await _open(bob, f"/ws/conversations/{bobs_trace.conversation.uuid}/")

    def deactivate() -> None:
        bob.is_active = False
        bob.save(update_fields=["is_active"])

    await sync_to_async(deactivate)()
    assert await _closed_within(chat, 1.0) < 1.0


async def test_making_a_conversation_private_closes_teammates_sockets_but_not_the_owners(alice, bob, sample_trace):
    conversation = sample_trace.conversation
    await sync_to_async(Conversation.objects.filter(pk=conversation.pk).update)(shared=True)
    path = f"/ws/conversations/{conversation.uuid}/"
    teammate = await _open(bob, path)
    owner = await _open(alice, path)
    await sync_to_async(conversation_share)(conversation=await sync_to_async(Conversation.objects.get)(pk=conversation.pk),
                                            membership=await sync_to_async(member_of)(alice, conversation),
                                            shared=False)
    assert await _closed_within(teammate, 1.0) < 1.0
    await announce_delta(sample_trace, text="for the owner")
    assert "for the owner" in await owner.receive_from(timeout=2)
    await owner.disconnect()


async def test_an_unknown_path_is_closed_as_a_404(alice):
    cookie = await sync_to_async(session_cookie)(alice)
    for path in ("/ws/nowhere/", "/ws/traces/not-a-uuid/", "/"):
        connected, code = await communicator(path, cookie=cookie).connect()
        assert not connected and code == CLOSE_NOT_FOUND, path


@pytest.mark.parametrize("origin", [
    "http://localhost:9999",        # another local service's page
    "https://localhost:8000",       # another scheme
    "http://evil.localhost:8000",   # another host
    "null",                         # an opaque origin (sandboxed frame, file://)
    "http://localhost:8000.evil.example",
])
async def test_an_origin_other_than_the_sites_own_is_refused(alice, team_a, origin):
    cookie = await sync_to_async(session_cookie)(alice)
    connected, _ = await communicator(f"/ws/team/{team_a.uuid}/", cookie=cookie, origin=origin).connect()
    assert not connected


async def test_the_sites_own_origin_and_trusted_origins_are_accepted(alice, team_a, settings):
    cookie = await sync_to_async(session_cookie)(alice)
    ws = communicator(f"/ws/team/{team_a.uuid}/", cookie=cookie, origin="http://LOCALHOST:8000")
    assert (await ws.connect())[0]
    await ws.disconnect()
    settings.CSRF_TRUSTED_ORIGINS = ["https://agents.example.com"]
    ws = communicator(f"/ws/team/{team_a.uuid}/", cookie=cookie, origin="https://agents.example.com")
    assert (await ws.connect())[0]
    await ws.disconnect()
