"""Tools in the admin: built-in rows from the code, HTTP tools with write-only headers, switches
and policies (allow / ask a person / deny), the team's default for new tools, audit, bounded
queries. (The Try-it page is in ``test_views.py``.)"""

from __future__ import annotations

import json

from django.contrib.messages import get_messages
from django.urls import reverse

from agents.models import Tool
from agents.tools.http import headers_decrypt
from agents.tools.registry import BUILTINS
from agents.tools.services import tools_sync_builtins
from agentsite.models import AuditEvent

SECRET = "Bearer sk-live-SECRETVALUE-0123456789"
CHANGELIST = "admin:agents_tool_changelist"


def add_data(team, **overrides):
    data = {"team": team.pk, "name": "weather", "description": "Weather by city.", "enabled": "on",
            "parameters": json.dumps({"type": "object", "properties": {"city": {"type": "string"}},
                                      "required": ["city"]}),
            "http_method": "GET", "url_template": "https://api.example.com/weather/{city}",
            "timeout_s": "10", "max_response_bytes": "10000", "headers": f"Authorization: {SECRET}"}
    data.update(overrides)
    return data


# -- built-in rows --------------------------------------------------------------------------------
def test_syncing_creates_built_ins_and_keeps_a_teams_choices(team_a):
    Tool.objects.create(team=team_a, name="calculator", kind="builtin", enabled=False,
                        policy="deny", description="old", parameters={})
    assert tools_sync_builtins(team_a) == len(BUILTINS) - 1
    assert tools_sync_builtins(team_a) == 0

    rows = {t.name: t for t in Tool.objects.filter(team=team_a)}
    assert set(rows) == set(BUILTINS)
    calculator = rows["calculator"]
    assert (calculator.enabled, calculator.policy) == (False, "deny")
    assert calculator.description == BUILTINS["calculator"].description
    assert calculator.parameters == BUILTINS["calculator"].parameters
    assert rows["memory_store"].parameters["required"] == ["content"]
    # new rows of destructive tools ask a person first; the others are allowed (built-in rows
    # keep their code defaults, whatever the team's default for new tools)
    assert rows["memory_forget"].policy == "ask"
    assert rows["memory_store"].policy == "allow"


def test_the_list_shows_the_teams_tools_with_their_switches(client_for, alice, charlie, team_b):
    Tool.objects.create(team=team_b, name="b_secret_tool", kind="http", url_template="https://b.example/")
    response = client_for(alice).get(reverse(CHANGELIST))
    assert response.status_code == 200
    html = response.content.decode()
    for name in BUILTINS:
        assert name in html
    assert "b_secret_tool" not in html
    assert 'name="form-0-enabled"' in html and '<select name="form-0-policy"' in html
    assert "Role floor" in html and "Viewer" in html
    assert not Tool.objects.filter(team=team_b, kind="builtin").exists()


def test_the_list_runs_a_bounded_number_of_queries(client_for, alice, team_a, make_agent,
                                                   django_assert_max_num_queries):
    client = client_for(alice)
    client.get(reverse(CHANGELIST))  # creates the built-in rows
    for i in range(25):
        tool = Tool.objects.create(team=team_a, name=f"api_{i}", kind="http",
                                   url_template="https://api.example.com/")
        make_agent(name=f"Agent {i}", tools=()).tools.add(tool)
    with django_assert_max_num_queries(16):
        response = client.get(reverse(CHANGELIST))
    assert response.status_code == 200 and "api_24" in response.content.decode()


