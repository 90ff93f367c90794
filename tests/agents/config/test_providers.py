"""Providers in the admin: the write-only encrypted key, capabilities, validated JSON, the
connection test, team scope and the audit trail."""

from __future__ import annotations

import json

import httpx
import pytest
from django.contrib.messages import get_messages
from django.urls import reverse

from agents.config.providers import provider_save, provider_test_connection
from agents.models import Agent, Provider
from agentsite.crypto import decrypt, encrypt
from agentsite.models import AuditEvent
from tests.members import member_of

RAW_KEY = "sk-live-RAWSECRET-0123456789abcdef"


def provider_data(**changes) -> dict:
    data = {
        "name": "Alpha gateway", "kind": "openai", "base_url": "", "api_key": "", "timeout_s": "120",
        "extra_headers": "{}", "options": "{}",
        "capability_native_tool_calling": "", "capability_vision": "",
        "capability_prompt_caching": "", "capability_streaming": "",
        "context_window": "", "max_output_tokens": "",
        # the per-model inline, empty
        "model_settings-TOTAL_FORMS": "0", "model_settings-INITIAL_FORMS": "0",
        "model_settings-MIN_NUM_FORMS": "0", "model_settings-MAX_NUM_FORMS": "1000",
    }
    data.update(changes)
    return data


