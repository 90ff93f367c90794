"""The personas: one definition for the unit tests' fixtures and the throwaway stack's seed."""

from __future__ import annotations

import pytest

from agentsite.models import Membership, Team
from agentsite.personas import PERSONAS, persona_password, personas_seed


def roles() -> set[tuple[str, str, str]]:
    return set(Membership.objects.values_list("user__username", "team__name", "role"))


def test_the_fixtures_are_the_personas(alice, bob, vera, charlie, team_a, team_b):
    assert roles() == {(name, team, role) for name, (team, role) in PERSONAS.items()}
    assert {team_a.name, team_b.name} == {"Team A", "Team B"} and Team.objects.count() == 2
    assert alice.check_password(persona_password("alice"))


def test_seeding_again_changes_nothing(db):
    first = personas_seed()
    again = personas_seed()
    assert {name: user.pk for name, user in first.items()} == {name: user.pk for name, user in again.items()}
    assert Team.objects.count() == 2 and Membership.objects.count() == len(PERSONAS)


@pytest.mark.django_db
def test_the_stacks_seed_creates_the_personas_with_one_password_and_the_agents():
    from agents.models import Agent
    from agentsite.management.commands.seed_stack import seed
    from agentsite.stack import PASSWORD

    ids = seed({"agents": [{"name": "Helper", "tools": ["current_time"]}, {"name": "Slow", "tools": []}],
                "approval": ["calculator"]})
    assert roles() == {(name, team, role) for name, (team, role) in PERSONAS.items()}
    assert set(ids["people"]) == set(PERSONAS) and ids["password"] == PASSWORD
    team_a = Team.objects.get(uuid=ids["team"])
    assert team_a.name == "Team A"
    assert set(Agent.objects.filter(team=team_a).values_list("name", flat=True)) == {"Helper", "Slow"}
    assert all(m.user.check_password(PASSWORD) for m in Membership.objects.select_related("user"))


@pytest.mark.django_db
def test_the_stacks_seed_gives_an_agent_a_real_provider_when_asked():
    from agents.models import Agent
    from agentsite.management.commands.seed_stack import seed

    ids = seed({"agents": [
        {"name": "Local", "model": "smollm2-135m", "tools": ["current_time"],
         "provider": {"kind": "openai", "base_url": "http://127.0.0.1:8080/v1",
                      "options": {"extra_body": {"tool_choice": "auto"}}},
         "fields": {"tool_dispatcher": "xml"}},
        {"name": "Helper", "tools": []}]})
    local = Agent.objects.select_related("provider").get(uuid=ids["agents"]["Local"])
    assert (local.model, local.tool_dispatcher) == ("smollm2-135m", "xml")
    assert (local.provider.name, local.provider.kind, local.provider.base_url) == (
        "Provider for Local", "openai", "http://127.0.0.1:8080/v1")
    assert local.provider.options == {"extra_body": {"tool_choice": "auto"}}
    helper = Agent.objects.select_related("provider").get(uuid=ids["agents"]["Helper"])
    assert (helper.model, helper.provider.kind, helper.provider.name) == ("demo", "demo", "Demo for Helper")