def test_switching_in_the_list_is_audited(client_for, alice, team_a):
    client = client_for(alice)
    client.get(reverse(CHANGELIST))
    rows = list(Tool.objects.filter(team=team_a).order_by("name"))
    data = {"form-TOTAL_FORMS": str(len(rows)), "form-INITIAL_FORMS": str(len(rows)), "_save": "Save"}
    for i, row in enumerate(rows):
        data[f"form-{i}-id"] = str(row.pk)
        if row.name != "http_fetch":
            data[f"form-{i}-enabled"] = "on"
        data[f"form-{i}-policy"] = "ask" if row.name == "memory_store" else row.policy

    response = client.post(reverse(CHANGELIST), data)

    assert response.status_code == 302
    changed = {t.name: (t.enabled, t.policy) for t in Tool.objects.filter(team=team_a)}
    assert changed["http_fetch"] == (False, "allow") and changed["memory_store"] == (True, "ask")
    events = AuditEvent.objects.filter(object_type="agents.Tool", action="update")
    assert sorted(e.object_repr for e in events) == ["http_fetch", "memory_store"]
    fetch_event = events.get(object_repr="http_fetch")
    assert fetch_event.before["enabled"] is True and fetch_event.after["enabled"] is False
    store_event = events.get(object_repr="memory_store")
    assert store_event.changes == {"policy": ("allow", "ask")}


def test_actions_disable_and_ask_a_person(client_for, alice, team_a):
    client = client_for(alice)
    client.get(reverse(CHANGELIST))
    ids = list(Tool.objects.filter(team=team_a, name__startswith="memory_").values_list("pk", flat=True))
    client.post(reverse(CHANGELIST), {"action": "disable_tools", "_selected_action": ids})
    response = client.post(reverse(CHANGELIST), {"action": "require_approval", "_selected_action": ids})
    assert "2 tool(s) now ask a person first." in [str(m) for m in get_messages(response.wsgi_request)]
    assert set(Tool.objects.filter(pk__in=ids).values_list("enabled", "policy")) == {(False, "ask")}
    # three switched off, two switched to ask: memory_forget asked already, and an action that
    # changes nothing writes no audit row
    assert AuditEvent.objects.filter(object_type="agents.Tool").count() == 5


def test_actions_allow_and_deny_are_offered_and_audited(client_for, alice, team_a):
    client = client_for(alice)
    page = client.get(reverse(CHANGELIST)).content.decode()
    for label in ("Ask a person before the selected tools run",
                  "Allow the selected tools to run without asking",
                  "Deny the selected tools (never run)"):
        assert label in page
    ids = list(Tool.objects.filter(team=team_a, name__in=["calculator", "memory_forget"])
               .values_list("pk", flat=True))
    client.post(reverse(CHANGELIST), {"action": "deny_tools", "_selected_action": ids})
    assert set(Tool.objects.filter(pk__in=ids).values_list("policy", flat=True)) == {"deny"}
    client.post(reverse(CHANGELIST), {"action": "no_approval", "_selected_action": ids})
    assert set(Tool.objects.filter(pk__in=ids).values_list("policy", flat=True)) == {"allow"}
    events = AuditEvent.objects.filter(object_type="agents.Tool").order_by("id")
    assert [(e.object_repr, e.changes) for e in events] == [
        ("calculator", {"policy": ("allow", "deny")}), ("memory_forget", {"policy": ("ask", "deny")}),
        ("calculator", {"policy": ("deny", "allow")}), ("memory_forget", {"policy": ("deny", "allow")}),
    ]
    assert all(e.actor_name == "alice" and e.team_id == team_a.pk for e in events)


def test_the_list_filters_by_policy(client_for, alice, team_a):
    client = client_for(alice)
    client.get(reverse(CHANGELIST))
    Tool.objects.filter(team=team_a, name="calculator").update(policy="deny")
    body = client.get(reverse(CHANGELIST), {"policy__exact": "deny"}).content.decode()
    assert "calculator" in body and "memory_store" not in body


