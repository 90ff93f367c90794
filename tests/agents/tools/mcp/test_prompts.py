"""A server's prompts as the chat's "/" commands: discovery lists them with their arguments,
the palette of an agent that uses the server's tools offers them, the chat checks what is typed
before any turn starts, and the worker fetches the prompt (``prompts/get``) so the model gets
its text in place of the command. A real server written with the SDK, over Streamable HTTP."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from agents.chat import services
from agents.models import McpServer
from agents.tools.mcp.prompts import PROMPT_META, agent_prompts, prompt_arguments, prompt_expand
from agents.tools.mcp.services import mcp_server_discover
from agents.turns.tasks import turn_run
from tests.members import acting_of
from traces.models import StepPayload, Trace

pytestmark = pytest.mark.django_db


def test_discovery_lists_the_prompts_and_their_arguments(team_a, loopback, notes_url, modern_url):
    found = mcp_server_discover(McpServer(team=team_a, name="notes", transport="http", url=notes_url))
    greet = next(p for p in found.prompts if p.name == "greet")
    assert [p.name for p in found.prompts] == ["daily", "greet"]
    assert greet.title == "Greet someone" and greet.description == "A greeting for a person."
    assert [(a["name"], a["required"]) for a in greet.arguments] == [("name", True), ("tone", False)]
    assert mcp_server_discover(McpServer(team=team_a, name="plain", transport="http",
                                         url=modern_url)).prompts == []


def test_an_agent_that_uses_the_servers_tools_offers_its_prompts(writer, make_agent, notes):
    commands = {c.word: c for c in agent_prompts(writer)}
    assert sorted(commands) == ["/notes_daily", "/notes_greet"]
    assert commands["/notes_greet"].usage == "/notes_greet name=<name> [tone=<tone>]"
    assert commands["/notes_greet"].what == "Greet someone (from notes)"
    assert agent_prompts(make_agent(name="Other", tools=())) == []
    McpServer.objects.filter(pk=notes.pk).update(enabled=False)
    assert agent_prompts(writer) == []


@pytest.mark.parametrize(("typed", "expected"), [
    ('name="Ada Lovelace" tone=formal', {"name": "Ada Lovelace", "tone": "formal"}),
    ("name=Ada", {"name": "Ada"}),
])
def test_arguments_are_name_value_pairs(writer, typed, expected):
    greet = next(c for c in agent_prompts(writer) if c.name == "greet")
    assert prompt_arguments(greet, typed) == expected


@pytest.mark.parametrize(("typed", "says"), [
    ("", "/notes_greet needs name. Use: /notes_greet name=<name> [tone=<tone>]"),
    ("tone=cold", "/notes_greet needs name."),
    ("Ada", "“Ada” is not one of its arguments"),
    ("mood=glad name=Ada", "“mood=glad” is not one of its arguments"),
    ('name="Ada', "No closing quotation"),
])
def test_what_does_not_fit_the_prompt_is_refused_with_its_usage(writer, typed, says):
    greet = next(c for c in agent_prompts(writer) if c.name == "greet")
    with pytest.raises(ValidationError) as refused:
        prompt_arguments(greet, typed)
    assert says in " ".join(refused.value.messages)


def test_the_palette_lists_the_prompts_with_their_usage(client_for, alice, writing):
    page = client_for(alice).get(reverse("conversation", args=[writing.uuid])).content.decode()
    assert 'data-command="/notes_greet name=&lt;name&gt; [tone=&lt;tone&gt;]"' in page
    assert 'data-command="/notes_daily"' in page and "/model" in page


def test_a_prompt_command_missing_an_argument_is_answered_and_starts_nothing(
        client_for, alice, writing, sent_turns):
    response = client_for(alice).post(reverse("message_send", args=[writing.uuid]),
                                      {"text": "/notes_greet tone=warm"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200 and "/notes_greet needs name." in response.content.decode()
    assert not Trace.objects.exists() and sent_turns == []


@pytest.mark.django_db(transaction=True)
def test_the_model_gets_the_prompt_in_place_of_the_command(client_for, alice, writing, sent_turns, use_redis):
    text = '/notes_greet name="Ada Lovelace" tone=formal'
    response = client_for(alice).post(reverse("message_send", args=[writing.uuid]), {"text": text},
                                      HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    trace = Trace.objects.get()
    assert trace.meta[PROMPT_META]["arguments"] == {"name": "Ada Lovelace", "tone": "formal"}
    assert trace.user_message.text == text  # the conversation shows what was typed
    assert turn_run(trace.pk) == "completed"
    request = StepPayload.objects.get(step__trace=trace, kind="request").content
    assert "Write a formal greeting for Ada Lovelace." in request and "/notes_greet" not in request
    message = trace.user_message
    message.refresh_from_db()
    assert message.text == text and message.blocks[0]["text"] == "Write a formal greeting for Ada Lovelace."
    # The next turn's history holds what the model got, not the command.
    client_for(alice).post(reverse("message_send", args=[writing.uuid]), {"text": "thanks"},
                           HTTP_HX_REQUEST="true")
    later = Trace.objects.exclude(pk=trace.pk).get()
    assert turn_run(later.pk) == "completed"
    request = StepPayload.objects.get(step__trace=later, kind="request").content
    assert "Write a formal greeting for Ada Lovelace." in request and "/notes_greet" not in request


def test_a_prompt_of_several_messages_becomes_one_text(writing, alice):
    reply = services.chat_command(acting=acting_of(alice, writing), text="/notes_daily")
    assert reply.prompt is not None and reply.text == ""
    text = prompt_expand(reply.prompt, list(McpServer.objects.all()))
    assert text == "What did you do yesterday?\n\n(assistant) Tell me about today."


@pytest.mark.django_db(transaction=True)
def test_a_prompt_whose_server_the_agent_no_longer_uses_fails_the_turn_saying_so(
        client_for, alice, writing, writer, sent_turns, use_redis):
    client_for(alice).post(reverse("message_send", args=[writing.uuid]), {"text": "/notes_daily"},
                           HTTP_HX_REQUEST="true")
    writer.tools.clear()
    trace = Trace.objects.get()
    assert turn_run(trace.pk) == "failed"
    trace.refresh_from_db()
    assert "no longer one this agent uses" in trace.error


def test_an_empty_conversation_offers_the_prompts_as_starters(client_for, alice, writing):
    page = client_for(alice).get(reverse("conversation", args=[writing.uuid])).content.decode()
    assert 'value="/notes_daily"><button type="submit" class="starter"' in page
    # One that needs arguments fills the composer and waits for them (without script, its
    # post is answered with its usage).
    assert 'data-fill>' in page and "Greet someone…</button>" in page
