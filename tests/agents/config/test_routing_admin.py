"""Routing rules and model routes in the admin: scoped to the user's teams, validated, audited."""

from __future__ import annotations

import pytest
from django.urls import reverse

from agents.models import ModelRoute, Provider, RoutingRule
from agentsite.models import AuditEvent

ADD_RULE = reverse("admin:agents_routingrule_add")
RULES = reverse("admin:agents_routingrule_changelist")
ADD_ROUTE = reverse("admin:agents_modelroute_add")
ROUTES = reverse("admin:agents_modelroute_changelist")


def rule_data(team, **overrides):
    data = {"team": team.pk, "agent": "", "hint": "code", "keywords": "python\n  SQL  \n\n",
            "patterns": "", "min_length": "", "max_length": "", "priority": "0", "enabled": "on"}
    data.update(overrides)
    return data


@pytest.fixture
def coder(team_a):
    return Provider.objects.create(team=team_a, name="Coder box", kind="openai")


def test_rules_changelist_loads_with_bounded_queries_and_only_own_team(
        client_for, alice, charlie, make_agent, team_b, django_assert_max_num_queries):
    agent = make_agent()
    for i in range(12):
        RoutingRule.objects.create(team=agent.team, agent=agent if i % 2 else None, hint=f"hint-{i}",
                                   keywords=[f"word{i}"], priority=i)
    RoutingRule.objects.create(team=team_b, hint="charlies-secret", keywords=["x"])
    c = client_for(alice)
    with django_assert_max_num_queries(16):
        response = c.get(RULES)
    assert response.status_code == 200
    body = response.content.decode()
    assert "hint-11" in body and "charlies-secret" not in body
    assert reverse("routing_simulator") in body and reverse("routing_backtest") in body


def test_routes_changelist_loads_with_bounded_queries(client_for, alice, coder, django_assert_max_num_queries):
    for i in range(10):
        ModelRoute.objects.create(team=coder.team, hint=f"h{i}", provider=coder, model="gpt-4o-mini")
    ModelRoute.objects.create(team=coder.team, hint="local", provider=coder, model="llama3")
    c = client_for(alice)
    with django_assert_max_num_queries(14):
        response = c.get(ROUTES)
    body = response.content.decode()
    assert response.status_code == 200 and "h9" in body
    assert "price table: gpt-4o-mini (global v1, exact match)" in body
    assert "no price known for this model" in body  # llama3


def test_keywords_are_edited_one_per_line_and_creates_are_audited(client_for, alice, team_a, coder):
    response = client_for(alice).post(ADD_RULE, rule_data(team_a, patterns="^def \\w+\n",
                                                          route_provider=coder.pk, route_model="gpt-4o"))
    assert response.status_code == 302, response.content.decode()[:3000]
    rule = RoutingRule.objects.get()
    # the rule and its route in one form: the route is made (and audited) with it
    route = ModelRoute.objects.get(team=team_a, hint="code")
    assert (route.provider, route.model) == (coder, "gpt-4o")
    assert AuditEvent.objects.filter(object_type="agents.ModelRoute", action="create").count() == 1
    assert rule.keywords == ["python", "SQL"] and rule.patterns == ["^def \\w+"]
    event = AuditEvent.objects.get(team=team_a, object_type="agents.RoutingRule")
    assert event.action == "create" and event.after["keywords"] == ["python", "SQL"]

    form = client_for(alice).get(reverse("admin:agents_routingrule_change", args=[rule.pk])).content.decode()
    assert 'id="id_keywords">\npython\nSQL</textarea>' in form


def test_changes_and_deletes_are_audited(client_for, alice, team_a, coder):
    rule = RoutingRule.objects.create(team=team_a, hint="code", keywords=["python"])
    ModelRoute.objects.create(team=team_a, hint="Code", provider=coder, model="gpt-4o")
    c = client_for(alice)
    url = reverse("admin:agents_routingrule_change", args=[rule.pk])
    assert c.post(url, rule_data(team_a, keywords="python\nrust", priority="5", route_provider=coder.pk,
                                 route_model="gpt-4o")).status_code == 302
    update = AuditEvent.objects.get(action="update")
    assert update.changes == {"keywords": (["python"], ["python", "rust"]), "priority": (0, 5)}
    assert c.post(reverse("admin:agents_routingrule_delete", args=[rule.pk]), {"post": "yes"}).status_code == 302
    assert AuditEvent.objects.filter(action="delete", object_type="agents.RoutingRule").count() == 1


@pytest.mark.parametrize(("pattern", "expected"), [
    ("(unclosed", "Pattern '(unclosed' is not a valid regular expression: missing ), unterminated subpattern"),
    (r"(a)\1", "Pattern '(a)\\\\1' uses a backreference"),
])
def test_bad_patterns_are_refused_naming_the_pattern_and_the_problem(client_for, alice, team_a, pattern, expected):
    response = client_for(alice).post(ADD_RULE, rule_data(team_a, patterns=f"^ok$\n{pattern}"))
    assert response.status_code == 200
    assert expected in response.content.decode().replace("&#x27;", "'")
    assert not RoutingRule.objects.exists()


def test_lengths_must_make_sense_and_a_rule_needs_something_to_match(client_for, alice, team_a):
    c = client_for(alice)
    body = c.post(ADD_RULE, rule_data(team_a, min_length="50", max_length="10")).content.decode()
    assert "The maximum length (10) is smaller than the minimum length (50)" in body
    body = c.post(ADD_RULE, rule_data(team_a, keywords="\n  \n")).content.decode()
    assert "Add at least one keyword or pattern" in body
    assert not RoutingRule.objects.exists()