def test_another_teams_admin_cannot_switch_or_set_policies_of_our_tools(client_for, charlie, team_a, team_b):
    tool = Tool.objects.create(team=team_a, name="weather", kind="http",
                               url_template="https://api.example.com/")
    client = client_for(charlie)
    client.post(reverse(CHANGELIST), {"action": "deny_tools", "_selected_action": [tool.pk]})
    client.post(reverse(CHANGELIST), {"form-TOTAL_FORMS": "1", "form-INITIAL_FORMS": "1",
                                      "form-0-id": str(tool.pk), "form-0-policy": "deny",
                                      "form-0-enabled": "", "_save": "Save"})
    change = reverse("admin:agents_tool_change", args=[tool.pk])
    assert client.post(change, {"policy": "deny", "name": "weather"}).status_code == 404
    tool.refresh_from_db()
    assert (tool.policy, tool.enabled) == ("allow", True)
    assert not AuditEvent.objects.filter(team=team_a).exists()


def test_members_and_viewers_cannot_set_policies(client_for, bob, vera, team_a):
    tool = Tool.objects.create(team=team_a, name="weather", kind="http",
                               url_template="https://api.example.com/")
    for user in (bob, vera):
        response = client_for(user).post(reverse(CHANGELIST), {"action": "deny_tools",
                                                                "_selected_action": [tool.pk]})
        assert response.status_code == 302 and "/admin/login/" in response.url
    tool.refresh_from_db()
    assert tool.policy == "allow"


def test_a_built_in_cannot_be_deleted_or_redefined(client_for, alice, team_a):
    client = client_for(alice)
    client.get(reverse(CHANGELIST))
    calculator = Tool.objects.get(team=team_a, name="calculator")
    page = client.get(reverse("admin:agents_tool_change", args=[calculator.pk])).content.decode()
    assert 'name="url_template"' not in page and 'name="parameters"' not in page
    assert reverse("tool_try", args=[calculator.uuid]) in page
    response = client.post(reverse("admin:agents_tool_delete", args=[calculator.pk]), {"post": "yes"})
    assert response.status_code == 403 and Tool.objects.filter(pk=calculator.pk).exists()


# -- HTTP tools and their headers -----------------------------------------------------------------
def test_an_http_tool_is_added_with_headers_encrypted_and_never_shown(client_for, alice, team_a):
    client = client_for(alice)
    response = client.post(reverse("admin:agents_tool_add"), add_data(team_a))
    assert response.status_code == 302, response.content.decode()[:2000]

    tool = Tool.objects.get(team=team_a, name="weather")
    assert tool.kind == "http" and SECRET not in tool.headers_encrypted
    assert headers_decrypt(tool.headers_encrypted) == [("Authorization", SECRET)]
    page = client.get(reverse("admin:agents_tool_change", args=[tool.pk])).content.decode()
    assert "sk-live" not in page and "Stored: Authorization." in page
    event = AuditEvent.objects.get(object_type="agents.Tool", action="create")
    assert event.after["headers_encrypted"] == "set" and "sk-live" not in json.dumps(event.after)

    # Saving without new headers keeps them; new ones replace them; the box clears them.
    change = reverse("admin:agents_tool_change", args=[tool.pk])
    data = add_data(team_a, headers="", description="Changed")
    data.pop("team")
    client.post(change, data)
    tool.refresh_from_db()
    assert tool.description == "Changed" and headers_decrypt(tool.headers_encrypted) == [("Authorization", SECRET)]
    client.post(change, {**data, "headers": "X-Api-Key: another-secret-1"})
    tool.refresh_from_db()
    assert headers_decrypt(tool.headers_encrypted) == [("X-Api-Key", "another-secret-1")]
    client.post(change, {**data, "clear_headers": "on"})
    tool.refresh_from_db()
    assert tool.headers_encrypted == ""


def test_a_schema_that_is_not_valid_is_refused_on_the_page(client_for, alice, team_a):
    bad = json.dumps({"type": "object", "properties": {"city": {"type": 12}}})
    response = client_for(alice).post(reverse("admin:agents_tool_add"), add_data(team_a, parameters=bad))
    assert response.status_code == 200
    assert "The parameters are not a valid JSON schema (at properties/city/type)" in response.content.decode()
    assert not Tool.objects.filter(name="weather").exists()


