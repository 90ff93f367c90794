"""Agents in the admin: every setting, choices limited to the team, a version kept for every
change, the versions page with diffs and revert, team scope and the audit trail."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.messages import get_messages
from django.core.exceptions import ValidationError
from django.urls import reverse

from agents.chat.services import conversation_create
from agents.config.versions import agent_revert, agent_save, agent_version_diff
from agents.models import Agent, AgentVersion, Provider, Tool
from agents.turns.services import turn_start
from agentsite.models import AuditEvent, Membership
from tests.members import member_of


def agent_data(agent: Agent | None = None, **changes) -> dict:
    """The agent form as the admin posts it, from ``agent``'s current values."""
    if agent is None:
        data = {
            "name": "Writer", "description": "", "model": "demo", "fallbacks": "", "temperature": "",
            "max_output_tokens": "", "allowed_models": "", "system_prompt": "Be kind.",
            "tool_dispatcher": "auto", "parallel_tools": "on", "max_tool_iterations": "10",
            "approval_timeout_s": "300", "history_max_messages": "50", "compaction_enabled": "on",
            "compaction_threshold_tokens": "10000", "compaction_preserve_recent": "4",
            "trajectory_states": "on", "memory_recall_limit": "5", "memory_min_relevance": "0.4",
            "step_timeout_s": "120", "turn_time_limit_s": "600", "max_tokens_per_turn": "",
            "max_cost_per_turn": "", "allow_request_params": "on",
        }
    else:
        data = {
            "name": agent.name, "description": agent.description, "provider": agent.provider_id,
            "model": agent.model,
            "fallbacks": "\n".join(f"{e['provider']} / {e['model']}" for e in agent.fallbacks),
            "temperature": "" if agent.temperature is None else agent.temperature,
            "max_output_tokens": agent.max_output_tokens or "",
            "allowed_models": "\n".join(agent.allowed_models), "system_prompt": agent.system_prompt,
            "tools": list(agent.tools.values_list("pk", flat=True)),
            "tool_dispatcher": agent.tool_dispatcher, "max_tool_iterations": agent.max_tool_iterations,
            "approval_timeout_s": agent.approval_timeout_s,
            "history_max_messages": agent.history_max_messages,
            "compaction_threshold_tokens": agent.compaction_threshold_tokens,
            "compaction_preserve_recent": agent.compaction_preserve_recent,
            "memory_recall_limit": agent.memory_recall_limit,
            "memory_min_relevance": agent.memory_min_relevance, "step_timeout_s": agent.step_timeout_s,
            "turn_time_limit_s": agent.turn_time_limit_s,
            "max_tokens_per_turn": agent.max_tokens_per_turn or "",
            "max_cost_per_turn": "" if agent.max_cost_per_turn is None else agent.max_cost_per_turn,
        }
        for flag in ("parallel_tools", "compaction_enabled", "trajectory_states", "inject_trajectory_state",
                     "memory_auto_save", "interrupt_on_new_message", "allow_request_params"):
            if getattr(agent, flag):
                data[flag] = "on"
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def change_url(agent: Agent) -> str:
    return reverse("admin:agents_agent_change", args=[agent.pk])


