"""A person's lists (the chat's sidebar, the home page's conversations, turns and spend) stay
live: what changes them is announced to the person's sockets (``lists.changed``), and a page
reads them again on that and whenever its socket opens, sending the version it shows; an
unchanged list is answered 204 (nothing to swap, nothing rendered)."""

from __future__ import annotations

import asyncio
import re

import pytest
from asgiref.sync import sync_to_async
from django.urls import reverse

from agents.chat.services import conversation_create, conversation_rename
from agents.turns.services import turn_start
from agents.turns.tasks import turn_run
from agentsite.live import user_group
from tests.helpers import communicator, session_cookie
from tests.members import member_of

pytestmark = pytest.mark.django_db(transaction=True)


def version(html: str) -> str:
    """The version a rendered list carries in its ``hx-vals`` (sent back as ``since``)."""
    return re.search(r'"since": "([0-9a-f]+)"', html).group(1)


def sidebar(client, *, since: str = "", current: str = ""):
    return client.get(reverse("chat"), {"since": since, "current": current, "q": ""},
                      HTTP_HX_REQUEST="true", HTTP_HX_TARGET="sidebar-list")


def home_lists(client, *, since: str = ""):
    return client.get(reverse("home"), {"part": "lists", "since": since}, HTTP_HX_REQUEST="true")


def test_the_sidebar_read_again_is_204_until_the_persons_conversations_change(client_for, alice, agent):
    client = client_for(alice)
    here = conversation_create(agent=agent, membership=member_of(alice, agent.team), title="Here")
    page = client.get(reverse("conversation", args=[here.uuid])).content.decode()
    shown = version(page)
    assert sidebar(client, since=shown, current=here.uuid.hex).status_code == 204

    conversation_create(agent=agent, membership=member_of(alice, agent.team), title="Made in another tab")
    response = sidebar(client, since=shown, current=here.uuid.hex)
    html = response.content.decode()
    assert response.status_code == 200 and "Made in another tab" in html
    assert f'href="{reverse("conversation", args=[here.uuid])}" aria-current="page"' in html
    assert version(html) != shown  # the new list carries its own version

    conversation_rename(conversation=here, membership=member_of(alice, here), title="Renamed elsewhere")
    assert "Renamed elsewhere" in sidebar(client, since=version(html)).content.decode()


def test_the_home_lists_read_again_show_a_turn_that_started_and_ended_after_the_page(
        client_for, alice, conversation, sent_turns):
    client = client_for(alice)
    page = client.get(reverse("home")).content.decode()
    shown = version(page)
    assert home_lists(client, since=shown).status_code == 204

    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="What is 6 * 7?")
    started = home_lists(client, since=shown)
    assert started.status_code == 200 and "Running now" in started.content.decode()
    turn_run(trace.pk)
    ended = home_lists(client, since=version(started.content.decode())).content.decode()
    assert "Running now" not in ended and "What is 6 * 7?" in ended
    assert ended.lstrip().startswith('<div id="home-lists"')


def test_another_persons_lists_are_not_read_through_the_version(client_for, alice, bob, agent):
    conversation_create(agent=agent, membership=member_of(bob, agent.team), title="Bob's own")
    html = sidebar(client_for(alice)).content.decode()
    assert "Bob&#x27;s own" not in html


@pytest.mark.usefixtures("close_thread_connections")
async def test_lists_changed_reaches_the_persons_chat_and_team_sockets_but_not_the_inspector(
        alice, team_a, conversation, sent_turns):
    from channels.layers import get_channel_layer

    membership = await sync_to_async(member_of)(alice, conversation)
    trace = await sync_to_async(turn_start)(conversation=conversation, membership=membership, text="Hello")
    cookie = await sync_to_async(session_cookie)(alice)
    sockets = {path: communicator(path, cookie=cookie) for path in (
        f"/ws/team/{team_a.uuid}/", f"/ws/conversations/{conversation.uuid}/",
        f"/ws/traces/{trace.uuid}/")}
    for ws in sockets.values():
        assert (await ws.connect())[0]
    await get_channel_layer().group_send(user_group(alice.pk), {"type": "lists.changed"})
    team, chat, inspector = sockets.values()
    assert await team.receive_json_from(timeout=2) == {"event": "lists.changed", "data": {}}
    assert await chat.receive_json_from(timeout=2) == {"event": "lists.changed", "data": {}}
    assert await inspector.receive_nothing(timeout=0.3)
    for ws in sockets.values():
        await ws.disconnect()


