"""``/api/v1/conversations``: the chat's privacy rule through a key (own, shared, all for
admins; anything else a 404), starting conversations, reading messages, and sending a message
(a turn tied to the key; 202 at once). Waiting for the answer: ``test_rest_send.py``."""

from __future__ import annotations

import pytest

from agents.chat.services import conversation_create
from agents.models import Conversation
from agentsite.models import Membership
from tests.agents.api.rest_keys import error_of, key_client
from tests.members import member_of
from traces.models import Trace

pytestmark = pytest.mark.django_db


def ids(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [row["id"] for row in response.json()["data"]]


# -- listing and reading --------------------------------------------------------------------------
def test_a_member_lists_their_own_and_shared_conversations_but_not_ephemeral_ones(agent, alice, bob, team_a):
    mine = conversation_create(agent=agent, membership=member_of(bob, team_a), title="Mine")
    private = conversation_create(agent=agent, membership=member_of(alice, team_a), title="Alice's")
    shared = conversation_create(agent=agent, membership=member_of(alice, team_a), title="Shared")
    Conversation.objects.filter(pk=shared.pk).update(shared=True)
    ephemeral = Conversation.objects.create(team=team_a, agent=agent, created_by=bob, ephemeral=True)
    deleted = conversation_create(agent=agent, membership=member_of(bob, team_a))
    Conversation.objects.filter(pk=deleted.pk).update(deleted_at="2026-01-01T00:00:00Z")
    client = key_client(bob, team_a, ["chat"])

    assert ids(client.get("/api/v1/conversations")) == [str(shared.uuid), str(mine.uuid)]
    assert ids(client.get("/api/v1/conversations", {"include_ephemeral": "true"})) == [
        str(ephemeral.uuid), str(shared.uuid), str(mine.uuid)]
    assert client.get(f"/api/v1/conversations/{private.uuid}").status_code == 404
    assert client.get(f"/api/v1/conversations/{deleted.uuid}").status_code == 404


def test_an_admin_sees_every_conversation_of_the_team(agent, alice, bob, team_a):
    bobs = conversation_create(agent=agent, membership=member_of(bob, team_a))

    assert ids(key_client(alice, team_a, ["chat"]).get("/api/v1/conversations")) == [str(bobs.uuid)]


def test_it_reads_a_conversation_by_dashed_or_hex_id(conversation, alice, team_a):
    client = key_client(alice, team_a, ["chat"])

    for ident in (str(conversation.uuid), conversation.uuid.hex):
        body = client.get(f"/api/v1/conversations/{ident}").json()
        assert body["id"] == str(conversation.uuid)
        assert body["agent"]["slug"] == "helper" and body["owner"] == "alice" and body["ephemeral"] is False


def test_another_teams_conversation_is_a_404(conversation, charlie, team_b):
    client = key_client(charlie, team_b, ["chat"])

    for path in (f"/api/v1/conversations/{conversation.uuid}", f"/api/v1/conversations/{conversation.uuid}/messages"):
        response = client.get(path)
        assert response.status_code == 404
        assert error_of(response)["type"] == "not_found_error"
    response = client.post(f"/api/v1/conversations/{conversation.uuid}/messages", {"text": "hi"},
                           content_type="application/json")
    assert response.status_code == 404
    assert ids(client.get("/api/v1/conversations")) == []


def test_conversations_need_the_chat_scope(conversation, alice, team_a):
    client = key_client(alice, team_a, ["traces:read", "costs:read"])

    for response in (client.get("/api/v1/conversations"), client.get(f"/api/v1/conversations/{conversation.uuid}"),
                     client.post("/api/v1/conversations", {"agent": "helper"}, content_type="application/json")):
        assert response.status_code == 403
        error = error_of(response)
        assert error["code"] == "insufficient_scope" and "'chat'" in error["message"]


def test_messages_are_listed_oldest_first_across_pages(conversation, alice, team_a):
    made = [conversation.messages.create(role="user", text=f"message {n}", author=alice) for n in range(5)]
    client = key_client(alice, team_a, ["chat"])

    first = client.get(f"/api/v1/conversations/{conversation.uuid}/messages", {"limit": 3}).json()
    rest = client.get(f"/api/v1/conversations/{conversation.uuid}/messages",
                      {"limit": 3, "cursor": first["next_cursor"]}).json()

    assert [m["text"] for m in first["data"] + rest["data"]] == [m.text for m in made]
    assert rest["next_cursor"] is None
    assert first["data"][0] == {**first["data"][0], "id": str(made[0].uuid), "role": "user", "author": "alice"}


# -- starting a conversation ----------------------------------------------------------------------
def test_it_starts_a_conversation_through_the_key(agent, alice, team_a):
    client = key_client(alice, team_a, ["chat"])

    response = client.post("/api/v1/conversations", {"agent": agent.slug, "title": "  Weekly report "},
                           content_type="application/json")

    assert response.status_code == 201
    body = response.json()
    conversation = Conversation.objects.get(uuid=body["id"])
    assert body["title"] == "Weekly report" and body["agent"]["id"] == str(agent.uuid)
    assert conversation.created_by == alice and conversation.api_key == client.key
    assert not conversation.ephemeral


def test_starting_one_with_another_teams_agent_is_a_404(make_agent, team_b, charlie, alice, team_a):
    theirs = make_agent(name="Theirs", team=team_b)

    response = key_client(alice, team_a, ["chat"]).post("/api/v1/conversations", {"agent": str(theirs.uuid)},
                                                        content_type="application/json")

    assert response.status_code == 404
    assert not Conversation.objects.filter(team=team_a).exists()


@pytest.mark.parametrize(("body", "param"), [({"title": "no agent"}, "agent"), ({"agent": "helper", "title": "x" * 201}, "title")])
def test_a_bad_body_is_a_400_naming_the_field(agent, alice, team_a, body, param):
    response = key_client(alice, team_a, ["chat"]).post("/api/v1/conversations", body, content_type="application/json")

    assert response.status_code == 400
    assert error_of(response)["param"] == param


# -- sending --------------------------------------------------------------------------------------
def send(client, conversation, **body):
    return client.post(f"/api/v1/conversations/{conversation.uuid}/messages", body, content_type="application/json")


def test_a_message_queues_a_turn_tied_to_the_key_and_answers_202(conversation, alice, team_a, sent_turns,
                                                                  django_capture_on_commit_callbacks):
    client = key_client(alice, team_a, ["chat"])

    with django_capture_on_commit_callbacks(execute=True):
        response = send(client, conversation, text="What is 2 + 2?")

    assert response.status_code == 202
    body = response.json()
    trace = Trace.objects.get(uuid=body["trace"]["id"])
    assert sent_turns == [trace.pk]
    assert trace.api_key == client.key and trace.user == alice
    assert body["trace"]["status"] == "queued" and body["answer"] is None and body["resent"] is False
    assert body["message"]["text"] == "What is 2 + 2?" and body["message"]["trace"] == str(trace.uuid)
    assert body["events_url"].endswith(f"/api/v1/traces/{trace.uuid.hex}/events")
    assert body["trace_url"].endswith(f"/api/v1/traces/{trace.uuid.hex}")


def test_the_same_client_id_returns_the_first_turn(conversation, alice, team_a, sent_turns,
                                                   django_capture_on_commit_callbacks):
    client = key_client(alice, team_a, ["chat"])

    with django_capture_on_commit_callbacks(execute=True):
        first = send(client, conversation, text="hello", client_id="abc-1").json()
        again = send(client, conversation, text="hello", client_id="abc-1").json()

    assert again["trace"]["id"] == first["trace"]["id"] and again["resent"] is True
    assert len(sent_turns) == 1


@pytest.mark.parametrize(("body", "param"), [({}, "text"), ({"text": ""}, "text"), ({"text": "x" * 32_001}, "text"),
                                             ({"text": "hi", "timeout_s": 0}, "timeout_s"),
                                             ({"text": "hi", "wait": "sometimes"}, "wait")])
def test_a_bad_message_is_a_400_naming_the_field(conversation, alice, team_a, sent_turns, body, param):
    response = send(key_client(alice, team_a, ["chat"]), conversation, **body)

    assert response.status_code == 400
    assert error_of(response)["param"] == param
    assert not Trace.objects.exists()


def test_a_viewers_key_cannot_send(conversation, bob, team_a, make_member, sent_turns):
    client = key_client(bob, team_a, ["chat"])
    own = conversation_create(agent=conversation.agent, membership=member_of(bob, team_a))
    make_member(team_a, "bob", Membership.Role.VIEWER)  # demoted after the key was made

    response = send(client, own, text="hello")

    assert response.status_code == 403
    assert error_of(response)["type"] == "permission_error"
    assert not Trace.objects.exists()


def test_a_member_cannot_send_in_someone_elses_shared_conversation(conversation, bob, team_a, sent_turns):
    Conversation.objects.filter(pk=conversation.pk).update(shared=True)

    response = send(key_client(bob, team_a, ["chat"]), conversation, text="hello")

    assert response.status_code == 403
    assert not Trace.objects.exists()


def test_sending_needs_the_chat_scope(conversation, alice, team_a, sent_turns):
    response = send(key_client(alice, team_a, ["traces:read"]), conversation, text="hello")

    assert response.status_code == 403
    assert error_of(response)["code"] == "insufficient_scope"
    assert not Trace.objects.exists()
