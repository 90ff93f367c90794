"""The API's bodies: JSON only, with the site's input rules (control characters stripped,
nesting bounded), each refusal a 400 in OpenAI's shape, never a 500."""

from __future__ import annotations

import json

import pytest

from agents.models import Conversation
from tests.agents.api.rest_keys import error_of, key_client

pytestmark = pytest.mark.django_db


def test_a_form_body_is_refused_with_a_400_not_a_500(agent, alice, team_a):
    response = key_client(alice, team_a).post("/api/v1/conversations", {"agent": agent.slug})
    assert response.status_code == 400
    assert "JSON" in error_of(response)["message"]


def test_json_nested_too_deep_is_a_400(agent, alice, team_a):
    body = "[" * 5000 + "]" * 5000
    response = key_client(alice, team_a).post("/api/v1/conversations", body,
                                              content_type="application/json")
    assert response.status_code == 400 and "nested deeper" in error_of(response)["message"]


def test_broken_json_is_a_400(agent, alice, team_a):
    response = key_client(alice, team_a).post("/api/v1/conversations", '{"agent": ',
                                              content_type="application/json")
    assert response.status_code == 400 and error_of(response)["code"] == "invalid_json"


def test_control_characters_are_stripped_from_every_string(agent, alice, team_a):
    response = key_client(alice, team_a).post(
        "/api/v1/conversations", json.dumps({"agent": agent.slug, "title": "pla\x00ns\x07 for Q3"}),
        content_type="application/json")
    assert response.status_code == 201, response.content
    assert Conversation.objects.get().title == "plans for Q3"