@pytest.mark.usefixtures("close_thread_connections")
async def test_a_burst_of_lists_notices_reaches_a_page_as_one_now_and_one_at_the_end_of_its_gap(
        alice, conversation, monkeypatch):
    """Every start and end of a person's turns is announced: 200 of their turns at once must not
    make each of their open pages read its lists 400 times. The first notice goes out at once,
    the rest within the gap are folded into one sent when it ends (so the last change is never
    lost), and none of them waits for a check of the socket's access (a notice carries
    nothing)."""
    from channels.layers import get_channel_layer

    from agentsite.consumers import AccessCheckedConsumer

    monkeypatch.setattr(AccessCheckedConsumer, "lists_gap_s", 0.3)
    monkeypatch.setattr(AccessCheckedConsumer, "recheck_interval_s", 0.0)  # due at every frame
    checks: list[str] = []
    real_check = AccessCheckedConsumer._check

    async def counted_check(self):
        checks.append(type(self).__name__)
        return await real_check(self)

    monkeypatch.setattr(AccessCheckedConsumer, "_check", counted_check)
    cookie = await sync_to_async(session_cookie)(alice)
    chat = communicator(f"/ws/conversations/{conversation.uuid}/", cookie=cookie)
    assert (await chat.connect())[0]
    layer = get_channel_layer()
    for _ in range(50):
        await layer.group_send(user_group(alice.pk), {"type": "lists.changed"})
    notice = {"event": "lists.changed", "data": {}}
    assert await chat.receive_json_from(timeout=2) == notice  # at once
    assert await chat.receive_json_from(timeout=2) == notice  # the 49 others, as one
    assert await chat.receive_nothing(timeout=0.5)
    assert checks == []
    await chat.disconnect()


async def test_a_burst_of_one_persons_notices_leaves_the_process_as_one_now_and_one_later(
        monkeypatch):
    """The sender's side: 200 of a person's turns starting at once make one notice at once and
    one when the fold ends, not 200 group sends of every socket of theirs; another person's
    notice is not held by it."""
    import threading
    import time

    from agentsite import live

    sent: list[tuple[int, float, str]] = []
    counted = {n: threading.Event() for n in (3, 5)}  # set once that many are sent

    async def record(user_id):
        sent.append((user_id, time.monotonic(), threading.current_thread().name))
        if len(sent) in counted:
            counted[len(sent)].set()

    monkeypatch.setattr(live, "_send_lists", record)
    monkeypatch.setattr(live, "LISTS_FOLD_S", 0.3)
    monkeypatch.setattr(live, "_folded", live._FoldedNotices())
    began = time.monotonic()
    for _ in range(200):
        await live.announce_lists(7)
    await live.announce_lists(8)
    assert [user for user, *_ in sent] == [7, 8]  # each person's first, at once
    assert await asyncio.to_thread(counted[3].wait, 5)
    await asyncio.sleep(0.4)  # nothing more comes
    assert [user for user, *_ in sent] == [7, 8, 7]
    late = sent[2]
    assert late[1] - began >= 0.3 and late[2] == "lists-notices"
    await live.announce_lists(7)  # the fold is over: at once again
    await live.announce_lists(7)  # and the next within it waits
    assert [user for user, *_ in sent] == [7, 8, 7, 7]
    assert await asyncio.to_thread(counted[5].wait, 5)
    assert [(user, thread) for user, _, thread in sent[3:]] == [(7, "MainThread"), (7, "lists-notices")]


def test_what_changes_a_persons_lists_is_announced_to_them(alice, agent, conversation, sent_turns,
                                                            monkeypatch, django_capture_on_commit_callbacks):
    """A turn's start and end are announced by the worker that runs it (a request that sends a
    message makes no Redis call for it: a hung Redis must not hold a send one deadline more);
    a conversation's rename, pin, archive or deletion by the request that makes it."""
    told: list[int] = []

    async def announce(user_id):
        told.append(user_id)

    monkeypatch.setattr("agentsite.live.announce_lists", announce)
    monkeypatch.setattr("agents.turns.execution.announce_lists", announce)
    with django_capture_on_commit_callbacks(execute=True):
        made = conversation_create(agent=agent, membership=member_of(alice, agent.team), title="New")
        trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="Hi")
    assert told == []
    turn_run(trace.pk)
    assert told == [alice.pk, alice.pk]  # started, ended
    with django_capture_on_commit_callbacks(execute=True):
        conversation_rename(conversation=made, membership=member_of(alice, made), title="Renamed")
    assert told == [alice.pk] * 3


def test_a_conversation_read_again_is_204_until_a_turn_starts_or_ends_in_it(
        client_for, alice, conversation, sent_turns):
    """A page rendered with nothing in flight sends its conversation's version when its socket
    first opens: a message sent meanwhile from another tab moves it."""
    client = client_for(alice)
    url = reverse("conversation", args=[conversation.uuid])
    version = re.search(r'data-version="([0-9.]+)"', client.get(url).content.decode()).group(1)
    reread = {"part": "messages", "since": version}
    assert client.get(url, reread, HTTP_HX_REQUEST="true").status_code == 204
    turn_start(conversation=conversation, membership=member_of(alice, conversation), text="Sent from another tab")
    again = client.get(url, reread, HTTP_HX_REQUEST="true")
    assert again.status_code == 200 and "Sent from another tab" in again.content.decode()