def messages_of(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


@pytest.fixture
def keyed(team_a):
    provider = Provider(team=team_a, name="Alpha gateway", kind="openai")
    provider_save(provider=provider, api_key=RAW_KEY)
    return provider


# -- the key ----------------------------------------------------------------------------------------
def test_the_key_is_encrypted_at_rest_and_never_rendered_anywhere(client_for, alice, team_a, make_agent):
    c = client_for(alice)
    response = c.post(reverse("admin:agents_provider_add"), provider_data(team=team_a.pk, api_key=RAW_KEY))
    assert response.status_code == 302, response.content[:2000]
    provider = Provider.objects.get(name="Alpha gateway")
    assert provider.api_key_encrypted and RAW_KEY not in provider.api_key_encrypted
    assert decrypt(provider.api_key_encrypted) == RAW_KEY

    # An agent on it, changed once, so that its versions and the audit trail have rows.
    agent = make_agent(name="Keyed")
    agent.provider = provider
    agent.save()
    c.post(reverse("admin:agents_provider_change", args=[provider.pk]),
           provider_data(name="Alpha main", timeout_s="30"))
    event = AuditEvent.objects.filter(object_type="agents.Provider").first()
    pages = [
        reverse("admin:agents_provider_changelist"),
        reverse("admin:agents_provider_change", args=[provider.pk]),
        reverse("admin:agents_provider_history", args=[provider.pk]),
        reverse("admin:agents_provider_delete", args=[provider.pk]),
        reverse("admin:agents_agent_change", args=[agent.pk]),
        reverse("admin:agents_agent_versions", args=[agent.pk]),
        reverse("admin:agentsite_auditevent_changelist"),
        reverse("admin:agentsite_auditevent_change", args=[event.pk]),
    ]
    for url in pages:
        page = c.get(url)
        assert page.status_code == 200, url
        body = page.content.decode()
        assert RAW_KEY not in body and provider.api_key_encrypted not in body, url
    change = c.get(reverse("admin:agents_provider_change", args=[provider.pk])).content.decode()
    assert 'type="password" name="api_key"' in change and "A key is set." in change
    assert RAW_KEY[-4:] not in change  # not even its last characters


def test_a_form_with_errors_does_not_echo_the_key(client_for, alice, team_a):
    response = client_for(alice).post(reverse("admin:agents_provider_add"),
                                      provider_data(team=team_a.pk, api_key=RAW_KEY, timeout_s="0"))
    assert response.status_code == 200 and b"errornote" in response.content
    assert RAW_KEY.encode() not in response.content
    assert not Provider.objects.exists()


def test_an_empty_key_keeps_the_stored_one_and_the_checkbox_clears_it(client_for, alice, keyed):
    c = client_for(alice)
    url = reverse("admin:agents_provider_change", args=[keyed.pk])
    token = keyed.api_key_encrypted
    assert c.post(url, provider_data(timeout_s="30")).status_code == 302
    keyed.refresh_from_db()
    assert keyed.api_key_encrypted == token and keyed.timeout_s == 30

    both = c.post(url, provider_data(api_key="sk-other-key-000000", clear_api_key="on"))
    assert both.status_code == 200 and b"not both" in both.content
    keyed.refresh_from_db()
    assert keyed.api_key_encrypted == token

    assert c.post(url, provider_data(clear_api_key="on")).status_code == 302
    keyed.refresh_from_db()
    assert keyed.api_key_encrypted == "" and not keyed.has_api_key
    page = c.get(url).content.decode()
    assert "No key is set" in page and 'name="clear_api_key"' not in page


def test_replacing_the_key_is_audited_as_replaced_without_the_key(client_for, alice, keyed):
    c = client_for(alice)
    c.post(reverse("admin:agents_provider_change", args=[keyed.pk]), provider_data(api_key="sk-new-key-999999999"))
    keyed.refresh_from_db()
    assert decrypt(keyed.api_key_encrypted) == "sk-new-key-999999999"
    event = AuditEvent.objects.get(action="update", object_type="agents.Provider")
    assert event.changes == {"api_key_encrypted": ("set", "replaced")}
    stored = json.dumps([event.before, event.after])
    assert "sk-new-key" not in stored and RAW_KEY not in stored and keyed.api_key_encrypted not in stored


def test_provider_create_update_delete_are_audited_without_secrets(client_for, alice, team_a):
    c = client_for(alice)
    c.post(reverse("admin:agents_provider_add"), provider_data(team=team_a.pk, api_key=RAW_KEY))
    provider = Provider.objects.get()
    c.post(reverse("admin:agents_provider_change", args=[provider.pk]),
           provider_data(name="Renamed", capability_vision="on"))
    c.post(reverse("admin:agents_provider_delete", args=[provider.pk]), {"post": "yes"})
    events = list(AuditEvent.objects.filter(object_type="agents.Provider").order_by("id"))
    assert [e.action for e in events] == ["create", "update", "delete"]
    assert events[0].after["api_key_encrypted"] == "set" and events[0].actor_name == "alice"
    assert events[1].changes == {"name": ("Alpha gateway", "Renamed"), "capabilities": ({}, {"vision": True})}
    assert events[2].before["name"] == "Renamed" and events[2].after is None
    assert RAW_KEY not in json.dumps([[e.before, e.after] for e in events])


# -- capabilities and JSON ----------------------------------------------------------------------------
def test_capabilities_are_three_way_choices_stored_as_overrides(client_for, alice, keyed):
    c = client_for(alice)
    url = reverse("admin:agents_provider_change", args=[keyed.pk])
    c.post(url, provider_data(capability_native_tool_calling="off", capability_vision="on"))
    keyed.refresh_from_db()
    assert keyed.capabilities == {"native_tool_calling": False, "vision": True}
    page = c.get(url).content.decode()
    assert '<option value="off" selected>Off</option>' in page and '<option value="on" selected>On</option>' in page
    c.post(url, provider_data(capability_vision="on"))
    keyed.refresh_from_db()
    assert keyed.capabilities == {"vision": True}


@pytest.mark.parametrize(("field", "value", "message"), [
    ("extra_headers", "[1, 2]", "Enter a JSON object"),
    ("extra_headers", '{"Authorization": "Bearer sk-x"}', "carries a credential"),
    ("extra_headers", '{"bad header": "x"}', "not a valid header name"),
    ("extra_headers", '{"X-Count": 3}', "must be a string"),
    ("options", '"fast"', "Enter a JSON object"),
    ("options", '{"turbo": true}', "Unknown option(s) for OpenAI-compatible: turbo"),
    ("options", "{not json", "Enter a valid JSON"),
])
def test_headers_and_options_are_validated_with_plain_messages(client_for, alice, team_a, field, value, message):
    response = client_for(alice).post(reverse("admin:agents_provider_add"),
                                      provider_data(team=team_a.pk, **{field: value}))
    assert response.status_code == 200 and message in response.content.decode()
    assert not Provider.objects.exists()


def test_options_are_checked_against_the_kind(client_for, alice, team_a):
    c = client_for(alice)
    bad = c.post(reverse("admin:agents_provider_add"),
                 provider_data(team=team_a.pk, kind="demo", options='{"token_delay_s": "slow"}'))
    assert bad.status_code == 200 and "These options do not work" in bad.content.decode()
    good = c.post(reverse("admin:agents_provider_add"), provider_data(
        team=team_a.pk, kind="demo", name="Demo", options='{"token_delay_s": 0.01}',
        extra_headers='{"X-Title": "agentsite"}'))
    assert good.status_code == 302
    assert Provider.objects.get(name="Demo").options == {"token_delay_s": 0.01}


def test_extra_headers_are_encrypted_and_write_only(client_for, alice, team_a):
    c = client_for(alice)
    secret = "org-Secret-Value-0123456789"
    c.post(reverse("admin:agents_provider_add"), provider_data(
        team=team_a.pk, name="Gateway", extra_headers=json.dumps({"X-Title": "agentsite", "X-Org-Token": secret})))
    provider = Provider.objects.get(name="Gateway")
    assert secret not in provider.extra_headers_encrypted and provider.extra_header_names == ["X-Org-Token", "X-Title"]
    assert provider.extra_headers() == {"X-Title": "agentsite", "X-Org-Token": secret}
    page = c.get(reverse("admin:agents_provider_change", args=[provider.pk])).content.decode()
    assert "X-Org-Token" in page and secret not in page and "agentsite&quot;" not in page
    # an empty value keeps the stored one; a name left out is removed; a new value replaces
    c.post(reverse("admin:agents_provider_change", args=[provider.pk]), provider_data(
        team=team_a.pk, name="Gateway", extra_headers=json.dumps({"X-Org-Token": "", "X-New": "v2-value"})))
    provider.refresh_from_db()
    assert provider.extra_headers() == {"X-Org-Token": secret, "X-New": "v2-value"}


def test_an_extra_header_value_echoed_in_an_error_is_redacted(team_a):
    provider = Provider(team=team_a, name="Echo", kind="openai", base_url="https://api.example.com/v1")
    provider.set_extra_headers({"X-Org-Token": "org-Secret-Value-0123456789"})
    provider_save(provider=provider)

    def handler(request):
        return httpx.Response(400, json={"error": {"message": f"bad header {request.headers['x-org-token']}"}})

    check = provider_test_connection(provider=provider, model="m", transport=httpx.MockTransport(handler))
    assert not check.ok and "org-Secret-Value" not in check.message


# -- test connection ------------------------------------------------------------------------------------
def openai_reply(text: str = "OK") -> dict:
    return {"id": "chatcmpl-1", "model": "gpt-4o-mini", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10}}


