"""The demo seed gives a newcomer an agent whose first question produces a multi-step trace."""

from __future__ import annotations

import pytest

from agents.chat.services import conversation_create
from agents.config.seed import DEMO_AGENT, DEMO_TOOLS, demo_seed
from agents.models import Agent, AgentVersion, Provider, Tool
from agents.turns.services import turn_start
from agents.turns.tasks import turn_run


@pytest.mark.django_db(transaction=True)
def test_the_demo_agent_answers_a_first_question_in_several_steps(sent_turns, use_redis, monkeypatch):
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):  # no real providers in this test
        monkeypatch.delenv(name, raising=False)
    result = demo_seed(password="demo-pass-123")
    demo_seed()  # idempotent
    agent = Agent.objects.get(team=result.team, name=DEMO_AGENT)
    assert Agent.objects.filter(team=result.team).count() == 1
    assert (agent.model, agent.provider.kind) == ("demo", "demo")
    assert agent.provider.options["token_delay_s"] > 0  # streaming is visible
    assert sorted(agent.tools.values_list("name", flat=True)) == sorted(DEMO_TOOLS)
    assert Tool.objects.filter(team=result.team).count() == len(DEMO_TOOLS) and Provider.objects.count() == 1
    version = AgentVersion.objects.get(agent=agent)
    assert version.number == 1 and version.snapshot["tools"] == sorted(DEMO_TOOLS)
    assert version.snapshot["provider"] == agent.provider.name and version.snapshot["model"] == "demo"

    user = result.team.memberships.get().user
    conversation = conversation_create(team=result.team, agent=agent, user=user)
    trace = turn_start(conversation=conversation, user=user, text="What is 12 * (7 + 5)?")
    assert turn_run(trace.pk) == "completed"
    trace.refresh_from_db()
    assert trace.answer == "12 × (7 + 5) = 144."
    assert list(trace.steps.values_list("kind", flat=True)) == ["llm_request", "tool_call", "llm_request"]


@pytest.mark.django_db
def test_a_team_that_changed_the_demo_agent_keeps_its_changes(sent_turns):
    result = demo_seed(password="demo-pass-123")
    agent = Agent.objects.get(team=result.team, name=DEMO_AGENT)
    agent.tools.clear()
    Agent.objects.filter(pk=agent.pk).update(system_prompt="Be terse.")
    demo_seed()
    agent.refresh_from_db()
    assert agent.system_prompt == "Be terse." and not agent.tools.exists()

