from __future__ import annotations

import pytest


@pytest.fixture
def demo_agent(team_a):
    from agents.models import Agent, Provider

    provider = Provider.objects.create(team=team_a, name="Demo", kind="demo")
    return Agent.objects.create(team=team_a, name="Demo assistant", provider=provider, model="demo")


@pytest.fixture
def conversation(demo_agent, alice):
    from agents.models import Conversation

    return Conversation.objects.create(team=demo_agent.team, agent=demo_agent, created_by=alice, title="Sample")


@pytest.fixture
def sample_trace(conversation, alice):
    from traces.sample import make_sample_trace

    return make_sample_trace(conversation=conversation, user=alice, steps=12)
