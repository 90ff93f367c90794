"""Which policy a tool has in a person's turn (the agent's over the team's, then the role
floor), and a real turn in which a denied call never runs and the trace says why."""

from __future__ import annotations

import pytest

from agents.chat.services import conversation_create
from agents.models import Conversation, Tool
from agents.tools import ToolContext
from agents.tools.registry import runtime_tools, tool_permission
from agents.turns.builder import turn_role
from agents.turns.lifecycle import claimed_rows
from agents.turns.services import turn_start
from agents.turns.tasks import turn_run
from agentsite.models import Membership
from tests.members import member_of
from traces.models import Step, StepPayload, Trace


@pytest.fixture
def calculator(make_agent):
    agent = make_agent(name="Policy", tools=("calculator", "current_time"))
    return agent, Tool.objects.get(team=agent.team, name="calculator")


def test_the_agents_policy_wins_over_the_teams(calculator):
    agent, row = calculator
    row.policy = "ask"
    assert tool_permission(row, agent, "member").policy == "ask"
    agent.tool_policies = {"calculator": "allow"}
    permission = tool_permission(row, agent, "member")
    assert (permission.policy, permission.source) == ("allow", "agent")
    agent.tool_policies = {"calculator": "deny"}
    permission = tool_permission(row, agent, "owner")
    assert (permission.policy, permission.source) == ("deny", "agent")
    assert "deny" in permission.reason


def test_an_unknown_policy_word_in_the_agent_falls_back_to_the_team(calculator):
    agent, row = calculator
    agent.tool_policies = {"calculator": "sometimes"}
    assert tool_permission(row, agent, "member").source == "team"


@pytest.mark.parametrize(("min_role", "role", "policy"), [
    ("viewer", "viewer", "allow"),
    ("member", "viewer", "deny"),
    ("admin", "member", "deny"),
    ("admin", "admin", "allow"),
    ("admin", "owner", "allow"),
])
def test_the_role_floor_denies_turns_of_lesser_roles(calculator, min_role, role, policy):
    agent, row = calculator
    row.min_role = min_role
    permission = tool_permission(row, agent, role)
    assert permission.policy == policy
    if policy == "deny":
        assert permission.source == "role floor"
        assert f"a team {min_role} or above" in permission.reason and role in permission.reason


def test_a_viewer_can_never_trigger_an_ask_tool(calculator):
    agent, row = calculator
    row.policy = "ask"
    assert tool_permission(row, agent, "viewer").policy == "deny"
    assert tool_permission(row, agent, "member").policy == "ask"


def test_the_turns_role_comes_from_the_membership(team_a, alice, bob, vera, charlie, make_agent,
                                                  django_assert_num_queries):
    agent = make_agent(name="Roles")
    # Someone outside the team counts as a viewer.
    for user, role in ((alice, Membership.Role.OWNER), (bob, Membership.Role.MEMBER),
                       (vera, Membership.Role.VIEWER), (charlie, Membership.Role.VIEWER)):
        assert turn_role(Trace(team_id=team_a.pk, user_id=user.pk)) == role
        # A claimed turn read its person's role with its trace.
        conversation = Conversation.objects.create(team=team_a, agent=agent, created_by=alice)
        claimed = claimed_rows().get(pk=Trace.objects.create(
            team=team_a, conversation=conversation, agent=agent, user=user).pk)
        with django_assert_num_queries(0):
            assert turn_role(claimed) == role


def test_the_turns_tools_carry_their_effective_policy(calculator):
    agent, row = calculator
    row.min_role = "admin"
    row.save()
    agent.tool_policies = {"current_time": "ask"}
    agent.save()
    tools, _ = runtime_tools(agent, context=ToolContext(team_id=agent.team_id, agent_id=agent.pk,
                                                        role="member"))
    by_name = {t.name: t for t in tools}
    assert by_name["calculator"].policy == "deny"
    assert by_name["calculator"].policy_source == "role floor"
    assert by_name["current_time"].policy == "ask"
    assert by_name["current_time"].policy_source == "agent"


@pytest.mark.django_db(transaction=True)
def test_a_denied_call_never_runs_and_the_trace_records_the_decision(make_agent, bob, sent_turns):
    agent = make_agent(name="Denied", tools=("calculator",))
    row = Tool.objects.get(team=agent.team, name="calculator")
    row.min_role = "admin"
    row.save()
    conversation = conversation_create(agent=agent, membership=member_of(bob, agent.team))
    trace = turn_start(conversation=conversation, membership=member_of(bob, conversation), text="what is 6 * 7?")
    assert turn_run(trace.pk) == "completed"

    step = Step.objects.get(trace=trace, kind="tool_call")
    assert step.success is False
    assert step.meta["permission"]["outcome"] == "deny"
    assert step.meta["permission"]["source"] == "role floor"
    output = StepPayload.objects.get(step=step, kind="output").content
    assert output.startswith("Permission denied: calculator runs only in turns of a team admin")
    trace.refresh_from_db()
    answer = trace.conversation.messages.filter(role="assistant").last()
    assert "Permission denied" in answer.text and "42" not in answer.text