def test_connection_test_sends_one_tiny_chat_with_the_decrypted_key(keyed):
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=openai_reply())

    check = provider_test_connection(provider=keyed, transport=httpx.MockTransport(handler))
    assert check.ok and check.latency_ms is not None and check.model == "gpt-4o-mini"
    assert check.message.startswith("Connected: the model “gpt-4o-mini” answered in")
    (request,) = seen
    assert request.headers["authorization"] == f"Bearer {RAW_KEY}"
    assert str(request.url) == "https://api.openai.com/v1/chat/completions"
    body = json.loads(request.content)
    assert 1 <= body["max_completion_tokens"] <= 8 and len(body["messages"]) == 1


def test_connection_test_uses_the_model_of_an_agent_on_the_provider(keyed, make_agent):
    agent = make_agent(name="Mini")
    Agent.objects.filter(pk=agent.pk).update(provider=keyed, model="gpt-4.1-nano")
    models = []

    def handler(request):
        models.append(json.loads(request.content)["model"])
        return httpx.Response(200, json=openai_reply())

    assert provider_test_connection(provider=keyed, transport=httpx.MockTransport(handler)).ok
    assert models == ["gpt-4.1-nano"]


@pytest.mark.parametrize(("respond", "expected"), [
    (lambda r: httpx.Response(401, json={"error": {"message": f"Incorrect API key provided: {RAW_KEY}"}}),
     "The API key was rejected."),
    (lambda r: httpx.Response(404, json={"error": {"message": "The model `gpt-4o-mini` does not exist",
                                                   "code": "model_not_found"}}),
     "The connection and the key work, but the provider does not know the model “gpt-4o-mini”."),
    (lambda r: (_ for _ in ()).throw(httpx.ConnectError("connection refused", request=r)),
     "Could not reach https://api.openai.com/v1."),
    (lambda r: (_ for _ in ()).throw(httpx.ReadTimeout("timed out", request=r)),
     "did not answer in time"),
    (lambda r: httpx.Response(429, json={"error": {"message": "Rate limit reached"}}),
     "rate-limit or quota"),
    (lambda r: httpx.Response(500, text="upstream exploded"), "server error"),
    (lambda r: httpx.Response(200, text="<html>not an API</html>"), "not like a chat API"),
])
def test_connection_failures_are_told_in_plain_words_without_the_key(keyed, respond, expected):
    check = provider_test_connection(provider=keyed, transport=httpx.MockTransport(respond))
    assert not check.ok and check.latency_ms is None
    assert check.message.startswith(expected) or expected in check.message, check.message
    assert RAW_KEY not in check.message and "Details:" in check.message


