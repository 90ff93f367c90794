"""A W3C ``traceparent`` header (with its ``tracestate``) on ``POST /v1/chat/completions`` and on
the REST send lands in the turn's ``Trace.meta``; an invalid one is ignored and the request
succeeds as without it."""

from __future__ import annotations

import json

import pytest

from tests.agents.api.rest_keys import key_client
from traces.models import Trace

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TRACESTATE = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
INVALID = "00-00000000000000000000000000000000-00f067aa0ba902b7-01"


def chat(client, agent, **headers):
    body = {"model": agent.slug, "messages": [{"role": "user", "content": "What is 6 * 7?"}]}
    return client.post("/v1/chat/completions", json.dumps(body), content_type="application/json",
                        headers=headers)


def send(client, conversation, **headers):
    return client.post(f"/api/v1/conversations/{conversation.uuid}/messages", {"text": "hello"},
                       content_type="application/json", headers=headers)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("traceparent", "kept"), [(TRACEPARENT, True), (INVALID, False)])
def test_the_chat_completions_traceparent_lands_on_the_trace_unless_invalid(
        agent, alice, team_a, turns_run, use_redis, traceparent, kept):
    response = chat(key_client(alice, team_a, ["chat"]), agent, traceparent=traceparent,
                    tracestate=TRACESTATE)

    assert response.status_code == 200, response.content
    trace = Trace.objects.get(uuid=response["X-Agentsite-Trace-Id"])
    assert trace.status == "completed" and "42" in trace.answer
    expected = {"traceparent": TRACEPARENT, "tracestate": TRACESTATE} if kept else {}
    assert {k: v for k, v in trace.meta.items() if k in ("traceparent", "tracestate")} == expected


@pytest.mark.django_db
def test_the_rest_sends_traceparent_lands_on_the_trace(conversation, alice, team_a, sent_turns):
    response = send(key_client(alice, team_a, ["chat"]), conversation, traceparent=TRACEPARENT)

    assert response.status_code == 202, response.content
    trace = Trace.objects.get(uuid=response.json()["trace"]["id"])
    assert trace.meta == {"traceparent": TRACEPARENT}


@pytest.mark.django_db
@pytest.mark.parametrize("traceparent", [INVALID, "not-a-traceparent", "x" * 600])
def test_an_invalid_traceparent_on_the_rest_send_is_ignored(conversation, alice, team_a,
                                                             sent_turns, traceparent):
    response = send(key_client(alice, team_a, ["chat"]), conversation, traceparent=traceparent,
                    tracestate=TRACESTATE)

    assert response.status_code == 202, response.content
    trace = Trace.objects.get(uuid=response.json()["trace"]["id"])
    assert trace.meta == {}