def test_agent_choices_are_the_rules_team_only(client_for, alice, charlie, make_agent, team_a, team_b):
    own = make_agent(name="Own")
    foreign = make_agent(name="Foreign", team=team_b)
    c = client_for(alice)
    form = c.get(ADD_RULE).content.decode()
    assert f'value="{own.pk}"' in form and "Foreign" not in form
    response = c.post(ADD_RULE, rule_data(team_a, agent=foreign.pk))
    assert response.status_code == 200 and "Select a valid choice" in response.content.decode()
    assert not RoutingRule.objects.exists()


def test_an_admin_of_two_teams_cannot_mix_them(client_for, alice, make_agent, make_member, team_a, team_b):
    make_member(team_b, "alice", "admin")
    other = make_agent(name="Other", team=team_b)
    body = client_for(alice).post(ADD_RULE, rule_data(team_a, agent=other.pk)).content.decode()
    assert "belongs to another team" in body
    assert not RoutingRule.objects.exists()


def test_other_teams_rules_are_not_found_and_members_never_reach_them(
        client_for, alice, bob, charlie, team_a):
    rule = RoutingRule.objects.create(team=team_a, hint="code", keywords=["python"])
    url = reverse("admin:agents_routingrule_change", args=[rule.pk])
    assert client_for(charlie).get(url).status_code in (302, 404)
    assert url not in client_for(charlie).get(RULES).content.decode()
    response = client_for(bob).get(RULES)
    assert response.status_code == 302 and "/admin/login/" in response.url
    assert client_for(charlie).post(url, rule_data(team_a, hint="stolen")).status_code in (302, 403, 404)
    rule.refresh_from_db()
    assert rule.hint == "code"


def test_rules_whose_hint_has_no_model_route_are_flagged(client_for, alice, team_a, coder):
    RoutingRule.objects.create(team=team_a, hint="Code", keywords=["python"])
    RoutingRule.objects.create(team=team_a, hint="orphan", keywords=["x"])
    RoutingRule.objects.create(team=team_a, hint="off", keywords=["x"], enabled=False)
    ModelRoute.objects.create(team=team_a, hint="code", provider=coder, model="gpt-4o")
    body = client_for(alice).get(RULES).content.decode()
    assert "1 enabled rule with no model route" in body
    warning = body.split('class="routing-warning"')[1].split("</div>")[0]
    assert "“orphan”" in warning and "“Code”" not in warning and "“off”" not in warning
    assert "⚠ none (own model)" in body and ">Coder box · gpt-4o<" in body


def test_model_routes_use_the_teams_providers_and_one_route_per_hint(
        client_for, alice, charlie, team_a, team_b, coder):
    foreign = Provider.objects.create(team=team_b, name="Charlie's box", kind="demo")
    c = client_for(alice)
    form = c.get(ADD_ROUTE).content.decode()
    assert "Coder box" in form and "Charlie" not in form
    bad = c.post(ADD_ROUTE, {"team": team_a.pk, "hint": "code", "provider": foreign.pk, "model": "m"})
    assert "Select a valid choice" in bad.content.decode()
    assert c.post(ADD_ROUTE, {"team": team_a.pk, "hint": " code ", "provider": coder.pk,
                              "model": "gpt-4o"}).status_code == 302
    route = ModelRoute.objects.get()
    assert route.hint == "code"
    assert AuditEvent.objects.filter(action="create", object_type="agents.ModelRoute").exists()
    clash = c.post(ADD_ROUTE, {"team": team_a.pk, "hint": "CODE", "provider": coder.pk, "model": "x"})
    assert "already has a model route for the hint “code”" in clash.content.decode()
    assert ModelRoute.objects.count() == 1


def test_a_rule_needs_somewhere_to_send_and_edits_its_route_in_place(client_for, alice, team_a, coder, team_b):
    c = client_for(alice)
    body = c.post(ADD_RULE, rule_data(team_a)).content.decode()
    assert "has no model route yet, so this rule would change nothing" in body and not RoutingRule.objects.exists()
    half = c.post(ADD_RULE, rule_data(team_a, route_provider=coder.pk)).content.decode()
    assert "Give both the provider and the model, or neither." in half
    foreign = Provider.objects.create(team=team_b, name="Theirs", kind="openai")
    assert c.post(ADD_RULE, rule_data(team_a, route_provider=foreign.pk, route_model="m")).status_code == 200
    assert not ModelRoute.objects.exists()

    ModelRoute.objects.create(team=team_a, hint="CODE", provider=coder, model="gpt-4o")
    assert c.post(ADD_RULE, rule_data(team_a)).status_code == 302  # the hint's route exists
    rule = RoutingRule.objects.get()
    url = reverse("admin:agents_routingrule_change", args=[rule.pk])
    form = c.get(url).content.decode()
    assert 'name="route_model" value="gpt-4o"' in form and f'<option value="{coder.pk}" selected>' in form
    assert c.post(url, rule_data(team_a, route_provider=coder.pk, route_model="gpt-4.1")).status_code == 302
    assert ModelRoute.objects.get().model == "gpt-4.1" and ModelRoute.objects.count() == 1
    event = AuditEvent.objects.get(object_type="agents.ModelRoute", action="update")
    assert event.changes == {"model": ("gpt-4o", "gpt-4.1")}