def messages_of(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


@pytest.fixture
def helper(make_agent):
    return make_agent(name="Helper", system_prompt="Be helpful.\nAnswer briefly.")


@pytest.fixture
def other_provider(team_a):
    return Provider.objects.create(team=team_a, name="Backup box", kind="demo")


# -- every setting, saved with a version ---------------------------------------------------------
def test_creating_an_agent_keeps_version_1_with_tools_and_provider_names(client_for, alice, helper, team_a):
    c = client_for(alice)
    tools = list(Tool.objects.filter(team=team_a))
    response = c.post(reverse("admin:agents_agent_add"), agent_data(
        provider=helper.provider_id, tools=[t.pk for t in tools], max_cost_per_turn="0.25",
        allowed_models="demo-fast\ndemo-careful\ndemo-fast", temperature="0.3", memory_auto_save="on"))
    assert response.status_code == 302, response.content.decode()[:3000]
    agent = Agent.objects.get(name="Writer")
    assert agent.team == team_a and agent.version == 1
    assert agent.allowed_models == ["demo-fast", "demo-careful"] and agent.memory_auto_save
    version = AgentVersion.objects.get(agent=agent)
    assert version.number == 1 and version.created_by == alice
    snap = version.snapshot
    assert snap["tools"] == ["calculator", "current_time"] and snap["provider"] == "Demo for Helper"
    assert snap["system_prompt"] == "Be kind." and snap["max_cost_per_turn"] == "0.250000"
    assert snap["temperature"] == 0.3 and "team" not in snap and "version" not in snap
    event = AuditEvent.objects.get(object_type="agents.Agent")
    assert event.action == "create" and event.after["name"] == "Writer"


def test_a_save_keeps_a_version_only_when_the_configuration_changed(client_for, alice, helper):
    c = client_for(alice)
    # An agent made before versions were kept gets its state kept as the baseline first.
    assert not helper.versions.exists()
    unchanged = c.post(change_url(helper), agent_data(helper))
    assert unchanged.status_code == 302
    assert list(helper.versions.values_list("number", flat=True)) == [1]
    assert any("stays version 1" in m for m in messages_of(unchanged))

    c.post(change_url(helper), agent_data(helper, system_prompt="Be brief."))
    helper.refresh_from_db()
    assert helper.version == 2 and helper.versions.get(number=2).snapshot["system_prompt"] == "Be brief."
    assert helper.versions.get(number=1).snapshot["system_prompt"] == "Be helpful.\nAnswer briefly."

    calculator = Tool.objects.get(name="calculator")
    response = c.post(change_url(helper), agent_data(helper, tools=[calculator.pk]))
    helper.refresh_from_db()
    assert helper.version == 3 and helper.versions.get(number=3).snapshot["tools"] == ["calculator"]
    assert any("kept as version 3" in m for m in messages_of(response))
    assert list(helper.tools.all()) == [calculator]
    c.post(change_url(helper), agent_data(helper))
    helper.refresh_from_db()
    assert helper.version == 3 and helper.versions.count() == 3


def test_a_decimal_limit_saved_again_is_not_a_change(client_for, alice, helper):
    c = client_for(alice)
    c.post(change_url(helper), agent_data(helper, max_cost_per_turn="0.5"))
    helper.refresh_from_db()
    version = helper.version
    c.post(change_url(helper), agent_data(helper))  # posts "0.500000" back
    helper.refresh_from_db()
    assert helper.version == version


def test_fallbacks_are_edited_one_per_line_against_the_teams_providers(client_for, alice, helper, other_provider, team_b):
    Provider.objects.create(team=team_b, name="Foreign", kind="demo")
    c = client_for(alice)
    c.post(change_url(helper), agent_data(helper, fallbacks="Backup box / demo-b\n\nDemo for Helper\nBackup box/x/y"))
    helper.refresh_from_db()
    assert helper.fallbacks == [{"provider": "Backup box", "model": "demo-b"},
                                {"provider": "Demo for Helper", "model": ""},
                                {"provider": "Backup box", "model": "x/y"}]
    page = c.get(change_url(helper)).content.decode()
    assert "Backup box / demo-b\nDemo for Helper\nBackup box / x/y</textarea>" in page

    for line in ("Foreign / demo", "Nowhere / gpt-4o"):
        bad = c.post(change_url(helper), agent_data(helper, fallbacks=line))
        body = bad.content.decode()
        assert bad.status_code == 200 and "does not start with the name of one of the team&#x27;s providers" in body
        assert "“Backup box”" in body and "Foreign”" not in body.split("Providers:")[1][:200]


def test_form_checks_limits_in_plain_words(client_for, alice, helper):
    c = client_for(alice)
    cases = {
        "step_timeout_s": ({"step_timeout_s": "900", "turn_time_limit_s": "600"}, "cannot be longer than the turn time limit"),
        "memory_min_relevance": ({"memory_min_relevance": "1.5"}, "less than or equal to 1"),
        "max_cost_per_turn": ({"max_cost_per_turn": "0"}, "Enter an amount above 0"),
        "inject_trajectory_state": ({"trajectory_states": None, "inject_trajectory_state": "on"}, "Turn trajectory states on"),
        "max_tool_iterations": ({"max_tool_iterations": "0"}, "greater than or equal to 1"),
    }
    for field, (changes, message) in cases.items():
        response = c.post(change_url(helper), agent_data(helper, **changes))
        assert response.status_code == 200 and message in response.content.decode(), field
    helper.refresh_from_db()
    assert not helper.versions.exists() and helper.version == 1


# -- choices limited to the team -----------------------------------------------------------------
def test_another_teams_provider_or_tools_cannot_be_linked_by_posting_ids(client_for, alice, helper, team_b):
    foreign_provider = Provider.objects.create(team=team_b, name="Foreign", kind="demo")
    foreign_tool = Tool.objects.create(team=team_b, name="spy", kind="builtin")
    c = client_for(alice)
    page = c.get(change_url(helper)).content.decode()
    assert "Foreign" not in page and "spy" not in page
    for changes in ({"provider": foreign_provider.pk}, {"tools": [foreign_tool.pk]}):
        response = c.post(change_url(helper), agent_data(helper, **changes))
        assert response.status_code == 200 and "Select a valid choice" in response.content.decode()
    helper.refresh_from_db()
    assert helper.provider_id != foreign_provider.pk and foreign_tool not in helper.tools.all()


def test_the_service_refuses_cross_team_links_too(helper, team_b):
    foreign_provider = Provider.objects.create(team=team_b, name="Foreign", kind="demo")
    foreign_tool = Tool.objects.create(team=team_b, name="spy", kind="builtin")
    helper.provider = foreign_provider
    with pytest.raises(ValidationError, match="provider of the agent's own team"):
        agent_save(agent=helper)
    helper.refresh_from_db()
    with pytest.raises(ValidationError, match="tools of the agent's own team"):
        agent_save(agent=helper, tools=[foreign_tool])
    helper.fallbacks = [{"provider": "Foreign", "model": "x"}]
    with pytest.raises(ValidationError, match="unknown: Foreign"):
        agent_save(agent=helper)
    helper.refresh_from_db()
    helper.team = team_b
    with pytest.raises(ValidationError, match="cannot move to another team"):
        agent_save(agent=helper)


def test_an_admin_of_two_teams_chooses_the_team_first(client_for, alice, helper, team_b, make_member):
    make_member(team_b, "alice", "admin")
    Provider.objects.create(team=team_b, name="B box", kind="demo")
    c = client_for(alice)
    choose = c.get(reverse("admin:agents_agent_add"))
    body = choose.content.decode()
    assert choose.status_code == 200 and "Which team is the new agent for?" in body
    assert f'href="?team={team_b.pk}"' in body and "Team A" in body
    form = c.get(reverse("admin:agents_agent_add") + f"?team={team_b.pk}").content.decode()
    assert "B box" in form and "Demo for Helper" not in form
    # Tool choices are team B's own rows (its built-ins, created on demand), never team A's.
    import re

    offered = {int(pk) for pk in re.findall(r'name="tools" value="(\d+)"', form)}
    assert offered and offered == set(Tool.objects.filter(team=team_b).values_list("pk", flat=True))
    # Posting team A's provider to a team B agent is refused; team B's works.
    url = reverse("admin:agents_agent_add") + f"?team={team_b.pk}"
    refused = c.post(url, agent_data(provider=helper.provider_id, team=helper.team_id))
    assert refused.status_code == 200 and "Select a valid choice" in refused.content.decode()
    b_box = Provider.objects.get(name="B box")
    assert c.post(url, agent_data(provider=b_box.pk, team=helper.team_id)).status_code == 302
    assert Agent.objects.get(name="Writer").team == team_b  # the posted team is ignored


def test_charlie_adding_with_team_as_id_gets_his_own_team(client_for, charlie, helper, team_b):
    form = client_for(charlie).get(reverse("admin:agents_agent_add") + f"?team={helper.team_id}")
    body = form.content.decode()
    assert form.status_code == 200 and "Team B" in body and "Demo for Helper" not in body


# -- versions, diff, revert ------------------------------------------------------------------------
@pytest.fixture
def versioned(client_for, alice, helper):
    """Helper with versions 1 (as made), 2 (new prompt), 3 (calculator only, temperature)."""
    c = client_for(alice)
    c.post(change_url(helper), agent_data(helper, system_prompt="Be helpful.\n<script>alert(1)</script>\nAnswer briefly."))
    helper.refresh_from_db()
    calculator = Tool.objects.get(team=helper.team, name="calculator")
    c.post(change_url(helper), agent_data(helper, tools=[calculator.pk], temperature="0.2"))
    helper.refresh_from_db()
    assert helper.version == 3
    return helper


def test_versions_page_lists_who_when_and_what_changed(client_for, alice, versioned):
    page = client_for(alice).get(reverse("admin:agents_agent_versions", args=[versioned.pk]))
    body = page.content.decode()
    assert page.status_code == 200
    assert "v3 (current)" in body and "v1" in body and "alice" in body
    assert "Temperature, Tools" in body and "System prompt" in body and "First version" in body
    assert reverse("admin:agents_agent_version_revert", args=[versioned.pk, 1]) in body
    assert reverse("admin:agents_agent_versions", args=[versioned.pk]) in client_for(alice).get(change_url(versioned)).content.decode()


def test_diff_shows_each_field_and_the_prompt_as_an_escaped_line_diff(client_for, alice, versioned):
    c = client_for(alice)
    url = reverse("admin:agents_agent_version_diff", args=[versioned.pk])
    body = c.get(url, {"from": 1, "to": 2}).content.decode()
    assert '<ins class="add">+ &lt;script&gt;alert(1)&lt;/script&gt;</ins>' in body
    assert "<script>alert(1)</script>" not in body
    assert '<span class="same">  Be helpful.</span>' in body
    tools = c.get(url, {"from": 2, "to": 3}).content.decode()
    assert "removed current_time" in tools and "Temperature" in tools and "0.2" in tools
    assert c.get(url, {"from": 1, "to": 9}).status_code == 404
    assert c.get(url, {"from": "x"}).status_code == 404


def test_diff_service_compares_per_field(versioned):
    v1, v3 = versioned.versions.get(number=1), versioned.versions.get(number=3)
    diffs = {d.name: d for d in agent_version_diff(old=v1, new=v3)}
    assert set(diffs) == {"temperature", "system_prompt", "tools"}
    assert (diffs["temperature"].before, diffs["temperature"].after) == ("—", "0.2")
    assert diffs["tools"].removed == ("current_time",) and diffs["tools"].added == ()
    assert ("add", "<script>alert(1)</script>") in diffs["system_prompt"].lines
    assert agent_version_diff(old=v3, new=v3) == []


def test_revert_keeps_a_new_version_equal_to_the_old_one(client_for, alice, versioned):
    c = client_for(alice)
    url = reverse("admin:agents_agent_version_revert", args=[versioned.pk, 1])
    preview = c.get(url).content.decode()
    assert "What would change" in preview and "added current_time" in preview
    versioned.refresh_from_db()
    assert versioned.version == 3  # a GET changes nothing
    response = c.post(url)
    assert response.status_code == 302 and response.url == reverse("admin:agents_agent_versions", args=[versioned.pk])
    assert any("Reverted to version 1: the configuration is now version 4" in m for m in messages_of(response))
    versioned.refresh_from_db()
    assert versioned.version == 4 and versioned.temperature is None
    assert versioned.versions.get(number=4).snapshot == versioned.versions.get(number=1).snapshot
    assert [v.number for v in versioned.versions.all()] == [4, 3, 2, 1]
    event = AuditEvent.objects.filter(object_type="agents.Agent").first()
    assert event.actor_name == "alice" and set(event.changes) >= {"temperature", "tools", "version"}
    again = c.post(url)
    assert any("already has the configuration of version 1" in m for m in messages_of(again))


def test_revert_reports_tools_and_providers_that_no_longer_exist(client_for, alice, versioned, other_provider):
    c = client_for(alice)
    c.post(change_url(versioned), agent_data(versioned, provider=other_provider.pk, fallbacks="Backup box / b"))
    versioned.refresh_from_db()
    v4 = versioned.version
    Tool.objects.filter(name="current_time").delete()
    preview = c.get(reverse("admin:agents_agent_version_revert", args=[versioned.pk, 2])).content.decode()
    assert "no longer exist and cannot be restored: current_time" in preview
    response = c.post(reverse("admin:agents_agent_version_revert", args=[versioned.pk, 2]))
    found = messages_of(response)
    assert any("tools no longer exist and were not restored: current_time." in m for m in found)
    versioned.refresh_from_db()
    assert versioned.version == v4 + 1 and versioned.provider.name == "Demo for Helper"
    assert list(versioned.tools.values_list("name", flat=True)) == ["calculator"]

    # A provider deleted since (the agent no longer uses it): reported, and the agent keeps the
    # provider it has; the fallback naming it is left out and reported too.
    Provider.objects.filter(pk=other_provider.pk).delete()
    result = agent_revert(agent=versioned, version=versioned.versions.get(number=v4), user=alice)
    assert any("“Backup box” no longer exists; the agent keeps “Demo for Helper”" in p for p in result.problems)
    assert any("fallback provider “Backup box” no longer exists" in p for p in result.problems)
    versioned.refresh_from_db()
    assert versioned.provider.name == "Demo for Helper" and versioned.fallbacks == []


def test_versions_cannot_be_edited_or_deleted(client_for, alice, versioned):
    assert not admin.site.is_registered(AgentVersion)
    c = client_for(alice)
    assert c.get(f"/admin/agents/agentversion/{versioned.versions.first().pk}/change/").status_code == 404
    assert versioned.versions.count() == 3


def test_charlie_gets_404_on_versions_diff_and_revert(client_for, charlie, versioned):
    c = client_for(charlie)
    assert c.get(reverse("admin:agents_agent_versions", args=[versioned.pk])).status_code == 404
    assert c.get(reverse("admin:agents_agent_version_diff", args=[versioned.pk]), {"from": 1, "to": 2}).status_code == 404
    assert c.get(reverse("admin:agents_agent_version_revert", args=[versioned.pk, 1])).status_code == 404
    assert c.post(reverse("admin:agents_agent_version_revert", args=[versioned.pk, 1])).status_code == 404
    response = c.get(change_url(versioned))
    assert response.status_code in (302, 404)
    listing = c.get(reverse("admin:agents_agent_changelist")).content.decode()
    assert "Helper" not in listing
    c.post(change_url(versioned), agent_data(versioned, name="Hijacked"))
    versioned.refresh_from_db()
    assert versioned.name == "Helper" and versioned.version == 3


def test_members_and_viewers_never_reach_agent_pages(client_for, bob, versioned, vera):
    for user in (bob, vera):
        c = client_for(user)
        for url in (change_url(versioned), reverse("admin:agents_agent_versions", args=[versioned.pk])):
            response = c.get(url)
            assert response.status_code == 302 and "/admin/login/" in response.url


# -- traces record the version they ran ------------------------------------------------------------
def test_a_turn_records_the_version_saved_in_the_admin(client_for, alice, helper, sent_turns):
    client_for(alice).post(change_url(helper), agent_data(helper, system_prompt="Changed."))
    helper.refresh_from_db()
    conversation = conversation_create(agent=helper, membership=member_of(alice, helper.team))
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="hi")
    assert trace.agent_version == helper.version == 2
    assert helper.versions.get(number=trace.agent_version).snapshot["system_prompt"] == "Changed."


