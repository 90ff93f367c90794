"""``/api/v1/agents``, and what every REST endpoint shares: a key is required (401 without a
valid one), ids are public ones, another team's object is a 404, lists are paginated by cursor."""

from __future__ import annotations

import base64

import pytest
from django.test import Client

from agentsite.api_keys import api_key_revoke
from tests.agents.api.rest_keys import error_of, key_client
from tests.members import member_of

pytestmark = pytest.mark.django_db


def test_it_lists_the_teams_agents_with_their_public_ids(agent, make_agent, charlie, team_b, alice, team_a):
    make_agent(name="Other team's", team=team_b)
    client = key_client(alice, team_a, ["costs:read"])  # any scope reads agents

    response = client.get("/api/v1/agents")

    assert response.status_code == 200
    body = response.json()
    assert body["next_cursor"] is None
    assert [(a["id"], a["slug"], a["name"]) for a in body["data"]] == [(str(agent.uuid), "helper", "Helper")]
    assert body["data"][0]["model"] == "demo" and body["data"][0]["turn_time_limit_s"] == agent.turn_time_limit_s


@pytest.mark.parametrize("form", ["dashed", "hex", "slug"])
def test_it_reads_an_agent_by_id_or_slug(agent, alice, team_a, form):
    ident = {"dashed": str(agent.uuid), "hex": agent.uuid.hex, "slug": agent.slug}[form]

    response = key_client(alice, team_a, ["chat"]).get(f"/api/v1/agents/{ident}")

    assert response.status_code == 200
    assert response.json()["id"] == str(agent.uuid)


def test_another_teams_agent_is_a_404(make_agent, team_b, charlie, alice, team_a):
    theirs = make_agent(name="Theirs", team=team_b)
    client = key_client(alice, team_a, ["chat"])

    for ident in (str(theirs.uuid), theirs.slug, str(theirs.pk), "not-an-agent"):
        response = client.get(f"/api/v1/agents/{ident}")
        assert response.status_code == 404, ident
        assert error_of(response)["type"] == "not_found_error"


def test_without_a_valid_key_it_is_a_401(agent, alice, team_a):
    key_client(alice, team_a)

    missing = Client().get("/api/v1/agents")
    wrong = Client(HTTP_AUTHORIZATION="Bearer ask_nothing_like_a_key").get("/api/v1/agents")

    assert missing.status_code == wrong.status_code == 401
    assert error_of(missing)["code"] == "missing_api_key"
    assert error_of(wrong)["code"] == "invalid_api_key"


def test_a_revoked_key_is_a_401(agent, alice, team_a):
    client = key_client(alice, team_a)
    api_key_revoke(key=client.key, membership=member_of(alice, client.key))

    response = client.get("/api/v1/agents")

    assert response.status_code == 401
    assert error_of(response)["code"] == "revoked_api_key"


def test_pages_follow_each_other_without_repeats(make_agent, alice, team_a):
    made = [make_agent(name=f"Agent {n}") for n in range(5)]
    client = key_client(alice, team_a)

    seen, cursor, pages = [], None, 0
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        body = client.get("/api/v1/agents", params).json()
        seen += [a["id"] for a in body["data"]]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            break

    assert pages == 3
    assert seen == [str(a.uuid) for a in reversed(made)]  # newest first


@pytest.mark.parametrize("cursor", ["zzz", "!!", base64.urlsafe_b64encode(b"12").decode(),
                                    base64.urlsafe_b64encode(b"c1:-4").decode()])
def test_a_malformed_cursor_is_a_400_naming_it(agent, alice, team_a, cursor):
    response = key_client(alice, team_a).get("/api/v1/agents", {"cursor": cursor})

    assert response.status_code == 400
    error = error_of(response)
    assert error["param"] == "cursor" and error["type"] == "invalid_request_error"


@pytest.mark.parametrize("limit", [0, 201, "many"])
def test_a_limit_out_of_bounds_is_a_400_naming_it(agent, alice, team_a, limit):
    response = key_client(alice, team_a).get("/api/v1/agents", {"limit": limit})

    assert response.status_code == 400
    assert error_of(response)["param"] == "limit"
