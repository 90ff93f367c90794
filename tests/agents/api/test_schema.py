"""The API's OpenAPI schema is valid, and every operation it lists answers as it documents:
each path and method is called once, with a key that has every scope and ids of real objects,
and answers with a status the schema names for it (never a 500)."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client
from openapi_spec_validator import validate

from tests.agents.api.rest_keys import key_client

pytestmark = pytest.mark.django_db(transaction=True)

PARAM = re.compile(r"\{(\w+)\}")
# Operations that answer a documented error for the objects at hand: deciding on a call needs
# one that waits for approval, and the sample trace has ended (409).
CONFLICTS = {("post", "/api/v1/traces/{trace_id}/approvals/{call_id}")}


def schema() -> dict:
    response = Client().get("/api/v1/openapi.json")
    assert response.status_code == 200
    return json.loads(response.content)


def test_the_schema_is_valid_openapi():
    spec = schema()

    validate(spec)
    assert spec["info"]["title"] == "agentsite API"
    rest = [path for path in spec["paths"] if path.startswith("/api/v1/")]
    assert {"/api/v1/agents", "/api/v1/conversations", "/api/v1/traces", "/api/v1/costs", "/api/v1/prices"} <= set(rest)


def test_every_operation_answers_as_documented(agent, conversation, sample_trace, alice, team_a, turns_run, use_redis):
    client = key_client(alice, team_a)
    values = {"agent_id": agent.slug, "conversation_id": str(conversation.uuid), "trace_id": sample_trace.uuid.hex,
              "seq": "1", "call_id": "call_1", "model": agent.slug,
              "response_id": f"resp_{sample_trace.uuid.hex}"}
    # A path's own values: the response cancelled and listed is the one created (the other is
    # deleted first).
    path_values: dict[str, dict[str, str]] = {}
    bodies = {
        "/api/v1/conversations": {"agent": agent.slug, "title": "From the schema test"},
        "/api/v1/conversations/{conversation_id}/messages": {"text": "What is 2 + 2?"},
        "/v1/chat/completions": {"model": agent.slug, "messages": [{"role": "user", "content": "hi"}]},
        "/v1/responses": {"model": agent.slug, "input": "hi"},
        "/api/v1/traces/{trace_id}/approvals/{call_id}": {"approved": True},
        "/api/v1/traces/{trace_id}/fork": {"seq": sample_trace.steps.filter(kind="llm_request")
                                           .order_by("seq").values_list("seq", flat=True).first()},
    }
    queries = {"/api/v1/traces/compare": {"a": sample_trace.uuid.hex, "b": sample_trace.uuid.hex}}
    called, problems = [], []
    for path, operations in schema()["paths"].items():
        these = {**values, **path_values.get(path, {})}
        url = PARAM.sub(lambda m, these=these: these[m.group(1)], path)
        for method, operation in operations.items():
            if method == "post":
                response = client.post(url, bodies.get(path, {}), content_type="application/json")
                if path == "/v1/responses" and response.status_code == 200:
                    created = {"response_id": response.json()["id"]}
                    path_values["/v1/responses/{response_id}/cancel"] = created
                    path_values["/v1/responses/{response_id}/input_items"] = created
            else:
                response = getattr(client, method)(url, queries.get(path))
            documented = {int(code) for code in operation["responses"]}
            called.append((method, path, response.status_code))
            if response.status_code not in documented or response.status_code >= 500:
                problems.append((method, path, response.status_code, documented))
            elif response.status_code < 300 and not response.streaming and response.content:
                response.json()  # a JSON answer, whatever its schema

    assert not problems
    assert all(status < 300 or (method, path) in CONFLICTS for method, path, status in called), called
    assert len(called) >= 15


def test_operation_ids_are_short_unique_names_for_generated_clients(client):
    schema = client.get("/api/v1/openapi.json").json()
    ids = [op["operationId"] for ops in schema["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids))
    assert {"chat_completions", "models_list", "trace_detail", "cost_report"} <= set(ids)
    assert all("." not in i and not i.startswith("agents_") for i in ids)


def _unique_keys(pairs):
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), f"duplicated keys: {keys}"  # Swagger UI refuses them
    return dict(pairs)


def test_the_schema_has_no_duplicated_keys(client):
    json.loads(client.get("/api/v1/openapi.json").content, object_pairs_hook=_unique_keys)


def test_a_body_over_the_limit_is_a_413_in_openais_shape(agent, alice, team_a, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = key_client(alice, team_a).post("/v1/chat/completions", "{" + " " * 2000 + "}",
                                              content_type="application/json")
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"


def test_an_unknown_api_path_is_a_json_404(client):
    for path in ("/api/v1/nothing-here", "/v1/embeddings"):
        response = client.get(path)
        assert response.status_code == 404 and response.json()["error"]["code"] == "unknown_endpoint"


def test_a_post_to_an_unknown_api_path_is_a_json_404_not_a_csrf_page():
    """What OpenAI's clients send to endpoints agentsite does not have: a POST with a key and
    no cookie or CSRF token. They must read the answer as a missing endpoint."""
    strict = Client(enforce_csrf_checks=True, HTTP_AUTHORIZATION="Bearer ask_unknown")
    for path in ("/v1/embeddings", "/v1/completions", "/api/v1/nothing-here"):
        response = strict.post(path, "{}", content_type="application/json")
        assert response.status_code == 404, (path, response.content[:200])
        assert response["Content-Type"] == "application/json"
        assert response.json()["error"]["code"] == "unknown_endpoint"
    # One that exists answers as the API, never with the CSRF page: here, the key is unknown.
    response = strict.post("/v1/responses", "{}", content_type="application/json")
    assert response.status_code == 401 and response.json()["error"]["type"] == "authentication_error"


@pytest.mark.parametrize(("method", "path", "allowed"), [
    ("get", "/v1/chat/completions", {"POST"}),
    ("delete", "/v1/models", {"GET"}),
    ("put", "/api/v1/conversations", {"GET", "POST"}),
])
def test_a_method_a_path_does_not_take_is_a_json_405_naming_the_ones_it_does(method, path, allowed):
    response = getattr(Client(enforce_csrf_checks=True), method)(path)
    assert response.status_code == 405
    error = response.json()["error"]
    assert error["code"] == "method_not_allowed" and method.upper() in error["message"]
    assert {m.strip() for m in response["Allow"].split(",")} == allowed
