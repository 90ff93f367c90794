"""From database rows to runtime objects: routing, tools, fallbacks, keys, history."""

from __future__ import annotations

import pytest

from agents.models import ModelRoute, Provider, RoutingRule, Tool
from agents.runtime.messages import Role
from agents.runtime.providers.reliable import ReliableProvider
from agents.tools import ToolContext
from agents.turns.builder import runtime_tools, turn_history, turn_setup_build
from agents.turns.providers import TurnSetupError, provider_api_key
from agents.turns.routing import route_turn
from agents.turns.services import turn_start
from agents.turns.tasks import turn_run
from tests.members import member_of
from traces.models import Trace


@pytest.fixture
def coder(team_a):
    return Provider.objects.create(team=team_a, name="Coder box", kind="demo")


def test_a_matching_rule_routes_to_its_model_and_says_why(agent, conversation, coder):
    rule = RoutingRule.objects.create(team=agent.team, hint="code", keywords=["python"], priority=5)
    RoutingRule.objects.create(team=agent.team, hint="never", keywords=["python"], priority=9, enabled=False)
    ModelRoute.objects.create(team=agent.team, hint="code", provider=coder, model="demo-coder")

    choice = route_turn(agent=agent, conversation=conversation, text="Write some Python for me")

    assert (choice.provider, choice.model) == (coder, "demo-coder")
    assert choice.routing == {
        "rule": str(rule.uuid), "hint": "code", "matched_keyword": "python", "matched_pattern": None,
        "reason": "Rule “code” matched (keyword 'python').", "provider": "Coder box", "model": "demo-coder",
    }


def test_rules_of_other_agents_do_not_apply_and_bad_patterns_are_skipped(
        agent, make_agent, conversation, coder):
    other = make_agent(name="Other")
    RoutingRule.objects.create(team=agent.team, agent=other, hint="code", keywords=["python"])
    RoutingRule.objects.create(team=agent.team, hint="code", patterns=[r"(e)\1", "^def "])
    ModelRoute.objects.create(team=agent.team, hint="code", provider=coder, model="demo-coder")

    plain = route_turn(agent=agent, conversation=conversation, text="python please")
    assert (plain.provider, plain.model, plain.routing["hint"]) == (agent.provider, "demo", None)
    assert plain.warnings and r"(e)\1" in plain.warnings[0]

    matched = route_turn(agent=agent, conversation=conversation, text="def main(): pass")
    assert (matched.model, matched.routing["matched_pattern"]) == ("demo-coder", "^def ")


def test_a_rule_without_a_model_route_keeps_the_agents_model(agent, conversation):
    RoutingRule.objects.create(team=agent.team, hint="code", keywords=["python"])
    choice = route_turn(agent=agent, conversation=conversation, text="python")
    assert choice.model == "demo" and "no model route has that hint" in choice.routing["reason"]


def test_a_model_chosen_with_slash_model_wins_over_routing(agent, conversation, coder):
    RoutingRule.objects.create(team=agent.team, hint="code", keywords=["python"])
    ModelRoute.objects.create(team=agent.team, hint="code", provider=coder, model="demo-coder")
    conversation.model_override = "demo-large"
    choice = route_turn(agent=agent, conversation=conversation, text="python")
    assert (choice.provider, choice.model) == (agent.provider, "demo-large")
    assert "/model" in choice.routing["reason"]


def test_tools_come_from_enabled_rows_and_unknown_ones_are_reported(make_agent):
    agent = make_agent(name="Tooly", approval=("calculator",))
    agent.tools.add(Tool.objects.create(team=agent.team, name="weather", kind="http",
                                        url_template="https://example.com/{city}",
                                        parameters={"type": "object",
                                                    "properties": {"city": {"type": "string"}}}))
    agent.tools.add(Tool.objects.create(team=agent.team, name="broken", kind="http",
                                        url_template="ftp://example.com"))
    agent.tools.add(Tool.objects.create(team=agent.team, name="teleport", kind="builtin"))
    agent.tools.add(Tool.objects.create(team=agent.team, name="sleepy", kind="builtin", enabled=False))

    tools, warnings = runtime_tools(agent, context=ToolContext(team_id=agent.team_id, agent_id=agent.pk))

    assert [(t.name, t.requires_approval) for t in tools] == [
        ("calculator", True), ("current_time", False), ("weather", False)]
    assert len(warnings) == 2
    assert "“broken” (HTTP)" in warnings[0] and "http:// or https://" in warnings[0]
    assert "“teleport” (Built-in)" in warnings[1]


