"""``/v1/chat/completions`` and ``/v1/models`` in this process: the request's checks and their
OpenAI-shaped errors, stateless and bound conversations, the answer with its usage and trace,
streaming, and the turn run by the task function in a thread as a worker would (the official
``openai`` client against a live stack is in tests/e2e/test_openai_client.py)."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from decimal import Decimal

import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import PermissionDenied
from django.test import AsyncClient, Client
from django.utils import timezone

from agents.api.openai import _Text
from agents.chat.selectors import conversation_list
from agents.models import Conversation, Message
from agents.turns.quotas import budgets_admit
from agents.turns.tasks import turn_run
from agentsite.api_keys import api_key_create, api_key_revoke
from agentsite.celery import app
from agentsite.models import ApiKey
from tests.members import member_of
from traces.models import Budget, CostRollup, Trace

pytestmark = pytest.mark.django_db(transaction=True)
ALL = [s.value for s in ApiKey.Scope]


@pytest.fixture
def worker(monkeypatch):
    """Turn tasks run in a thread of this process as soon as they are sent (no broker)."""
    threads: list[threading.Thread] = []

    def send_task(name, args=None, kwargs=None, **options):
        thread = threading.Thread(target=turn_run, args=(args[0],), daemon=True)
        threads.append(thread)
        thread.start()

    monkeypatch.setattr(app, "send_task", send_task)
    monkeypatch.setattr(app.conf, "broker_url", "memory://")
    yield threads
    for thread in threads:
        thread.join(timeout=20)


def key_for(user, team, scopes=("chat",), **fields) -> str:
    return api_key_create(membership=member_of(user, team), name="test", scopes=scopes, **fields)[1]


def api(secret: str | None) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}") if secret else Client()


def post(client: Client, body: dict, **headers) -> object:
    return client.post("/v1/chat/completions", json.dumps(body), content_type="application/json",
                       headers=headers)


def error_of(response) -> dict:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


# -- who may call ---------------------------------------------------------------------------------
def test_without_a_key_or_with_a_wrong_one_the_answer_is_401_in_openais_shape(agent):
    for client in (api(None), api("ask_00000000_nope")):
        response = post(client, {"model": agent.slug, "messages": [{"role": "user", "content": "hi"}]})
        assert response.status_code == 401
        assert error_of(response)["type"] == "authentication_error"


def test_a_revoked_or_expired_key_says_so(agent, alice, team_a):
    key, secret = api_key_create(membership=member_of(alice, team_a), name="ci", scopes=["chat"])
    api_key_revoke(key=key, membership=member_of(alice, key))
    assert "revoked" in error_of(api(secret).get("/v1/models"))["message"]
    expired, secret = api_key_create(membership=member_of(alice, team_a), name="old", scopes=["chat"],
                                     expires_at=timezone.now() + timedelta(seconds=1))
    ApiKey.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(days=1))
    response = api(secret).get("/v1/models")
    assert response.status_code == 401 and error_of(response)["code"] == "expired_api_key"


def test_a_key_without_the_chat_scope_is_403(agent, alice, team_a):
    response = api(key_for(alice, team_a, scopes=["traces:read"])).get("/v1/models")
    assert response.status_code == 403 and "'chat'" in error_of(response)["message"]


def test_another_teams_agent_does_not_exist_for_a_key(agent, charlie, team_b):
    response = post(api(key_for(charlie, team_b)),
                    {"model": agent.slug, "messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == 404
    assert error_of(response) | {"message": ""} == {"message": "", "type": "not_found_error",
                                                      "param": "model", "code": "model_not_found"}


def test_a_viewers_key_cannot_chat(agent, vera, team_a):
    with pytest.raises(PermissionDenied, match="cannot have the 'chat' scope"):
        key_for(vera, team_a, scopes=["chat"])


def test_models_lists_the_teams_agents_with_their_models(agent, make_agent, alice, team_a):
    make_agent(name="Support bot", allowed_models=["demo-large"])
    body = api(key_for(alice, team_a)).get("/v1/models").json()
    assert body["object"] == "list"
    assert [(m["id"], m["models"]) for m in body["data"]] == [("helper", ["demo"]),
                                                               ("support-bot", ["demo", "demo-large"])]


def test_models_retrieve_reads_one_agent_and_one_of_its_models(agent, make_agent, alice, team_a, charlie):
    make_agent(name="Support bot", allowed_models=["demo-large"])
    client = api(key_for(alice, team_a))
    card = client.get("/v1/models/support-bot").json()
    assert (card["id"], card["object"], card["models"]) == ("support-bot", "model", ["demo", "demo-large"])
    assert client.get("/v1/models/support-bot/demo-large").json()["id"] == "support-bot/demo-large"
    missing = client.get("/v1/models/nobody")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
    assert client.get("/v1/models/support-bot/gpt-9").json()["error"]["code"] == "model_not_allowed"
    # Another team's agent does not exist for this key.
    other = api(key_for(charlie, charlie.memberships.get().team)).get("/v1/models/support-bot")
    assert other.status_code == 404


# -- what a request may say ------------------------------------------------------------------------
@pytest.mark.parametrize(("body", "param"), [
    ({"messages": [{"role": "user", "content": "hi"}]}, "model"),
    ({"model": "helper", "messages": []}, "messages"),
    ({"model": "helper", "messages": [{"role": "assistant", "content": "hi"}]}, "messages"),
    ({"model": "helper", "messages": [{"role": "user", "content": "hi"}], "n": 2}, "n"),
    ({"model": "helper", "messages": [{"role": "user", "content": "hi"}],
      "tools": [{"type": "function", "function": {"name": "x"}}]}, "tools"),
    ({"model": "helper", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://x"}}]}]}, "messages[0].content"),
    ({"model": "helper/gpt-9", "messages": [{"role": "user", "content": "hi"}]}, "model"),
    ({"model": "helper", "messages": [{"role": "user", "content": "x" * 40_000}]}, "messages"),
])
def test_a_bad_request_is_a_400_naming_the_field(agent, alice, team_a, body, param):
    response = post(api(key_for(alice, team_a)), body)
    assert response.status_code == 400, response.content
    error = error_of(response)
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert not Trace.objects.exists()


# -- answers -------------------------------------------------------------------------------------
def test_a_stateless_request_answers_with_usage_and_its_trace(agent, alice, team_a, use_redis, worker):
    secret = key_for(alice, team_a)
    response = post(api(secret), {"model": agent.slug, "messages": [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "My name is Ada."},
        {"role": "assistant", "content": "Hello Ada."},
        {"role": "user", "content": "What is 6 * 7?"}]})

    assert response.status_code == 200, response.content
    body = response.json()
    trace = Trace.objects.get()
    assert response["X-Agentsite-Trace-Id"] == trace.uuid.hex == body["agentsite"]["trace_id"]
    assert body["object"] == "chat.completion" and body["model"] == "helper"
    assert "42" in body["choices"][0]["message"]["content"]
    assert body["choices"][0]["message"]["content"] == trace.answer
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"]["prompt_tokens"] == trace.prompt_tokens > 0
    assert body["usage"]["completion_tokens"] == trace.output_tokens > 0
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == trace.cache_read_tokens
    assert trace.api_key.name == "test" and trace.user == alice
    conversation = trace.conversation
    assert conversation.ephemeral and conversation.api_key_id == trace.api_key_id
    # The history it sent came first, the caller's instructions at the head of its first message.
    rows = list(Message.objects.filter(conversation=conversation).order_by("id")
                .values_list("role", "text"))
    assert rows[0] == ("user", "Instructions from the caller:\nAnswer briefly.\n\nMy name is Ada.")
    assert rows[1] == ("assistant", "Hello Ada.")
    assert rows[2] == ("user", "What is 6 * 7?")
    # Not in the person's chat list: it is one request's record, reached from its trace.
    membership = alice.memberships.get(team=team_a)
    assert conversation_list(membership=membership) == []


def test_a_bound_conversation_keeps_its_own_history(agent, conversation, alice, team_a, use_redis,
                                                    worker):
    secret = key_for(alice, team_a)
    for text in ("first question", "second question"):
        response = post(api(secret), {"model": agent.slug, "messages": [
            {"role": "user", "content": "ignored earlier message"},
            {"role": "user", "content": text}]},
            **{"X-Agentsite-Conversation": conversation.uuid.hex})
        assert response.status_code == 200, response.content
        assert response["X-Agentsite-Conversation-Id"] == conversation.uuid.hex
    users = list(Message.objects.filter(conversation=conversation, role="user").values_list("text", flat=True))
    assert users == ["first question", "second question"]
    assert Conversation.objects.count() == 1


def test_a_conversation_of_someone_else_is_404(agent, conversation, bob, team_a):
    response = post(api(key_for(bob, team_a)), {"model": agent.slug, "messages": [
        {"role": "user", "content": "hi"}]}, **{"X-Agentsite-Conversation": conversation.uuid.hex})
    assert response.status_code == 404


async def test_streaming_sends_the_answer_in_chunks_then_usage_and_done(
        agent, alice, team_a, use_redis, worker, close_thread_connections):
    secret = await sync_to_async(key_for)(alice, team_a)
    response = await AsyncClient().post("/v1/chat/completions", json.dumps({
        "model": agent.slug, "stream": True, "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "Tell me about the weather in four sentences."}]}),
        content_type="application/json", headers={"Authorization": f"Bearer {secret}"})
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "text/event-stream"
    raw = b"".join([part async for part in response.streaming_content]).decode()
    events = [line[len("data: "):] for line in raw.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    trace = await Trace.objects.aget()
    assert {c["id"] for c in chunks} == {f"chatcmpl-{trace.uuid.hex}"}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == trace.answer and text
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes[-1] == "stop" and set(finishes[:-1]) == {None}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == trace.total_tokens


def test_a_blocking_budget_of_the_key_already_spent_is_a_429_before_any_turn(agent, alice, team_a):
    key, secret = api_key_create(membership=member_of(alice, team_a), name="ci", scopes=["chat"])
    other, other_secret = api_key_create(membership=member_of(alice, team_a), name="other", scopes=["chat"])
    Budget.objects.create(team=team_a, api_key=key, period="day", limit_usd=Decimal("0.01"), mode="block")
    CostRollup.objects.create(team=team_a, day=timezone.localdate(), agent_id=agent.pk,
                              user_id=alice.pk, api_key_id=key.pk, provider="Demo", model="demo",
                              calls=1, cost_units=2 * 10**8)  # $0.02 through this key today
    body = {"model": agent.slug, "messages": [{"role": "user", "content": "hi"}]}

    response = post(api(secret), body)

    assert response.status_code == 429
    error = error_of(response)
    assert error["code"] == "budget_exceeded" and "$0.02 spent of" in error["message"]
    assert 0 < int(response["Retry-After"]) <= 86_400
    assert not Trace.objects.exists()
    # The budget is the key's: the same person through another key is not held to it.
    budgets_admit(team_id=team_a.pk, user_id=alice.pk, api_key_id=other.pk)


def test_streamed_frames_are_not_repeated_and_a_restarted_step_starts_after_a_blank_line():
    text = _Text()
    frames = [{"step": 2, "offset": 0, "text": "Hel"}, {"step": 2, "offset": 0, "text": "Hel"},
              {"step": 2, "offset": 3, "text": "lo"}, {"step": 2, "offset": 1, "text": "ello!"}]
    assert [text.take(f) for f in frames] == ["Hel", "", "lo", "!"]
    text.restart(2)
    assert text.take({"step": 2, "offset": 0, "text": "Hi"}) == "\n\nHi"
    assert text.step_text == "Hi"
    assert text.take({"step": 5, "offset": 0, "text": "Done"}) == "\n\nDone"
    assert text.step_text == "Done"


def test_the_inspector_says_which_key_a_turn_came_through(agent, alice, team_a, use_redis, worker,
                                                          client_for):
    secret = key_for(alice, team_a)
    response = post(api(secret), {"model": agent.slug, "messages": [{"role": "user", "content": "hi"}]})
    trace = Trace.objects.get(uuid=response["X-Agentsite-Trace-Id"])
    page = client_for(alice).get(f"/traces/{trace.uuid}/").content.decode()
    assert f"through the API key “test” ({trace.api_key.prefix}…)" in page


def test_a_turn_that_failed_is_a_502_the_sdk_must_not_retry(agent, alice, team_a, use_redis, worker):
    provider = agent.provider
    provider.kind, provider.base_url = "openai", "http://127.0.0.1:9/v1"  # nothing answers there
    provider.save()
    response = post(api(key_for(alice, team_a)), {"model": agent.slug,
                                                  "messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == 502, response.content
    assert response["X-Should-Retry"] == "false"  # the turn ran: sending it again is not free
    trace = Trace.objects.get()
    assert trace.status == "failed" and error_of(response)["message"] == trace.error
    assert response["X-Agentsite-Trace-Id"] == trace.uuid.hex
