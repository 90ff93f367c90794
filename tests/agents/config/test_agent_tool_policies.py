"""The agent's own policy per tool (allow / ask a person / deny over the team default), set where
its tools are chosen: kept in ``Agent.tool_policies``, in a new version and in the audit trail,
limited to the agent's team."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from agents.config.versions import agent_revert, agent_save, agent_version_diff
from agents.models import Agent, AgentVersion, Tool
from agentsite.models import AuditEvent

from .test_agent_admin import agent_data, change_url


@pytest.fixture
def helper(make_agent):
    return make_agent(name="Helper", tools=("calculator", "current_time", "memory_forget"),
                      approval=("memory_forget",))


def policy(name: str) -> str:
    return f"tool_policy__{name}"


def test_setting_a_policy_keeps_it_in_the_agent_a_new_version_and_the_audit(client_for, alice, helper):
    c = client_for(alice)
    response = c.post(change_url(helper), agent_data(helper, **{policy("calculator"): "deny",
                                                                policy("memory_forget"): "allow"}))
    assert response.status_code == 302, response.content.decode()[:3000]
    helper.refresh_from_db()
    assert helper.tool_policies == {"calculator": "deny", "memory_forget": "allow"}
    latest = helper.versions.get(number=helper.version)
    assert latest.snapshot["tool_policies"] == {"calculator": "deny", "memory_forget": "allow"}
    event = AuditEvent.objects.get(object_type="agents.Agent", action="update")
    assert event.changes["tool_policies"] == ({}, {"calculator": "deny", "memory_forget": "allow"})

    # The diff reads as a sentence per tool.
    previous = helper.versions.get(number=helper.version - 1)
    diff = {d.name: d for d in agent_version_diff(old=previous, new=latest)}["tool_policies"]
    assert diff.notes == ("calculator: team default → deny", "memory_forget: team default → allow")
    page = c.get(reverse("admin:agents_agent_version_diff", args=[helper.pk])).content.decode()
    assert "calculator: team default → deny" in page and "Tool policies (this agent)" in page

    # The change page shows the agent's choice and what applies.
    form = c.get(change_url(helper)).content.decode()
    assert '<option value="deny" selected>Deny</option>' in form
    assert ('<span class="effective-label">Deny</span> <span class="quiet effective-source">(this agent)</span>'
            in form)
    assert "Team default (ask a person)" in form  # memory_forget's team policy


def test_team_default_removes_the_agents_own_policy(client_for, alice, helper):
    c = client_for(alice)
    c.post(change_url(helper), agent_data(helper, **{policy("calculator"): "ask"}))
    helper.refresh_from_db()
    assert helper.tool_policies == {"calculator": "ask"}
    version = helper.version

    c.post(change_url(helper), agent_data(helper, **{policy("calculator"): ""}))
    helper.refresh_from_db()
    assert helper.tool_policies == {} and helper.version == version + 1
    # Choosing what the team has already is no override either, and no new version.
    c.post(change_url(helper), agent_data(helper, **{policy("calculator"): "allow",
                                                     policy("memory_forget"): "ask"}))
    helper.refresh_from_db()
    assert helper.tool_policies == {} and helper.version == version + 1


def test_a_policy_is_kept_only_for_the_tools_the_agent_uses(client_for, alice, helper):
    calculator = Tool.objects.get(team=helper.team, name="calculator")
    client_for(alice).post(change_url(helper), agent_data(
        helper, tools=[calculator.pk], **{policy("calculator"): "deny", policy("current_time"): "deny"}))
    helper.refresh_from_db()
    assert list(helper.tools.all()) == [calculator] and helper.tool_policies == {"calculator": "deny"}


def test_a_foreign_or_unknown_tool_name_is_refused_with_a_sentence(client_for, alice, helper, team_b):
    Tool.objects.create(team=team_b, name="spy", kind="builtin")
    c = client_for(alice)
    for name in ("spy", "no_such_tool"):
        response = c.post(change_url(helper), agent_data(helper, **{policy(name): "allow"}))
        body = response.content.decode()
        assert response.status_code == 200
        assert f"“{name}” is not a tool of this agent&#x27;s team" in body
    bad_value = c.post(change_url(helper), agent_data(helper, **{policy("calculator"): "maybe"}))
    assert bad_value.status_code == 200 and "Choose team default, allow, ask a person or deny for calculator" in bad_value.content.decode()
    helper.refresh_from_db()
    assert helper.tool_policies == {} and not helper.versions.exists()


def test_the_service_refuses_policies_for_other_teams_tools_too(helper, team_b):
    Tool.objects.create(team=team_b, name="spy", kind="builtin")
    helper.tool_policies = {"spy": "allow"}
    with pytest.raises(ValidationError, match="unknown: spy"):
        agent_save(agent=helper)
    helper.tool_policies = {"calculator": "sometimes"}
    with pytest.raises(ValidationError, match="policy of calculator"):
        agent_save(agent=helper)
    helper.tool_policies = ["calculator"]
    with pytest.raises(ValidationError, match="must map tool names"):
        agent_save(agent=helper)
    helper.refresh_from_db()
    assert helper.tool_policies == {}


def test_a_new_agent_gets_its_policies_in_version_1(client_for, alice, helper, team_a):
    tools = {t.name: t.pk for t in Tool.objects.filter(team=team_a)}
    response = client_for(alice).post(reverse("admin:agents_agent_add"), agent_data(
        provider=helper.provider_id, tools=[tools["calculator"], tools["memory_forget"]],
        **{policy("calculator"): "ask", policy("memory_forget"): "deny"}))
    assert response.status_code == 302, response.content.decode()[:3000]
    agent = Agent.objects.get(name="Writer")
    assert agent.tool_policies == {"calculator": "ask", "memory_forget": "deny"}
    assert AgentVersion.objects.get(agent=agent).snapshot["tool_policies"] == agent.tool_policies
    assert AuditEvent.objects.get(object_type="agents.Agent").after["tool_policies"] == agent.tool_policies


def test_the_add_page_shows_each_tool_with_its_policy_and_role_floor(client_for, alice, helper):
    Tool.objects.filter(name="calculator").update(min_role="member")
    page = client_for(alice).get(reverse("admin:agents_agent_add")).content.decode()
    assert 'name="tool_policy__calculator"' in page and "Members and up" in page
    assert "Team default (allow)" in page and "Viewers and up" in page
    assert "not for a viewer's turn" in page  # memory_forget asks a person


def test_revert_restores_the_policies_of_the_version(client_for, alice, helper):
    c = client_for(alice)
    c.post(change_url(helper), agent_data(helper, **{policy("calculator"): "deny"}))
    c.post(change_url(helper), agent_data(helper, **{policy("calculator"): "ask"}))
    helper.refresh_from_db()
    assert helper.version == 3
    agent_revert(agent=helper, version=helper.versions.get(number=2), user=alice)
    helper.refresh_from_db()
    assert helper.tool_policies == {"calculator": "deny"} and helper.version == 4
    # A version kept before policies existed restores none.
    old = helper.versions.get(number=1)
    old.snapshot.pop("tool_policies")
    AgentVersion.objects.filter(pk=old.pk).update(snapshot=old.snapshot)
    agent_revert(agent=helper, version=old, user=alice)
    helper.refresh_from_db()
    assert helper.tool_policies == {}


def test_a_version_kept_before_policies_existed_is_no_change_by_itself(client_for, alice, helper):
    c = client_for(alice)
    c.post(change_url(helper), agent_data(helper, system_prompt="Changed."))
    helper.refresh_from_db()
    latest = helper.versions.get(number=helper.version)
    latest.snapshot.pop("tool_policies")
    AgentVersion.objects.filter(pk=latest.pk).update(snapshot=latest.snapshot)
    c.post(change_url(helper), agent_data(helper))
    helper.refresh_from_db()
    assert helper.version == latest.number
    previous = helper.versions.get(number=latest.number - 1)
    assert "tool_policies" not in {d.name for d in agent_version_diff(old=previous, new=latest)}


def test_charlie_gets_404_and_cannot_set_team_as_policies(client_for, charlie, helper):
    Tool.objects.create(team=helper.team, name="a_only_api", kind="http", url_template="https://a.example/")
    c = client_for(charlie)
    assert c.get(change_url(helper)).status_code == 404
    response = c.post(change_url(helper), agent_data(helper, **{policy("calculator"): "allow"}))
    assert response.status_code == 404
    helper.refresh_from_db()
    assert helper.tool_policies == {}
    # His own add page offers team B's tools only (its built-ins, created on the way).
    page = c.get(reverse("admin:agents_agent_add")).content.decode()
    assert "tool_policy__memory_forget" in page and "a_only_api" not in page


def test_members_and_viewers_cannot_change_policies(client_for, bob, vera, helper):
    for user in (bob, vera):
        c = client_for(user)
        response = c.post(change_url(helper), agent_data(helper, **{policy("calculator"): "deny"}))
        assert response.status_code == 302 and "/admin/login/" in response.url
    helper.refresh_from_db()
    assert helper.tool_policies == {}
