"""End users behind one API key, through the API: ``user`` of ``/v1/chat/completions`` and the
``X-Agentsite-End-User`` header of the REST conversation endpoints. Two end users of one key
see neither each other's conversations (lists, reads, messages, a bound conversation) nor each
other's memory; without an end user the key's person sees what they always saw."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from agents.models import Conversation
from agents.turns.services import conversation_create
from tests.agents.api.rest_keys import error_of, key_client
from tests.members import member_of

HEADER = "X-Agentsite-End-User"


def ids(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [row["id"] for row in response.json()["data"]]


def chat(client: Client, body: dict, **headers):
    return client.post("/v1/chat/completions", json.dumps(body), content_type="application/json",
                       headers=headers)


@pytest.fixture
def conversations(agent, alice, team_a):
    """alice's own conversation, and one for each of her application's end users alice and bob."""
    membership = member_of(alice, team_a)
    return {who: conversation_create(membership=membership, agent=agent, end_user=who, title=who or "own")
            for who in ("", "alice", "bob")}


# -- REST ---------------------------------------------------------------------------------------------
@pytest.mark.django_db
def test_the_list_shows_the_named_end_users_conversations_only(conversations, alice, team_a):
    client = key_client(alice, team_a, ["chat"])

    assert ids(client.get("/api/v1/conversations", headers={HEADER: "alice"})) == [
        str(conversations["alice"].uuid)]
    assert ids(client.get("/api/v1/conversations", headers={HEADER: " bob "})) == [  # trimmed
        str(conversations["bob"].uuid)]
    assert ids(client.get("/api/v1/conversations", headers={HEADER: "carol"})) == []
    # The person themself, without the header: everything, as before.
    assert ids(client.get("/api/v1/conversations")) == [
        str(c.uuid) for c in (conversations["bob"], conversations["alice"], conversations[""])]


@pytest.mark.django_db
def test_an_end_user_cannot_read_another_end_users_conversation_or_messages(conversations, alice, team_a):
    client = key_client(alice, team_a, ["chat"])
    bobs, own = conversations["bob"], conversations[""]

    for conversation in (bobs, own):
        for path in (f"/api/v1/conversations/{conversation.uuid}",
                     f"/api/v1/conversations/{conversation.uuid}/messages"):
            response = client.get(path, headers={HEADER: "alice"})
            assert response.status_code == 404, path
        sent = client.post(f"/api/v1/conversations/{conversation.uuid}/messages",
                           json.dumps({"text": "hello"}), content_type="application/json",
                           headers={HEADER: "alice"})
        assert sent.status_code == 404
    body = client.get(f"/api/v1/conversations/{bobs.uuid}", headers={HEADER: "bob"}).json()
    assert body["id"] == str(bobs.uuid) and body["end_user"] == "bob"
    assert client.get(f"/api/v1/conversations/{bobs.uuid}/messages", headers={HEADER: "bob"}).status_code == 200
    assert client.get(f"/api/v1/conversations/{bobs.uuid}").json()["end_user"] == "bob"
    assert client.get(f"/api/v1/conversations/{own.uuid}").json()["end_user"] is None


@pytest.mark.django_db
def test_a_conversation_started_for_an_end_user_is_theirs(agent, alice, bob, team_a):
    client = key_client(alice, team_a, ["chat"])
    response = client.post("/api/v1/conversations", json.dumps({"agent": agent.slug}),
                           content_type="application/json", headers={HEADER: "alice"})

    assert response.status_code == 201, response.content
    assert response.json()["end_user"] == "alice"
    assert Conversation.objects.get().end_user == "alice"
    # The same name behind another person's key is another end user.
    other = key_client(bob, team_a, ["chat"])
    assert ids(other.get("/api/v1/conversations", headers={HEADER: "alice"})) == []


@pytest.mark.django_db
def test_an_owners_key_sees_no_other_persons_end_users(conversations, alice, bob, team_a, agent):
    # alice owns the team and sees every conversation of it; an end user named "alice" behind
    # bob's key is bob's, not hers.
    bobs = conversation_create(membership=member_of(bob, team_a), agent=agent, end_user="alice")

    assert ids(key_client(alice, team_a, ["chat"]).get("/api/v1/conversations", headers={HEADER: "alice"})) == [
        str(conversations["alice"].uuid)]
    assert ids(key_client(bob, team_a, ["chat"]).get("/api/v1/conversations", headers={HEADER: "alice"})) == [
        str(bobs.uuid)]


@pytest.mark.django_db
def test_an_end_user_id_over_256_characters_is_a_400_naming_the_field(agent, alice, team_a):
    client = key_client(alice, team_a, ["chat"])

    response = client.get("/api/v1/conversations", headers={HEADER: "x" * 257})
    assert response.status_code == 400
    assert error_of(response)["param"] == HEADER and "256" in error_of(response)["message"]
    assert client.get("/api/v1/conversations", headers={HEADER: "x" * 256}).status_code == 200
    response = chat(client, {"model": agent.slug, "user": "x" * 257,
                             "messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == 400 and error_of(response)["param"] == "user"
    assert not Conversation.objects.exists()


# -- /v1/chat/completions -----------------------------------------------------------------------------
@pytest.mark.django_db
def test_a_bound_conversation_of_another_end_user_is_a_404(conversations, agent, alice, team_a):
    client = key_client(alice, team_a, ["chat"])
    message = {"model": agent.slug, "messages": [{"role": "user", "content": "hi"}]}

    for bound in (conversations["bob"], conversations[""]):
        response = chat(client, {**message, "user": "alice"},
                        **{"X-Agentsite-Conversation": bound.uuid.hex})
        assert response.status_code == 404, response.content


@pytest.mark.django_db(transaction=True)
def test_alice_stores_bob_cannot_recall_it_alice_can(make_agent, alice, team_a, use_redis, turns_run):
    """The measured case: one key, user="alice" asks to remember; user="bob" asks for it."""
    agent = make_agent(name="Memory", tools=("memory_store", "memory_recall"))
    client = key_client(alice, team_a, ["chat"])

    def ask(user: str, text: str) -> str:
        body = {"model": agent.slug, "user": user, "messages": [{"role": "user", "content": text}]}
        response = chat(client, body)
        assert response.status_code == 200, response.content
        return response.json()["choices"][0]["message"]["content"]

    assert "sunflower" in ask("alice", "Remember that my bank PIN hint is sunflower")
    assert "sunflower" not in ask("bob", "What is my bank PIN hint?")
    assert "sunflower" in ask("alice", "What is my bank PIN hint?")
    # Each request's conversation is its end user's.
    assert sorted(Conversation.objects.values_list("end_user", flat=True)) == ["alice", "alice", "bob"]


# -- keys that require an end user -------------------------------------------------------------------
@pytest.mark.django_db
def test_a_key_that_requires_an_end_user_refuses_a_call_without_one(conversations, agent, alice, team_a):
    from agentsite.api_keys import api_key_create

    _, secret = api_key_create(membership=member_of(alice, team_a), name="app", scopes=["chat"],
                               require_end_user=True)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    refusals = [
        (chat(client, {"model": agent.slug, "messages": [{"role": "user", "content": "hi"}]}), "user"),
        (client.post("/v1/responses", json.dumps({"model": agent.slug, "input": "hi"}),
                     content_type="application/json"), "user"),
        (client.get("/api/v1/conversations"), HEADER),
        (client.get(f"/api/v1/conversations/{conversations['alice'].uuid}/messages"), HEADER),
    ]
    for response, param in refusals:
        assert response.status_code == 400, response.content
        error = error_of(response)
        assert (error["param"], error["code"]) == (param, "end_user_required")
    assert ids(client.get("/api/v1/conversations", headers={HEADER: "alice"})) == [
        str(conversations["alice"].uuid)]
    assert not Conversation.objects.filter(ephemeral=True).exists()


@pytest.mark.django_db(transaction=True)
def test_each_end_user_has_their_own_rate_limit_within_the_key(agent, alice, team_a, turns_run):
    client = key_client(alice, team_a, ["chat"], end_user_rpm_limit=1)
    ask = {"model": agent.slug, "messages": [{"role": "user", "content": "hi"}]}

    assert chat(client, {**ask, "user": "ada"}).status_code == 200
    refused = chat(client, {**ask, "user": "ada"})
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    assert "end user" in error_of(refused)["message"]
    assert chat(client, {**ask, "user": "bob"}).status_code == 200  # another end user's window
    conversation = conversation_create(membership=member_of(alice, team_a), agent=agent, end_user="cy")
    sent = client.post(f"/api/v1/conversations/{conversation.uuid}/messages", {"text": "hi"},
                       content_type="application/json", headers={HEADER: "cy"})
    assert sent.status_code == 202, sent.content
    again = client.post(f"/api/v1/conversations/{conversation.uuid}/messages", {"text": "hi"},
                        content_type="application/json", headers={HEADER: "cy"})
    assert again.status_code == 429
