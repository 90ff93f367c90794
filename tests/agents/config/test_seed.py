"""The demo seed: an agent whose first question produces a multi-step trace, routing rules and
routes for the demo team, and a real provider with an agent when an API key is in the
environment. Idempotent; a team's own changes are kept."""

from __future__ import annotations

import pytest

from agents.chat.services import conversation_create
from agents.config.seed import DEMO_AGENT, DEMO_PROVIDER, DEMO_TOOLS, demo_seed
from agents.models import Agent, AgentVersion, Conversation, ModelRoute, Provider, RoutingRule, Tool
from agents.turns.routing import route_turn
from agents.turns.services import turn_start
from agents.turns.tasks import turn_run
from agentsite.crypto import decrypt
from tests.members import member_of


@pytest.fixture(autouse=True)
def _no_keys(monkeypatch):
    """No real providers unless a test puts a key in the environment."""
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.django_db(transaction=True)
def test_the_demo_agent_answers_a_first_question_in_several_steps(sent_turns, use_redis):
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
    conversation = conversation_create(agent=agent, membership=member_of(user, result.team))
    trace = turn_start(conversation=conversation, membership=member_of(user, conversation), text="What is 12 * (7 + 5)?")
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


def test_the_demo_team_gets_two_routing_rules_and_their_routes(db):
    team = demo_seed(password="demo-pass-123").team
    demo_seed()
    rules = {r.hint: r for r in RoutingRule.objects.filter(team=team)}
    assert set(rules) == {"fast", "careful"}
    assert rules["fast"].keywords == ["quick", "brief", "tldr"] and rules["fast"].priority == 10
    assert rules["careful"].keywords == ["step by step", "carefully", "in detail"]
    assert all(r.agent_id is None and r.enabled for r in rules.values())
    routes = {r.hint: (r.provider.name, r.model) for r in ModelRoute.objects.filter(team=team)}
    assert routes == {"fast": (DEMO_PROVIDER, "demo-fast"), "careful": (DEMO_PROVIDER, "demo-careful")}

    agent = Agent.objects.get(team=team, name=DEMO_AGENT)
    conversation = Conversation(team=team, agent=agent)
    choice = route_turn(agent=agent, conversation=conversation, text="Quick: what is 2+2?")
    assert (choice.model, choice.routing["hint"]) == ("demo-fast", "fast")
    choice = route_turn(agent=agent, conversation=conversation, text="Explain it step by step")
    assert (choice.model, choice.routing["hint"]) == ("demo-careful", "careful")


def test_a_team_that_changed_its_routing_keeps_it(db):
    team = demo_seed(password="demo-pass-123").team
    RoutingRule.objects.filter(team=team, hint="careful").delete()
    RoutingRule.objects.filter(team=team, hint="fast").update(keywords=["asap"], priority=3)
    ModelRoute.objects.filter(team=team, hint="fast").update(model="demo-turbo")
    demo_seed()
    assert list(RoutingRule.objects.filter(team=team).values_list("hint", "keywords", "priority")) == [("fast", ["asap"], 3)]
    assert ModelRoute.objects.get(team=team, hint="fast").model == "demo-turbo"


def test_an_api_key_in_the_environment_adds_an_encrypted_provider_and_an_agent(db, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env-0123456789")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-env-0123456789")
    team = demo_seed(password="demo-pass-123").team
    demo_seed()

    openai = Provider.objects.get(team=team, name="OpenAI")
    assert openai.kind == "openai" and "sk-from-env" not in openai.api_key_encrypted
    assert decrypt(openai.api_key_encrypted) == "sk-from-env-0123456789"
    anthropic = Provider.objects.get(team=team, name="Anthropic")
    assert anthropic.kind == "anthropic" and decrypt(anthropic.api_key_encrypted) == "sk-ant-from-env-0123456789"
    gpt = Agent.objects.get(team=team, name="GPT assistant")
    claude = Agent.objects.get(team=team, name="Claude assistant")
    assert (gpt.provider, gpt.model) == (openai, "gpt-4o-mini")
    assert claude.provider == anthropic and claude.model.startswith("claude-")
    for agent in (gpt, claude):
        assert sorted(agent.tools.values_list("name", flat=True)) == sorted(DEMO_TOOLS)
        version = AgentVersion.objects.get(agent=agent)
        assert version.number == agent.version == 1 and "sk-" not in str(version.snapshot)
    assert Agent.objects.filter(team=team).count() == 3 and Provider.objects.filter(team=team).count() == 3


def test_a_changed_or_removed_env_key_does_not_overwrite_the_teams_own(db, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-first-0123456789")
    team = demo_seed(password="demo-pass-123").team
    Provider.objects.filter(team=team, name="OpenAI").update(api_key_encrypted="")
    Agent.objects.filter(team=team, name="GPT assistant").update(model="gpt-4.1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-second-0123456789")
    demo_seed()
    assert Provider.objects.get(team=team, name="OpenAI").api_key_encrypted == ""
    assert Agent.objects.get(team=team, name="GPT assistant").model == "gpt-4.1"


def test_without_keys_there_is_only_the_demo(db):
    team = demo_seed(password="demo-pass-123").team
    assert list(Provider.objects.filter(team=team).values_list("name", flat=True)) == [DEMO_PROVIDER]
    assert list(Agent.objects.filter(team=team).values_list("name", flat=True)) == [DEMO_AGENT]
