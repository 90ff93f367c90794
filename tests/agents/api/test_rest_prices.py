"""``/api/v1/prices``: the prices in force for the team: the global table and the team's own
rows, never another team's, and only the version in force of each."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.test import Client

from tests.agents.api.rest_keys import key_client
from traces.models import ModelPrice

pytestmark = pytest.mark.django_db

EARLY = datetime(2020, 1, 1, tzinfo=UTC)


def price(team, model: str, *, inp: str = "1", version: int = 1, since=EARLY) -> ModelPrice:
    return ModelPrice.objects.create(team=team, provider_kind="demo", model=model, input_per_mtok=Decimal(inp),
                                     output_per_mtok=Decimal("2"), effective_from=since, version=version,
                                     label="negotiated")


def all_prices(client) -> list[dict]:
    rows, cursor = [], None
    while True:
        body = client.get("/api/v1/prices", {"limit": 200, **({"cursor": cursor} if cursor else {})}).json()
        rows += body["data"]
        cursor = body["next_cursor"]
        if cursor is None:
            return rows


def test_it_lists_the_global_table_and_the_teams_own_prices_in_force(alice, team_a, charlie, team_b):
    old = price(team_a, "house-model", inp="5")
    current = price(team_a, "house-model", inp="3", version=2, since=datetime(2021, 1, 1, tzinfo=UTC))
    theirs = price(team_b, "their-model")
    client = key_client(alice, team_a, ["chat"])  # any scope reads prices

    rows = {row["id"]: row for row in all_prices(client)}

    assert str(current.uuid) in rows and str(old.uuid) not in rows and str(theirs.uuid) not in rows
    mine = rows[str(current.uuid)]
    assert mine == {**mine, "scope": "team", "model": "house-model", "input_per_mtok": "3", "output_per_mtok": "2",
                    "cache_read_per_mtok": "3", "version": 2, "label": "negotiated", "provider_kind": "demo"}
    assert any(row["scope"] == "global" for row in rows.values())


def test_prices_are_paginated_without_repeats(alice, team_a):
    client = key_client(alice, team_a, ["costs:read"])
    whole = [row["id"] for row in all_prices(client)]

    first = client.get("/api/v1/prices", {"limit": 3}).json()
    second = client.get("/api/v1/prices", {"limit": 3, "cursor": first["next_cursor"]}).json()

    assert [row["id"] for row in first["data"] + second["data"]] == whole[:6]
    assert len(set(whole)) == len(whole)


def test_prices_need_a_key(alice, team_a):
    assert Client().get("/api/v1/prices").status_code == 401
