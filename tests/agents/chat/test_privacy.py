"""Privacy inside a team, in the chat: a conversation is its owner's (and the team admins') until
it is shared; shared, everyone in the team reads it; only its owner or a team admin acts in it.
(The turn endpoints: ``tests/agents/turns/test_privacy.py``; traces: ``tests/traces``.)"""

from __future__ import annotations

import uuid

import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.test import Client
from django.urls import reverse

from agents.access import Acting, conversation_acting_or_404
from agents.chat import services
from agents.models import Conversation, Message
from agents.turns import services as turns
from agentsite import live
from tests.helpers import communicator, session_cookie
from tests.members import member_of
from traces.models import Trace

SECRET = "the office wifi password is hunter2"
REFUSED = "Only the conversation&#x27;s owner or a team admin can"


@pytest.fixture
def admin(team_a, make_member):
    return make_member(team_a, "adam", "admin")


def page(conversation) -> str:
    return reverse("conversation", args=[conversation.uuid])


def listed(response) -> str:
    body = response.content.decode()
    return body[body.index('id="conversation-list"'):]


def test_a_private_conversation_is_a_404_for_teammates_and_missing_from_lists_and_search(
        client_for, alice, bob, vera, conversation, sent_turns):
    turns.turn_start(conversation=conversation, membership=member_of(alice, conversation), text=SECRET)
    for person in (bob, vera):
        c = client_for(person)
        assert c.get(page(conversation)).status_code == 404
        assert c.get(page(conversation), {"part": "messages"}, HTTP_HX_REQUEST="true").status_code == 404
        for scope in ("mine", "team"):
            for query in ("hunter2", ""):
                body = listed(c.get(reverse("chat"), {"q": query, "scope": scope}))
                assert str(conversation.uuid) not in body and SECRET not in body
    # the same answer as for an id that does not exist: nothing tells them it does
    assert client_for(bob).get(reverse("conversation", args=[uuid.uuid4()])).status_code == 404
    assert client_for(alice).get(page(conversation)).status_code == 200
    assert SECRET in listed(client_for(alice).get(reverse("chat"), {"q": "hunter2"}))


def test_a_teammate_cannot_act_in_a_private_conversation_either(client_for, alice, bob, conversation, sent_turns):
    trace = turns.turn_start(conversation=conversation, membership=member_of(alice, conversation), text="hello")
    c = client_for(bob)
    for name, args, data in [
        ("message_send", [conversation.uuid], {"text": "hi"}),
        ("message_send", [conversation.uuid], {"text": "/stop"}),
        ("turn_regenerate", [conversation.uuid, trace.uuid], {}),
        ("message_edit", [conversation.uuid, trace.user_message.uuid], {"text": "x"}),
        ("conversation_rename", [conversation.uuid], {"title": "x"}),
        ("conversation_archive", [conversation.uuid], {}),
        ("conversation_delete", [conversation.uuid], {}),
        ("conversation_share", [conversation.uuid], {"shared": "1"}),
    ]:
        assert c.post(reverse(name, args=args), data).status_code == 404, name
    conversation.refresh_from_db()
    assert not conversation.shared and conversation.deleted_at is None and Trace.objects.count() == 1


def test_a_shared_conversation_is_read_by_the_team_but_only_its_owner_acts(
        client_for, alice, bob, vera, conversation, sent_turns):
    first = turns.turn_start(conversation=conversation, membership=member_of(alice, conversation), text="hello")
    Trace.objects.filter(pk=first.pk).update(status="completed")
    services.conversation_share(conversation=conversation, membership=member_of(alice, conversation), shared=True)

    for person in (bob, vera):
        body = client_for(person).get(page(conversation)).content.decode()
        assert "hello" in body and "tag-shared" in body and "started by alice" in body
        # the edit, regenerate, stop and approve controls are hidden for a reader
        assert "<body" in body and "data-read-only" in body.split("<body", 1)[1].split(">", 1)[0]
        assert 'id="composer"' not in body and "Share with the team" not in body
    assert "only they or a team admin can write" in client_for(bob).get(page(conversation)).content.decode()
    assert str(conversation.uuid) not in listed(client_for(bob).get(reverse("chat")))  # not his
    assert str(conversation.uuid) in listed(client_for(bob).get(reverse("chat"), {"scope": "team"}))

    c = client_for(bob)
    for name, args, data, action in [
        ("message_send", [conversation.uuid], {"text": "hi"}, "send messages in it"),
        ("message_send", [conversation.uuid], {"text": "/stop"}, "send messages in it"),
        ("message_send", [conversation.uuid], {"text": "/model gpt-4o"}, "send messages in it"),
        ("turn_regenerate", [conversation.uuid, first.uuid], {}, "regenerate its answers"),
        ("message_edit", [conversation.uuid, first.user_message.uuid], {"text": "x"}, "edit its messages"),
        ("conversation_rename", [conversation.uuid], {"title": "x"}, "rename it"),
        ("conversation_archive", [conversation.uuid], {}, "archive it"),
        ("conversation_delete", [conversation.uuid], {}, "delete it"),
        ("conversation_share", [conversation.uuid], {"shared": "0"}, "share it or make it private"),
    ]:
        response = c.post(reverse(name, args=args), data, HTTP_HX_REQUEST="true")
        assert response.status_code == 403, name
        assert f"{REFUSED} {action}." in response.content.decode(), name
    conversation.refresh_from_db()
    assert (conversation.title, conversation.shared, conversation.archived) == ("hello", True, False)
    assert conversation.deleted_at is None and conversation.model_override == ""
    assert Trace.objects.count() == 1 and Message.objects.count() == 1
    # a viewer is told their role is the reason, as before
    refused = client_for(vera).post(reverse("message_send", args=[conversation.uuid]), {"text": "hi"})
    assert refused.status_code == 403 and b"member or above" in refused.content