def test_connection_test_says_when_the_key_is_missing_or_unreadable(team_a):
    bare = Provider.objects.create(team=team_a, name="Bare", kind="anthropic")
    check = provider_test_connection(provider=bare, transport=httpx.MockTransport(
        lambda r: httpx.Response(401, json={"error": {"message": "x-api-key header is required"}})))
    assert check.message.startswith("The provider asked for an API key and none is set.")
    Provider.objects.filter(pk=bare.pk).update(api_key_encrypted="gAAAA-not-ours")
    bare.refresh_from_db()
    unreadable = provider_test_connection(provider=bare, transport=httpx.MockTransport(lambda r: 1 / 0))
    assert not unreadable.ok and "Enter the secret again in the admin" in unreadable.message


def test_connection_test_against_the_real_demo_model(team_a):
    demo = Provider.objects.create(team=team_a, name="Demo", kind="demo", options={"token_delay_s": 0})
    check = provider_test_connection(provider=demo)
    assert check.ok and check.model == "demo" and "(the offline demo model)" in check.message


def test_the_change_page_button_tests_and_reports(client_for, alice, team_a):
    demo = Provider.objects.create(team=team_a, name="Demo", kind="demo")
    c = client_for(alice)
    url = reverse("admin:agents_provider_test_connection", args=[demo.pk])
    assert url in c.get(reverse("admin:agents_provider_change", args=[demo.pk])).content.decode()
    response = c.post(url, {"model": "demo-fast"})
    assert response.status_code == 302 and response.url == reverse("admin:agents_provider_change", args=[demo.pk])
    assert any(m.startswith("Connected: the model “demo-fast” answered") for m in messages_of(response))
    assert c.get(url).status_code == 405


def test_the_list_action_tests_each_selected_provider(client_for, alice, team_a, settings):
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]  # an operator who runs models locally
    demo = Provider.objects.create(team=team_a, name="Demo", kind="demo")
    # Nothing listens on port 1: a real connection failure, no mock needed.
    local = Provider.objects.create(team=team_a, name="Local box", kind="openai", base_url="http://127.0.0.1:1/v1")
    response = client_for(alice).post(reverse("admin:agents_provider_changelist"), {
        "action": "test_connection", "_selected_action": [demo.pk, local.pk]})
    assert response.status_code == 302
    found = messages_of(response)
    assert any(m.startswith("Demo: Connected") for m in found)
    assert any(m.startswith("Local box: Could not reach http://127.0.0.1:1/v1.") for m in found)


# -- scope ---------------------------------------------------------------------------------------------------
def test_charlie_sees_nothing_of_team_a_providers(client_for, charlie, keyed, team_b):
    theirs = Provider.objects.create(team=team_b, name="B's model", kind="demo")
    c = client_for(charlie)
    listing = c.get(reverse("admin:agents_provider_changelist"))
    assert listing.status_code == 200 and b"B&#x27;s model" in listing.content and b"Alpha gateway" not in listing.content
    popup = c.get(reverse("admin:agents_provider_changelist") + "?_popup=1&_to_field=id")
    assert b"Alpha gateway" not in popup.content
    for name in ("change", "history", "delete"):
        response = c.get(reverse(f"admin:agents_provider_{name}", args=[keyed.pk]))
        assert response.status_code in (302, 404), name
        if response.status_code == 302:
            assert response.url == reverse("admin:index")
    assert c.post(reverse("admin:agents_provider_test_connection", args=[keyed.pk])).status_code == 404
    auto = c.get(reverse("admin:autocomplete"), {"app_label": "agents", "model_name": "agent",
                                                 "field_name": "provider", "term": ""})
    assert auto.status_code == 200 and [r["text"] for r in auto.json()["results"]] == ["B's model"]
    # Nor can charlie change, delete or test them by posting ids.
    c.post(reverse("admin:agents_provider_change", args=[keyed.pk]), provider_data(name="Hijacked"))
    c.post(reverse("admin:agents_provider_changelist"), {"action": "delete_selected", "_selected_action": [keyed.pk], "post": "yes"})
    acted = c.post(reverse("admin:agents_provider_changelist"), {"action": "test_connection", "_selected_action": [keyed.pk]})
    assert not any("Alpha" in m for m in messages_of(acted))
    keyed.refresh_from_db()
    assert keyed.name == "Alpha gateway" and theirs.team == team_b


def test_a_provider_cannot_be_created_in_another_team(client_for, charlie, team_a):
    response = client_for(charlie).post(reverse("admin:agents_provider_add"), provider_data(team=team_a.pk))
    assert response.status_code == 200 and b"Select a valid choice" in response.content
    assert not Provider.objects.exists()


