"""MCP resources a person attaches to a message from the chat's "+": the menu lists the
resources of the servers whose tools the agent uses, the chat checks what was ticked, and the
worker reads them (``resources/read``) so the model gets their contents after the message; the
message shows what was typed and what was attached. A real server written with the SDK, over
Streamable HTTP."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from agents.models import Message
from agents.tools.mcp.resources import RESOURCES_META, agent_resources, resource_refs
from agents.turns.tasks import turn_run
from traces.models import StepPayload, Trace

pytestmark = pytest.mark.django_db


def value_of(agent, uri: str) -> str:
    return next(r.value for r in agent_resources(agent) if r.uri == uri)


def test_the_agents_servers_resources_are_offered_and_their_templates_last(writer, make_agent):
    offered = agent_resources(writer)
    assert sorted(r.uri for r in offered[:3]) == ["notes://deploy", "notes://logo", "notes://welcome"]
    welcome = next(r for r in offered if r.uri == "notes://welcome")
    assert welcome.label == "welcome" and welcome.server == "notes" and not welcome.template
    template = offered[-1]
    assert (template.uri, template.template, template.prefix) == ("notes://{name}", True, "notes://")
    assert agent_resources(make_agent(name="Other", tools=())) == []


def test_a_uri_typed_from_a_template_must_fit_it(writer):
    server = str(agent_resources(writer)[0].server_id)
    assert resource_refs(writer, [], [(server, "notes://todo")]) == [
        {"server": int(server), "uri": "notes://todo", "label": "notes://todo"}]
    assert resource_refs(writer, [f"{server} notes://todo"]) == resource_refs(writer, [], [(server, "notes://todo")])
    assert resource_refs(writer, [], [(server, "notes://"), (server, "")]) == []  # left as it was
    for uri in ("notes://a/b", "file:///etc/passwd", "notes://" + "x" * 3000):
        with pytest.raises(ValidationError, match="nor fits one of their templates"):
            resource_refs(writer, [], [(server, uri)])
    with pytest.raises(ValidationError):
        resource_refs(writer, [], [("999", "notes://todo")])  # not the agent's server


def test_only_the_agents_resources_may_be_attached_and_a_few_at_most(writer, make_agent):
    welcome = value_of(writer, "notes://welcome")
    assert resource_refs(writer, [welcome, welcome]) == [
        {"server": int(welcome.split()[0]), "uri": "notes://welcome", "label": "welcome"}]
    with pytest.raises(ValidationError, match="not one of this agent's"):
        resource_refs(make_agent(name="Other", tools=()), [welcome])
    with pytest.raises(ValidationError, match="not one of this agent's"):
        resource_refs(writer, [f"{welcome.split()[0]} file:///etc/passwd"])
    with pytest.raises(ValidationError, match="at most 5"):
        resource_refs(writer, [f"{n} x" for n in range(6)])


def test_the_plus_menu_lists_them(client_for, alice, writing):
    page = client_for(alice).get(reverse("conversation", args=[writing.uuid])).content.decode()
    assert 'name="resources" value="' in page and "notes · notes://welcome" in page
    assert '<label class="linklike" for="attach-input">Images…</label>' in page


@pytest.mark.django_db(transaction=True)
def test_the_model_gets_the_attached_resources_after_the_message(client_for, alice, writer, writing,
                                                                sent_turns, use_redis):
    client = client_for(alice)
    response = client.post(reverse("message_send", args=[writing.uuid]), {
        "text": "Summarize these", "resources": [value_of(writer, "notes://welcome"),
                                                 value_of(writer, "notes://logo")]},
        HTTP_HX_REQUEST="true")
    assert response.status_code == 200 and "Attached: welcome" in response.content.decode()
    trace = Trace.objects.get()
    assert [r["uri"] for r in trace.meta[RESOURCES_META]] == ["notes://welcome", "notes://logo"]
    assert turn_run(trace.pk) == "completed"
    request = StepPayload.objects.get(step__trace=trace, kind="request").content
    assert "Summarize these" in request
    assert "[Attached resource notes://welcome from the MCP server “notes”]\\nWelcome to the test server." in request
    assert "[binary: notes://logo (image/png), 100 bytes]" in request
    message = trace.user_message
    message.refresh_from_db()
    assert message.text == "Summarize these" and "Welcome to the test server." in message.blocks[0]["text"]
    # What the server sent is scrubbed of credentials, as a tool's output is.
    client.post(reverse("message_send", args=[writing.uuid]), {
        "text": "How do I deploy?", "resources": [value_of(writer, "notes://deploy")]}, HTTP_HX_REQUEST="true")
    deploy = Trace.objects.exclude(pk=trace.pk).get()
    assert turn_run(deploy.pk) == "completed"
    request = StepPayload.objects.get(step__trace=deploy, kind="request").content
    assert "Deploy with the key [REDACTED_API_KEY] from the vault." in request
    assert "AKIAIOSFODNN7EXAMPLE" not in str(Message.objects.get(pk=deploy.user_message_id).blocks)
    page = client.get(reverse("conversation", args=[writing.uuid])).content.decode()
    assert "Attached: welcome" in page and "Attached: logo" in page


@pytest.mark.django_db(transaction=True)
def test_a_resource_typed_from_a_template_reaches_the_model(client_for, alice, writer, writing,
                                                            sent_turns, use_redis):
    server = str(agent_resources(writer)[0].server_id)
    client_for(alice).post(reverse("message_send", args=[writing.uuid]), {
        "text": "Read it", "template_server": [server], "template_uri": ["notes://groceries"]},
        HTTP_HX_REQUEST="true")  # as a form sent without the page's script has it
    trace = Trace.objects.get()
    assert turn_run(trace.pk) == "completed"
    request = StepPayload.objects.get(step__trace=trace, kind="request").content
    assert "[Attached resource notes://groceries from the MCP server “notes”]\\nNote groceries" in request


def test_a_resource_that_is_not_the_agents_is_refused_before_anything_starts(
        client_for, alice, writing, sent_turns):
    response = client_for(alice).post(reverse("message_send", args=[writing.uuid]), {
        "text": "Read this", "resources": ["999 notes://welcome"]}, HTTP_HX_REQUEST="true")
    assert response.status_code == 422 and "Choose again from the list." in response.content.decode()
    assert not Trace.objects.exists() and sent_turns == []
