"""Input that cannot be stored or parsed safely never becomes a 500 (``agentsite.inputs``):
NUL and other control characters are stripped from every form value, and JSON nested deeper
than the limit is a 400 that says why."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from agents.models import Agent, Conversation, Message, ModelRoute, Provider, RoutingRule, Tool
from agentsite.inputs import MAX_JSON_DEPTH, json_depth, strip_controls
from tests.agents.config.test_routing_admin import ADD_RULE, rule_data

pytestmark = pytest.mark.django_db


def test_control_characters_are_stripped_but_whitespace_kept():
    assert strip_controls("a\x00b\x01c\td\ne\rf\x1b[0m") == "abc\td\ne\rf[0m"


def test_depth_counts_brackets_outside_strings_in_linear_time():
    assert json_depth('{"a": [1, {"b": "[[[["}]}') == 3
    assert json_depth("[" * 100_000 + "]" * 100_000) == 100_000


def test_a_nul_in_a_message_and_a_title_is_stripped(client_for, alice, conversation, sent_turns):
    c = client_for(alice)
    response = c.post(reverse("message_send", args=[conversation.uuid]), {"text": "hel\x00lo\x07 there"})
    assert response.status_code < 400
    assert Message.objects.filter(conversation=conversation, role="user").get().text == "hello there"
    response = c.post(reverse("conversation_rename", args=[conversation.uuid]), {"title": "Plan\x00 B"})
    assert response.status_code < 400
    assert Conversation.objects.get(pk=conversation.pk).title == "Plan B"


def test_a_nul_in_admin_fields_is_stripped(client_for, alice, team_a):
    provider = Provider.objects.create(team=team_a, name="Coder box", kind="openai")
    response = client_for(alice).post(ADD_RULE, rule_data(team_a, hint="co\x00de", keywords="py\x00thon",
                                                          route_provider=provider.pk, route_model="m\x00x"))
    assert response.status_code == 302
    rule = RoutingRule.objects.get()
    assert (rule.hint, rule.keywords) == ("code", ["python"])
    assert ModelRoute.objects.get().model == "mx"


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 10_000])
def test_deeply_nested_json_is_a_400_with_the_reason(client_for, alice, agent, depth):
    tool = Tool.objects.get(team=agent.team, name="calculator")
    deep = "[" * depth + "]" * depth
    response = client_for(alice).post(reverse("tool_try", args=[tool.uuid]), {"arguments": deep, "agent": agent.pk})
    assert response.status_code == 400
    assert f"nested deeper than {MAX_JSON_DEPTH} levels" in response.content.decode()
    response = client_for(alice).post(reverse("admin:agents_provider_add"), {"name": "X", "options": deep})
    assert response.status_code == 400


def test_json_within_the_limit_passes(client_for, alice, agent):
    tool = Tool.objects.get(team=agent.team, name="calculator")
    response = client_for(alice).post(reverse("tool_try", args=[tool.uuid]),
                                      {"arguments": json.dumps({"expression": "1+1", "x": [[1]]}), "agent": agent.pk})
    assert response.status_code == 200
    assert Agent.objects.filter(pk=agent.pk).exists()
