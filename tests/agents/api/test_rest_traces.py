"""``/api/v1/traces``: the inspector's privacy rule and filters through a key, a trace with its
steps (no payloads), a step's payloads on demand, the export, and conditional reads (ETag)."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext

from agents.chat.services import conversation_create
from agents.models import Conversation
from tests.agents.api.rest_keys import error_of, key_client
from tests.members import member_of
from traces.models import Trace
from traces.sample import make_sample_trace

pytestmark = pytest.mark.django_db


def ids(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [row["id"] for row in response.json()["data"]]


# -- the list ---------------------------------------------------------------------------------------
def test_a_member_lists_their_own_and_shared_traces(agent, alice, bob, team_a):
    bobs = make_sample_trace(conversation=conversation_create(agent=agent, membership=member_of(bob, team_a)), user=bob, steps=2)
    alices = make_sample_trace(conversation=conversation_create(agent=agent, membership=member_of(alice, team_a)),
                               user=alice, steps=2)
    client = key_client(bob, team_a, ["traces:read"])

    assert ids(client.get("/api/v1/traces")) == [str(bobs.uuid)]
    assert client.get(f"/api/v1/traces/{alices.uuid}").status_code == 404
    Conversation.objects.filter(pk=alices.conversation_id).update(shared=True)
    assert ids(client.get("/api/v1/traces")) == [str(alices.uuid), str(bobs.uuid)]


def test_the_inspectors_filters_apply(conversation, alice, team_a, make_agent):
    done = make_sample_trace(conversation=conversation, user=alice, steps=2)
    failed = make_sample_trace(conversation=conversation, user=alice, steps=2)
    Trace.objects.filter(pk=failed.pk).update(status="failed")
    other_agent = make_agent(name="Other")
    other = make_sample_trace(conversation=conversation_create(agent=other_agent, membership=member_of(alice, team_a)),
                              user=alice, steps=2)
    client = key_client(alice, team_a, ["traces:read"])

    assert ids(client.get("/api/v1/traces", {"status": "failed"})) == [str(failed.uuid)]
    assert ids(client.get("/api/v1/traces", {"agent": other_agent.slug})) == [str(other.uuid)]
    assert ids(client.get("/api/v1/traces", {"agent": str(conversation.agent.uuid), "status": "completed"})) == [
        str(done.uuid)]
    assert ids(client.get("/api/v1/traces", {"agent": "no-such-agent"})) == []
    assert len(ids(client.get("/api/v1/traces", {"user": "alice", "min_cost": "0.01"}))) == 3


@pytest.mark.parametrize(("params", "param"), [({"status": "sleeping"}, "status"), ({"min_cost": "lots"}, "min_cost"),
                                               ({"feedback": "meh"}, "feedback"), ({"date_from": "yesterday"}, "date_from")])
def test_a_bad_filter_is_a_400_naming_it(sample_trace, alice, team_a, params, param):
    response = key_client(alice, team_a, ["traces:read"]).get("/api/v1/traces", params)

    assert response.status_code == 400
    assert error_of(response)["param"] == param


def test_traces_are_paginated_newest_first(conversation, alice, team_a):
    made = [make_sample_trace(conversation=conversation, user=alice, steps=2) for _ in range(3)]
    client = key_client(alice, team_a, ["traces:read"])

    first = client.get("/api/v1/traces", {"limit": 2}).json()
    second = client.get("/api/v1/traces", {"limit": 2, "cursor": first["next_cursor"]}).json()

    assert [t["id"] for t in first["data"] + second["data"]] == [str(t.uuid) for t in reversed(made)]
    assert second["next_cursor"] is None


def test_traces_need_the_traces_scope(sample_trace, alice, team_a):
    client = key_client(alice, team_a, ["chat", "costs:read"])

    for path in ("", f"/{sample_trace.uuid}", f"/{sample_trace.uuid}/steps/1/payload", f"/{sample_trace.uuid}/export"):
        response = client.get(f"/api/v1/traces{path}")
        assert response.status_code == 403, path
        assert error_of(response)["code"] == "insufficient_scope"


def test_another_teams_trace_is_a_404(sample_trace, charlie, team_b):
    client = key_client(charlie, team_b, ["traces:read"])

    for path in (f"/{sample_trace.uuid}", f"/{sample_trace.uuid.hex}/steps/1/payload", f"/{sample_trace.uuid}/export",
                 f"/{sample_trace.pk}"):
        response = client.get(f"/api/v1/traces{path}")
        assert response.status_code == 404, path
        assert error_of(response)["type"] == "not_found_error"
    assert ids(client.get("/api/v1/traces")) == []


# -- one trace --------------------------------------------------------------------------------------
def test_a_trace_comes_with_its_steps_without_payloads(sample_trace, alice, team_a):
    response = key_client(alice, team_a, ["traces:read"]).get(f"/api/v1/traces/{sample_trace.uuid.hex}")

    assert response.status_code == 200
    body = response.json()
    assert body["id"] == str(sample_trace.uuid) and body["status"] == "completed"
    assert body["message"] == "Generated question" and body["answer"] == "Generated answer"
    assert body["cost_usd"] == "0.12" and body["usage"]["input_tokens"] == sample_trace.input_tokens
    assert [s["seq"] for s in body["steps"]] == list(range(1, 13))
    first = body["steps"][0]
    assert first["kind"] == "llm_request" and first["usage"]["input_tokens"] == 240 and first["cost_usd"] == "0.02"
    assert "payloads" not in first and "x" * 100 not in response.content.decode()
    assert [s["iteration"] for s in body["trajectory_states"]] == list(range(1, 7))
    assert body["inspector_url"].endswith(f"/traces/{sample_trace.uuid}/")


def test_a_steps_payloads_come_on_demand(sample_trace, alice, team_a):
    client = key_client(alice, team_a, ["traces:read"])

    both = client.get(f"/api/v1/traces/{sample_trace.uuid}/steps/1/payload").json()
    output = client.get(f"/api/v1/traces/{sample_trace.uuid}/steps/2/payload", {"kind": "output"}).json()

    assert both["kind"] == "llm_request" and set(both["payloads"]) == {"request", "response"}
    assert both["payloads"]["request"]["seq"] == 1 and len(both["payloads"]["request"]["text"]) == 2000
    assert list(output["payloads"]) == ["output"]
    assert client.get(f"/api/v1/traces/{sample_trace.uuid}/steps/99/payload").status_code == 404
    bad = client.get(f"/api/v1/traces/{sample_trace.uuid}/steps/1/payload", {"kind": "secrets"})
    assert bad.status_code == 400 and error_of(bad)["param"] == "kind"
    not_a_number = client.get(f"/api/v1/traces/{sample_trace.uuid}/steps/first/payload")
    assert not_a_number.status_code == 400 and error_of(not_a_number)["param"] == "seq"


def test_the_export_is_the_inspectors_download(sample_trace, alice, team_a):
    response = key_client(alice, team_a, ["traces:read"]).get(f"/api/v1/traces/{sample_trace.uuid}/export")

    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    body = json.loads(b"".join(response.streaming_content))
    assert body["format"] == "agentsite.trace/1" and body["uuid"] == str(sample_trace.uuid)
    assert len(body["steps"]) == 12 and set(body["steps"][1]["payloads"]) == {"arguments", "output"}
    assert len(body["trajectory_states"]) == 6


# -- conditional reads ------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["", "/steps/1/payload", "/export"])
def test_an_unchanged_trace_is_a_304_until_it_changes(sample_trace, alice, team_a, path):
    client = key_client(alice, team_a, ["traces:read"])
    url = f"/api/v1/traces/{sample_trace.uuid}{path}"

    first = client.get(url)
    etag = first["ETag"]
    again = client.get(url, HTTP_IF_NONE_MATCH=etag)
    weak = client.get(url, HTTP_IF_NONE_MATCH=f'"other", W/{etag}')
    Trace.objects.filter(pk=sample_trace.pk).update(event_seq=F("event_seq") + 1)
    changed = client.get(url, HTTP_IF_NONE_MATCH=etag)

    assert first.status_code == 200 and etag
    assert again.status_code == weak.status_code == 304 and again["ETag"] == etag and not again.content
    assert changed.status_code == 200 and changed["ETag"] != etag


def test_a_running_traces_export_has_no_etag(sample_trace, alice, team_a):
    Trace.objects.filter(pk=sample_trace.pk).update(status="running")

    response = key_client(alice, team_a, ["traces:read"]).get(f"/api/v1/traces/{sample_trace.uuid}/export")

    assert response.status_code == 200 and not response.has_header("ETag")


def test_lists_take_the_same_queries_for_one_row_or_many(conversation, alice, bob, team_a, agent):
    client = key_client(alice, team_a)
    paths = ("/api/v1/traces", "/api/v1/conversations", f"/api/v1/conversations/{conversation.uuid}/messages",
             "/api/v1/agents")

    def queries() -> list[int]:
        counts = []
        for path in paths:
            with CaptureQueriesContext(connection) as captured:
                assert client.get(path).status_code == 200
            counts.append(len(captured))
        return counts

    make_sample_trace(conversation=conversation, user=alice, steps=2)
    queries()  # the key's first use is noted once
    few = queries()
    for _ in range(4):
        other = conversation_create(agent=agent, membership=member_of(bob, team_a))
        make_sample_trace(conversation=other, user=bob, steps=2)
        turn = make_sample_trace(conversation=conversation, user=alice, steps=2)
        conversation.messages.create(role="assistant", text="answer", trace=turn, parent_turn=turn, author=alice)
    assert queries() == few