def test_members_and_viewers_never_reach_provider_pages(client_for, bob, keyed, vera):
    for user in (bob, vera):
        c = client_for(user)
        for url in (reverse("admin:agents_provider_changelist"),
                    reverse("admin:agents_provider_change", args=[keyed.pk])):
            response = c.get(url)
            assert response.status_code == 302 and "/admin/login/" in response.url
        assert c.post(reverse("admin:agents_provider_test_connection", args=[keyed.pk])).status_code == 302


def test_deleting_a_provider_in_use_says_why_not(client_for, alice, make_agent):
    agent = make_agent()
    c = client_for(alice)
    url = reverse("admin:agents_provider_delete", args=[agent.provider_id])
    page = c.get(url).content.decode()
    assert "cannot be deleted: it is still the provider of the agents below" in page and "Helper" in page
    c.post(url, {"post": "yes"})
    assert Provider.objects.filter(pk=agent.provider_id).exists()
    assert not AuditEvent.objects.filter(action="delete").exists()


def test_provider_pages_run_a_bounded_number_of_queries(client_for, alice, team_a, django_assert_max_num_queries):
    for i in range(8):
        provider = Provider(team=team_a, name=f"P{i}", kind="openai")
        provider.set_extra_headers({"X-N": str(i)})
        provider_save(provider=provider, api_key=f"sk-key-{i:012d}")
    c = client_for(alice)
    with django_assert_max_num_queries(15):
        assert c.get(reverse("admin:agents_provider_changelist")).status_code == 200
    with django_assert_max_num_queries(15):
        assert c.get(reverse("admin:agents_provider_change", args=[provider.pk])).status_code == 200


def test_a_turn_sends_the_decrypted_key_and_never_stores_it(make_agent, alice, sent_turns, use_redis, monkeypatch, transactional_db):
    """The key reaches the provider's request; the trace, its steps and the messages never hold it,
    even when the provider echoes it back in an error."""
    from django.core import serializers

    from agents.chat.services import conversation_create
    from agents.models import Message
    from agents.turns.services import turn_start
    from agents.turns.tasks import turn_run
    from traces.models import Step, StepPayload, Trace

    headers: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        headers.append(request.headers.get("authorization", ""))
        return httpx.Response(401, json={"error": {"message": f"Incorrect API key provided: {RAW_KEY}"}})

    real_client = httpx.AsyncClient
    monkeypatch.setattr(httpx, "AsyncClient",
                        lambda *a, **kw: real_client(*a, **{**kw, "transport": httpx.MockTransport(handler)}))
    agent = make_agent(name="Keyed", tools=())
    Provider.objects.filter(pk=agent.provider_id).update(kind="openai", api_key_encrypted=encrypt(RAW_KEY))
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="hello")

    assert turn_run(trace.pk) == "failed"

    assert headers and all(h == f"Bearer {RAW_KEY}" for h in headers)
    trace.refresh_from_db()
    assert "rejected its API key (401)" in trace.error and "attempt" not in trace.error
    details = StepPayload.objects.get(step__trace=trace, step__kind="error", kind="output").content
    assert "The API key was rejected" in details  # the provider's own words, in the trace
    stored = serializers.serialize("json", [*Trace.objects.all(), *Step.objects.all(),
                                            *StepPayload.objects.all(), *Message.objects.all()])
    assert RAW_KEY not in stored


def test_renaming_a_provider_keeps_the_agents_fallbacks_working(client_for, alice, keyed, make_agent):
    agent = make_agent(name="Careful", fallbacks=[{"provider": "Alpha gateway", "model": "gpt-4o-mini"}])
    c = client_for(alice)
    c.post(reverse("admin:agents_provider_change", args=[keyed.pk]), provider_data(name="Alpha main"))
    agent.refresh_from_db()
    assert agent.fallbacks == [{"provider": "Alpha main", "model": "gpt-4o-mini"}]
    assert agent.version == 2 and agent.versions.get(number=2).created_by == alice
    event = AuditEvent.objects.get(object_type="agents.Agent")
    assert event.changes["fallbacks"] == ([{"provider": "Alpha gateway", "model": "gpt-4o-mini"}],
                                          [{"provider": "Alpha main", "model": "gpt-4o-mini"}])


def test_deleting_a_provider_used_as_a_fallback_warns_first(client_for, alice, keyed, make_agent):
    make_agent(name="Careful", fallbacks=[{"provider": "Alpha gateway", "model": "gpt-4o-mini"}])
    page = client_for(alice).get(reverse("admin:agents_provider_delete", args=[keyed.pk])).content.decode()
    assert "These agents fall back to “Alpha gateway”" in page and "Careful" in page
    assert "Yes, I’m sure" in page
