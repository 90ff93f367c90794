"""Sending a message and waiting for its answer (``wait``): the turn runs in this process, as a
worker thread would run it, with the offline demo model; the key's rate limits and budgets
(429)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.utils import timezone

from tests.agents.api.rest_keys import error_of, key_client
from traces.models import Budget, CostRollup, Trace


def send(client, conversation, **body):
    return client.post(f"/api/v1/conversations/{conversation.uuid}/messages", body, content_type="application/json")


@pytest.mark.django_db(transaction=True)
def test_with_wait_it_answers_once_the_turn_has_ended(conversation, alice, team_a, turns_run, use_redis):
    client = key_client(alice, team_a, ["chat"])

    response = send(client, conversation, text="What is 12 * (7 + 5)?", wait=True)

    assert response.status_code == 200, response.content
    body = response.json()
    trace = Trace.objects.get(uuid=body["trace"]["id"])
    assert turns_run == [trace.pk]
    assert trace.status == body["trace"]["status"] == "completed"
    assert body["answer"] == trace.answer and "144" in body["answer"]
    assert body["trace"]["usage"]["output_tokens"] == trace.output_tokens > 0
    assert body["trace"]["step_count"] == trace.step_count > 0
    assert trace.api_key == client.key


@pytest.mark.django_db
def test_a_turn_still_running_when_the_wait_is_over_is_a_202(conversation, alice, team_a, sent_turns):
    response = send(key_client(alice, team_a, ["chat"]), conversation, text="hello", wait=True, timeout_s=0.3)

    assert response.status_code == 202
    body = response.json()
    assert body["trace"]["status"] == "queued" and body["answer"] is None


@pytest.mark.django_db
def test_over_the_keys_rate_limit_it_is_a_429_with_retry_after(conversation, alice, team_a, sent_turns, use_redis):
    client = key_client(alice, team_a, ["chat"], rpm_limit=1)  # a new key: a window of its own

    first = send(client, conversation, text="one")
    second = send(client, conversation, text="two")

    assert first.status_code == 202
    assert second.status_code == 429
    assert int(second["Retry-After"]) > 0
    assert error_of(second)["type"] == "rate_limit_error"
    assert Trace.objects.count() == 1


@pytest.mark.django_db
def test_a_blocking_budget_of_the_key_already_spent_is_a_429(conversation, alice, team_a, sent_turns):
    client = key_client(alice, team_a, ["chat"])
    Budget.objects.create(team=team_a, api_key=client.key, period="day", limit_usd=Decimal("0.5"), mode="block")
    CostRollup.objects.create(team=team_a, day=timezone.localdate(), user_id=alice.pk, api_key_id=client.key.pk,
                              provider="Demo", model="demo", calls=1, cost_units=10_000_000_000)

    response = send(client, conversation, text="one more")

    assert response.status_code == 429
    assert error_of(response)["code"] == "budget_exceeded" and int(response["Retry-After"]) > 0
    assert not Trace.objects.exists()