# -- audit, delete -----------------------------------------------------------------------------------
def test_agent_update_and_delete_are_audited(client_for, alice, helper):
    c = client_for(alice)
    c.post(change_url(helper), agent_data(helper, model="demo-2"))
    c.post(reverse("admin:agents_agent_delete", args=[helper.pk]), {"post": "yes"})
    assert not Agent.objects.filter(pk=helper.pk).exists()
    update, delete = AuditEvent.objects.filter(object_type="agents.Agent").order_by("id")
    assert update.action == "update" and update.changes == {"model": ("demo", "demo-2"), "version": (1, 2)}
    assert delete.action == "delete" and delete.before["model"] == "demo-2"


def test_an_agent_with_conversations_cannot_be_deleted_and_says_why(client_for, alice, helper):
    conversation_create(agent=helper, membership=member_of(alice, helper.team))
    c = client_for(alice)
    url = reverse("admin:agents_agent_delete", args=[helper.pk])
    assert "people have conversations with it" in c.get(url).content.decode()
    c.post(url, {"post": "yes"})
    assert Agent.objects.filter(pk=helper.pk).exists()


# -- bounded queries -----------------------------------------------------------------------------------
def test_agent_pages_run_a_bounded_number_of_queries(client_for, alice, make_agent, team_a, django_assert_max_num_queries):
    for i in range(6):
        Tool.objects.create(team=team_a, name=f"tool_{i}", kind="builtin")
    agents = [make_agent(name=f"Agent {i}") for i in range(6)]
    agent = agents[-1]
    c = client_for(alice)
    for i in range(12):
        c.post(change_url(agent), agent_data(agent, system_prompt=f"Prompt {i}"))
    with django_assert_max_num_queries(15):
        assert c.get(reverse("admin:agents_agent_changelist")).status_code == 200
    with django_assert_max_num_queries(18):
        assert c.get(change_url(agent)).status_code == 200
    with django_assert_max_num_queries(15):
        assert c.get(reverse("admin:agents_agent_versions", args=[agent.pk])).status_code == 200
    with django_assert_max_num_queries(15):
        assert c.get(reverse("admin:agents_agent_version_diff", args=[agent.pk])).status_code == 200


def test_the_admin_index_lists_providers_and_agents_for_team_admins(client_for, alice):
    body = client_for(alice).get(reverse("admin:index")).content.decode()
    assert reverse("admin:agents_provider_changelist") in body and reverse("admin:agents_agent_changelist") in body
    assert Membership.objects.get(user=alice).role == "owner"
