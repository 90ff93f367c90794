"""A team's configuration is read once per process and read again whenever any of it changed:
a turn never runs with a rule, tool, hook, budget or model setting the database no longer has."""

from __future__ import annotations

from decimal import Decimal

import pytest

from agents.models import Hook, ModelRoute, ProviderModel, RoutingRule
from agents.team_config import kept, team_config_read, team_config_stamp
from agents.tools.hooks.build import agent_hook_rows
from agents.turns.builder import turn_setup_build
from agents.turns.lifecycle import trace_claim
from agents.turns.routing import routing_table_for
from agents.turns.services import turn_start
from tests.members import member_of
from traces.models import Budget, Trace

pytestmark = pytest.mark.django_db


def test_every_kind_of_change_moves_the_teams_stamp(make_agent, team_a, team_b):
    agent = make_agent()
    other_team = make_agent(name="Theirs", team=team_b)
    last = [team_config_stamp(team_a.pk)]

    def changed() -> bool:
        stamp = team_config_stamp(team_a.pk)
        moved = stamp != last[0]
        last[0] = stamp
        return moved

    rule = RoutingRule.objects.create(team=team_a, hint="code", keywords=["python"])
    assert changed()
    rule.keywords = ["rust"]
    rule.save()
    assert changed()  # an edit in place
    route = ModelRoute.objects.create(team=team_a, hint="code", provider=agent.provider, model="demo")
    assert changed()
    route.delete()
    assert changed()
    agent.tools.remove(agent.tools.first())
    assert changed()  # an agent's tools (a row of the link table goes)
    hook = Hook.objects.create(team=team_a, name="audit", event="PreToolUse", url="https://x.example/")
    assert changed()
    hook.agents.add(agent)
    assert changed()
    Budget.objects.create(team=team_a, period="day", limit_usd=Decimal(5))
    assert changed()
    setting = ProviderModel.objects.create(provider=agent.provider, model="demo", context_window=1000)
    assert changed()
    setting.context_window = 2000
    setting.save()
    assert changed()
    agent.system_prompt = "Be brief."
    agent.save()
    assert changed()
    other_team.tools.clear()
    RoutingRule.objects.create(team=team_b, hint="theirs")
    assert not changed()  # another team's changes are not this team's


def test_inside_a_read_the_kept_value_is_served_until_the_configuration_changes(
        make_agent, team_a, django_assert_num_queries):
    agent = make_agent()
    reads = []

    def read() -> int:
        reads.append(1)
        return len(reads)

    with team_config_read(team_a.pk):
        assert kept(team_a.pk, ("n",), read) == 1
    with django_assert_num_queries(1), team_config_read(team_a.pk):  # the stamp only
        assert kept(team_a.pk, ("n",), read) == 1
    RoutingRule.objects.create(team=team_a, agent=agent, hint="new")
    with team_config_read(team_a.pk):
        assert kept(team_a.pk, ("n",), read) == 2
    assert kept(team_a.pk, ("n",), read) == 3  # outside a read: always read


def test_a_routing_rule_added_between_two_turns_routes_the_second(make_agent, team_a):
    agent = make_agent()
    ModelRoute.objects.create(team=team_a, hint="fast", provider=agent.provider, model="demo-fast")
    with team_config_read(team_a.pk):
        assert routing_table_for(agent).rules == []
    RoutingRule.objects.create(team=team_a, agent=agent, hint="fast", keywords=["quick"])
    with team_config_read(team_a.pk):
        assert [r.hint for r in routing_table_for(agent).rules] == ["fast"]


def test_a_hook_turned_off_is_not_run_by_the_next_turn(make_agent, team_a):
    agent = make_agent()
    hook = Hook.objects.create(team=team_a, name="audit", event="PreToolUse", url="https://x.example/")
    with team_config_read(team_a.pk):
        assert [h.name for h in agent_hook_rows(agent, ("PreToolUse",))] == ["audit"]
    hook.enabled = False
    hook.save()
    with team_config_read(team_a.pk):
        assert agent_hook_rows(agent, ("PreToolUse",)) == []


def test_a_turns_setup_reads_the_teams_configuration_once_per_process(
        conversation, alice, sent_turns, django_assert_max_num_queries):
    def claimed() -> Trace:
        Trace.objects.filter(conversation=conversation).update(status="completed")
        return trace_claim(trace_id=turn_start(conversation=conversation, membership=member_of(alice, conversation), text="hi").pk,
                           worker="w")

    first = {t.name for t in turn_setup_build(trace=claimed()).tools}
    trace = claimed()
    # The stamp, the person's role, memory, and what the turn continues (its branch, the last
    # trajectory state, the history): no configuration row.
    with django_assert_max_num_queries(8) as captured:
        assert {t.name for t in turn_setup_build(trace=trace).tools} == first == {"calculator", "current_time"}
    assert "UNION ALL" in captured.captured_queries[0]["sql"]  # the stamp comes first
    read = " ".join(q["sql"] for q in captured.captured_queries[1:])  # after the stamp
    for table in ("agents_routingrule", "agents_modelroute", "agents_hook", "traces_budget",
                  "agents_mcpserver", "agents_tool", "agents_providermodel"):
        assert f'FROM "{table}"' not in read
    conversation.agent.tools.clear()
    assert turn_setup_build(trace=claimed()).tools == []  # the agent lost its tools: so has the next turn