def test_bad_header_lines_are_refused_without_echoing_values(client_for, alice, team_a):
    response = client_for(alice).post(reverse("admin:agents_tool_add"),
                                      add_data(team_a, headers="Authorization Bearer-topsecret-99"))
    html = response.content.decode()
    assert "Line 1 is not of the form" in html and "topsecret" not in html


def test_other_teams_cannot_reach_a_tool_in_the_admin(client_for, alice, charlie, team_a):
    tool = Tool.objects.create(team=team_a, name="weather", kind="http",
                               url_template="https://api.example.com/")
    response = client_for(charlie).get(reverse("admin:agents_tool_change", args=[tool.pk]))
    assert response.status_code == 404
    assert "weather" not in client_for(charlie).get(reverse(CHANGELIST)).content.decode()


# -- the policy a new tool starts with --------------------------------------------------------------
def test_a_new_http_tool_starts_with_the_teams_default(client_for, alice, team_a):
    client = client_for(alice)
    for default in ("deny", "allow"):
        team_a.tool_policy_default = default
        team_a.save()
        page = client.get(reverse("admin:agents_tool_add")).content.decode()
        assert f'<option value="{default}" selected>' in page
    # Not posted at all: the team's default; posted: what was chosen.
    client.post(reverse("admin:agents_tool_add"), add_data(team_a))
    client.post(reverse("admin:agents_tool_add"), add_data(team_a, name="booking", policy="ask",
                                                           min_role="member"))
    rows = {t.name: (t.policy, t.min_role) for t in Tool.objects.filter(team=team_a, kind="http")}
    assert rows == {"weather": ("allow", "viewer"), "booking": ("ask", "member")}
    assert AuditEvent.objects.get(object_type="agents.Tool", object_repr="booking").after["policy"] == "ask"
    # Saving a tool without the field keeps its policy.
    weather = Tool.objects.get(team=team_a, name="weather")
    data = add_data(team_a, headers="")
    data.pop("team")
    client.post(reverse("admin:agents_tool_change", args=[weather.pk]), data)
    weather.refresh_from_db()
    assert weather.policy == "allow"


def test_an_admin_of_two_teams_with_different_defaults_starts_new_tools_on_ask(
        client_for, alice, team_a, team_b, make_member):
    make_member(team_b, "alice", "admin")
    team_a.tool_policy_default = "allow"
    team_a.save()
    team_b.tool_policy_default = "deny"
    team_b.save()
    client = client_for(alice)
    assert '<option value="ask" selected>' in client.get(reverse("admin:agents_tool_add")).content.decode()
    chosen = client.get(reverse("admin:agents_tool_add"), {"team": team_b.pk}).content.decode()
    assert '<option value="deny" selected>' in chosen


def test_team_admins_set_the_default_for_new_tools_and_it_is_audited(client_for, alice, team_a):
    url = reverse("admin:agentsite_team_change", args=[team_a.pk])
    client = client_for(alice)
    assert 'name="tool_policy_default"' in client.get(url).content.decode()
    response = client.post(url, {"name": team_a.name, "tool_policy_default": "deny"})
    assert response.status_code == 302
    team_a.refresh_from_db()
    assert team_a.tool_policy_default == "deny"
    event = AuditEvent.objects.get(object_type="agentsite.Team", action="update")
    assert event.changes == {"tool_policy_default": ("ask", "deny")} and event.actor_name == "alice"


def test_other_teams_members_and_viewers_cannot_set_the_teams_default(client_for, bob, vera, charlie, team_a):
    url = reverse("admin:agentsite_team_change", args=[team_a.pk])
    assert client_for(charlie).get(url).status_code == 404
    assert client_for(charlie).post(url, {"name": "Mine", "tool_policy_default": "allow"}).status_code == 404
    for user in (bob, vera):
        response = client_for(user).post(url, {"name": team_a.name, "tool_policy_default": "allow"})
        assert response.status_code == 302 and "/admin/login/" in response.url
    team_a.refresh_from_db()
    assert (team_a.name, team_a.tool_policy_default) == ("Team A", "ask")