def test_the_owner_shares_and_makes_private_with_htmx_and_teammates_lose_sight(
        client_for, alice, bob, vera, admin, conversation, monkeypatch, django_capture_on_commit_callbacks):
    lost: list[list[int]] = []
    monkeypatch.setattr(live, "recheck_sockets", lambda ids: lost.append(sorted(ids)))
    c = client_for(alice)
    url = reverse("conversation_share", args=[conversation.uuid])
    shared = c.post(url, {"shared": "1"}, HTTP_HX_REQUEST="true").content.decode()
    assert shared.startswith('<div id="share-state"') and "Shared" in shared and "Make private" in shared
    assert client_for(bob).get(page(conversation)).status_code == 200
    assert client_for(vera).get(page(conversation)).status_code == 200

    with django_capture_on_commit_callbacks(execute=True):
        private = c.post(url, {"shared": "0"}, HTTP_HX_REQUEST="true").content.decode()
    assert "Share with the team" in private and "Private" in private
    # the people who saw it only because it was shared: their sockets are told to re-check
    assert lost == [sorted([bob.pk, vera.pk])]
    assert client_for(bob).get(page(conversation)).status_code == 404
    assert client_for(admin).get(page(conversation)).status_code == 200

    with django_capture_on_commit_callbacks(execute=True):
        c.post(url, {"shared": "0"})  # already private: nothing to tell
    assert len(lost) == 1


def test_sharing_is_a_post_with_the_csrf_token(alice, conversation):
    c = Client(enforce_csrf_checks=True)
    c.force_login(alice)
    url = reverse("conversation_share", args=[conversation.uuid])
    assert c.post(url, {"shared": "1"}).status_code == 403
    assert c.get(url).status_code == 405
    conversation.refresh_from_db()
    assert not conversation.shared


def test_share_notices_and_lists_escape_the_title(client_for, alice, bob, conversation):
    services.conversation_rename(conversation=conversation, membership=member_of(alice, conversation), title="<img src=x onerror=alert(1)>")
    shared = client_for(alice).post(reverse("conversation_share", args=[conversation.uuid]), {"shared": "1"},
                                    follow=True).content.decode()
    assert "is shared: everyone in the team can read it" in shared
    team_list = client_for(bob).get(reverse("chat"), {"scope": "team"}).content.decode()
    for body in (shared, team_list):
        assert "<img src=x" not in body and "&lt;img src=x onerror=alert(1)&gt;" in body


def test_an_admin_sees_and_acts_in_a_members_private_conversation(client_for, bob, admin, agent, sent_turns):
    bobs = services.conversation_create(agent=agent, membership=member_of(bob, agent.team), title="Bob's notes")
    c = client_for(admin)
    body = c.get(page(bobs)).content.decode()
    assert "started by bob" in body and 'id="composer"' in body and "Private" in body
    assert "data-read-only" not in body.split("<body", 1)[1].split(">", 1)[0]
    assert "Bob&#x27;s notes" in listed(c.get(reverse("chat"), {"scope": "team"}))
    assert c.post(reverse("message_send", args=[bobs.uuid]), {"text": "checking in"}).status_code == 302
    assert Trace.objects.get(conversation=bobs).user == admin
    c.post(reverse("conversation_rename", args=[bobs.uuid]), {"title": "Renamed by an admin"})
    bobs.refresh_from_db()
    assert bobs.title == "Renamed by an admin"


def test_a_conversation_whose_owner_is_gone_is_for_admins_only(client_for, alice, bob, agent):
    orphan = Conversation.objects.create(team=agent.team, agent=agent, created_by=None, shared=True, title="Orphan")
    assert client_for(bob).get(page(orphan)).status_code == 404
    assert client_for(alice).get(page(orphan)).status_code == 200


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("close_thread_connections")
async def test_the_socket_of_a_private_conversation_refuses_teammates_until_it_is_shared(alice, bob, sample_trace):
    path = f"/ws/conversations/{sample_trace.conversation.uuid}/"
    cookie = await sync_to_async(session_cookie)(bob)
    connected, code = await communicator(path, cookie=cookie).connect()
    assert not connected and code == 4403
    await sync_to_async(Conversation.objects.filter(pk=sample_trace.conversation_id).update)(shared=True)
    ws = communicator(path, cookie=cookie)
    assert (await ws.connect())[0]
    await ws.disconnect()


def test_the_send_path_finds_and_checks_the_conversation_in_one_call(alice, bob, admin, conversation,
                                                                      django_assert_num_queries):
    """``conversation_acting_or_404``: a 404 for a conversation the person may not see, a 403 for
    one they may see but not send in, otherwise the membership and conversation as checked."""
    with pytest.raises(Http404):
        conversation_acting_or_404(member_of(bob, conversation), "send messages in it", uuid=conversation.uuid)
    Conversation.objects.filter(pk=conversation.pk).update(shared=True)
    with pytest.raises(PermissionDenied, match="can send messages in it"):
        conversation_acting_or_404(member_of(bob, conversation), "send messages in it", uuid=conversation.uuid)
    for person in (alice, admin):
        membership = member_of(person, conversation)
        with django_assert_num_queries(1):  # the conversation; the rules themselves ask nothing
            acting = conversation_acting_or_404(membership, "send messages in it", uuid=conversation.uuid)
        assert isinstance(acting, Acting)
        assert acting.membership is membership and acting.conversation.pk == conversation.pk