def test_a_stored_api_key_is_decrypted_and_an_unreadable_one_says_what_to_do(team_a):
    from agentsite.crypto import encrypt

    provider = Provider(team=team_a, name="Real", kind="openai")
    assert provider_api_key(provider) == ""
    provider.api_key_encrypted = encrypt("sk-test-round-trip-123")
    assert provider_api_key(provider) == "sk-test-round-trip-123"
    provider.api_key_encrypted = "gAAAA..."  # written under another encryption key
    with pytest.raises(TurnSetupError, match="Provider “Real”: .*Enter the secret again in the admin"):
        provider_api_key(provider)


@pytest.mark.django_db(transaction=True)
def test_setup_wraps_fallbacks_and_records_warnings_on_the_trace(
        make_agent, alice, coder, sent_turns, use_redis):
    from agents.chat.services import conversation_create

    agent = make_agent(name="Resilient", fallbacks=[{"provider": "Coder box", "model": "demo-b"},
                                                   {"provider": "Gone", "model": "x"}])
    agent.tools.add(Tool.objects.create(team=agent.team, name="weather", kind="http"))
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="hello")
    trace = Trace.objects.select_related("user_message").get(pk=trace.pk)

    setup = turn_setup_build(trace=trace)
    assert isinstance(setup.provider, ReliableProvider)
    assert [(p.name, m) for p, m in setup.provider.slots] == [(agent.provider.name, None), ("Coder box", "demo-b")]
    assert setup.routing["fallbacks"] == [{"provider": "Coder box", "model": "demo-b"}]

    assert turn_run(trace.pk) == "completed"
    trace.refresh_from_db()
    assert any("“Gone” does not exist" in w for w in trace.meta["warnings"])
    assert any("“weather”" in w for w in trace.meta["warnings"])


@pytest.mark.django_db(transaction=True)
def test_a_provider_that_cannot_run_fails_the_turn_with_its_message(make_agent, alice, sent_turns, use_redis):
    from agents.chat.services import conversation_create

    agent = make_agent(name="Keyed")
    Provider.objects.filter(pk=agent.provider_id).update(api_key_encrypted="gAAAA...")
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="hello")

    assert turn_run(trace.pk) == "failed"

    trace.refresh_from_db()
    assert "Enter the secret again in the admin" in trace.error and trace.error_kind == "config"
    assert list(trace.steps.values_list("kind", "status")) == [("error", "error")]


@pytest.mark.django_db(transaction=True)
def test_history_puts_each_turns_answer_before_messages_sent_meanwhile(conversation, alice, sent_turns, use_redis):
    first = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="What is 2 + 3?")
    second = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="hello again")  # waits
    third = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="and more")  # waits
    turn_run(first.pk)
    agent = conversation.agent

    history = turn_history(trace=Trace.objects.get(pk=second.pk), agent=agent)
    texts = [(m.role, m.text) for m in history]
    assert texts[0] == (Role.USER, "What is 2 + 3?") and texts[-1] == (Role.ASSISTANT, "2 + 3 = 5.")
    assert all(text not in ("hello again", "and more") for _, text in texts)

    agent.history_max_messages = 2
    capped = turn_history(trace=Trace.objects.get(pk=third.pk), agent=agent)
    # the second turn's message (it never ran) comes after the first turn's answer
    assert [(m.role, m.text) for m in capped] == [(Role.ASSISTANT, "2 + 3 = 5."), (Role.USER, "hello again")]


@pytest.mark.django_db(transaction=True)
def test_the_next_turn_starts_from_the_previous_turns_trajectory_state(conversation, alice, sent_turns, use_redis):
    first = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="what is 12*7?")
    assert turn_run(first.pk) == "completed"
    last_state = first.trajectory_states.order_by("-iteration").first()
    assert last_state is not None and "calculator" in " ".join(last_state.fields["evidence"])

    second = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="thanks")
    setup = turn_setup_build(trace=second)
    assert setup.config.previous_trajectory_state == last_state.fields


@pytest.mark.django_db(transaction=True)
def test_a_trace_records_the_agent_version_it_ran_with(conversation, alice, sent_turns, use_redis):
    from agents.config.versions import agent_save

    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="what is 2+2?")
    agent = conversation.agent
    queued_version = trace.agent_version
    agent.system_prompt = "Answer in one word."
    agent_save(agent=agent, user=alice)  # edited while the turn waits in the queue
    agent.refresh_from_db()
    assert agent.version > (queued_version or 0)
    assert turn_run(trace.pk) == "completed"
    trace.refresh_from_db()
    assert trace.agent_version == agent.version
