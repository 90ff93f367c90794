"""The routing simulator and the backtest of draft rules: same answers as a turn, escaped,
bounded, team admins only, and nothing saved."""

from __future__ import annotations

from decimal import Decimal
from urllib.parse import urlencode

import pytest
from django.urls import reverse

from agents.config.simulator import highlight, routing_simulate
from agents.models import Conversation, Message, ModelRoute, Provider, RoutingRule
from agents.turns.routing import route_turn
from agentsite.models import AuditEvent
from tests.members import member_of

SIMULATOR = reverse("routing_simulator")
BACKTEST = reverse("routing_backtest")


def url(base: str, **params) -> str:
    return f"{base}?{urlencode(params)}"


@pytest.fixture
def helper(make_agent):
    return make_agent(name="Helper", system_prompt="You are a helpful assistant. " * 10)


@pytest.fixture
def cloud(team_a):
    return Provider.objects.create(team=team_a, name="Cloud", kind="openai")


@pytest.fixture
def routed(helper, cloud):
    """Rules of team A: code (keywords, priority 5), short (length ≤ 20, priority 1), sql
    (pattern), plus routes for code and sql."""
    team = helper.team
    rules = {
        "code": RoutingRule.objects.create(team=team, hint="code", keywords=["Python", "rust"], priority=5),
        "short": RoutingRule.objects.create(team=team, hint="short", keywords=["hi"], max_length=20, priority=1),
        "sql": RoutingRule.objects.create(team=team, hint="sql", patterns=[r"\bSELECT\b.+\bFROM\b"]),
    }
    ModelRoute.objects.create(team=team, hint="CODE", provider=cloud, model="gpt-4o")
    ModelRoute.objects.create(team=team, hint="sql", provider=cloud, model="gpt-4o-mini")
    return rules


def simulate(agent, text, *, system=False):
    return routing_simulate(agent=agent, text=text, include_system_prompt=system)


def outcomes(sim):
    return [(c.row.hint, c.outcome) for c in sim.checks]


# -- what the simulator decides ------------------------------------------------------------------
def test_a_keyword_matches_ignoring_case_and_is_highlighted(helper, routed):
    sim = simulate(helper, "please write some PYTHON code")
    assert sim.choice.routing["hint"] == "code" and sim.choice.routing["matched_keyword"] == "Python"
    assert (sim.choice.provider.name, sim.choice.model) == ("Cloud", "gpt-4o")
    assert str(sim.highlighted) == "please write some <mark>PYTHON</mark> code"
    assert outcomes(sim) == [("code", "fired"), ("short", "not-reached"), ("sql", "not-reached")]


def test_a_pattern_matches_as_a_regex_and_its_match_is_highlighted(helper, routed):
    sim = simulate(helper, "Why is SELECT * FROM users slow?")
    assert sim.choice.routing["matched_pattern"] == r"\bSELECT\b.+\bFROM\b"
    assert sim.choice.model == "gpt-4o-mini"
    assert str(sim.highlighted) == "Why is <mark>SELECT * FROM</mark> users slow?"
    # Patterns are case-sensitive unless they say (?i).
    assert simulate(helper, "select * from users, what does it do").choice.routing["hint"] is None


def test_length_bounds_are_explained(helper, routed):
    short = simulate(helper, "hi there")
    assert short.choice.routing["hint"] == "short"
    long_text = "hi, " + "tell me a long story about the sea " * 2
    sim = simulate(helper, long_text)
    assert sim.choice.routing["hint"] is None
    check = next(c for c in sim.checks if c.row.hint == "short")
    assert check.outcome == "length"
    assert check.explanation == f"The message has {len(long_text)} characters; this rule allows at most 20."
    code = next(c for c in sim.checks if c.row.hint == "code")
    assert code.outcome == "no-match" and "none of its keywords" in code.explanation.lower()


def test_higher_priority_wins_and_ties_go_to_the_older_rule(helper, routed, cloud):
    team = helper.team
    older = RoutingRule.objects.create(team=team, hint="first", keywords=["deploy"], priority=3)
    RoutingRule.objects.create(team=team, hint="second", keywords=["deploy"], priority=3)
    sim = simulate(helper, "deploy the rust service")
    assert sim.choice.routing["hint"] == "code"  # priority 5 beats the tie at 3
    sim = simulate(helper, "deploy the service")
    assert sim.choice.routing["rule"] == str(older.uuid)
    assert [(c.row.hint, c.outcome, c.tie) for c in sim.checks[:3]] == [
        ("code", "no-match", False), ("first", "fired", True), ("second", "not-reached", True)]
    assert "It would also match (keyword 'deploy')" in sim.checks[2].explanation


def test_agent_specific_rules_apply_only_to_their_agent(helper, make_agent, routed, cloud):
    other = make_agent(name="Other")
    RoutingRule.objects.create(team=helper.team, agent=other, hint="sql", keywords=["table"], priority=9)
    mine = RoutingRule.objects.create(team=helper.team, agent=helper, hint="sql", keywords=["index"], priority=9)
    assert simulate(helper, "the table?").choice.routing["hint"] is None
    assert simulate(other, "the table?").choice.model == "gpt-4o-mini"
    sim = simulate(helper, "add an index")
    assert sim.choice.routing["rule"] == str(mine.uuid) and sim.other_agents_rules == 1


def test_no_match_means_the_agents_own_model(helper, routed):
    sim = simulate(helper, "what's the weather like on the moon today, roughly?")
    assert sim.choice.routing["hint"] is None and not sim.routed
    assert (sim.choice.provider, sim.choice.model) == (helper.provider, "demo")
    assert all(c.outcome in ("no-match", "length") for c in sim.checks)


@pytest.mark.parametrize("text", [
    "python please", "hi", "SELECT a FROM b", "nothing to see here at all, honestly",
    "RUST and SELECT x FROM y", "hi python", "deploy now", "İstanbul python",
])
def test_the_simulator_answers_exactly_as_a_turn_would(helper, make_agent, routed, cloud, alice, text):
    from agents.chat.services import conversation_create

    RoutingRule.objects.create(team=helper.team, agent=helper, hint="sql", keywords=["deploy"], priority=1)
    RoutingRule.objects.create(team=helper.team, hint="broken", patterns=["(a+)+", "now$"], priority=1)
    RoutingRule.objects.create(team=helper.team, hint="off", keywords=["python"], priority=99, enabled=False)
    conversation = conversation_create(agent=helper, membership=member_of(alice, helper.team))
    turn = route_turn(agent=helper, conversation=conversation, text=text)
    sim = simulate(helper, text)
    assert (sim.choice.provider, sim.choice.model, sim.choice.routing, sim.choice.warnings) == (
        turn.provider, turn.model, turn.routing, turn.warnings)


def test_disabled_rules_and_rules_without_a_route_are_pointed_out(helper, routed):
    RoutingRule.objects.create(team=helper.team, hint="off", keywords=["python"], priority=99, enabled=False)
    sim = simulate(helper, "python")
    assert [r.hint for r in sim.disabled] == ["off"]
    assert [r.hint for r in sim.unrouted] == ["short"]
    fired = simulate(helper, "hi")
    assert fired.choice.routing["hint"] == "short" and not fired.routed
    assert "no model route has that hint" in fired.choice.routing["reason"]


def test_the_cost_estimate_uses_the_recorders_price_and_says_where_it_came_from(helper, routed):
    sim = simulate(helper, "python " * 40)  # 280 bytes -> 70 + 4 framing tokens
    assert sim.message_tokens == 74 and sim.system_tokens == 0
    assert sim.estimate.source == "price table: gpt-4o (global v1, exact match)"
    assert sim.estimate.cost == Decimal(74) * Decimal("2.5") / Decimal(1_000_000)
    assert sim.own_estimate is not None and sim.own_estimate.priced  # the demo model: free
    assert sim.own_estimate.cost == 0 and "free (offline demo)" in sim.own_estimate.source
    with_prompt = simulate(helper, "python " * 40, system=True)
    assert with_prompt.system_tokens > 0
    assert with_prompt.estimate.tokens == 74 + with_prompt.system_tokens


def test_highlight_escapes_everything():
    html = str(highlight("<b>x</b> <script>alert(1)</script>", keyword="SCRIPT"))
    assert html == "&lt;b&gt;x&lt;/b&gt; &lt;<mark>script</mark>&gt;alert(1)&lt;/script&gt;"
    assert str(highlight("<i>", pattern="(")) == "&lt;i&gt;"


# -- the simulator page ----------------------------------------------------------------------------
def test_the_simulator_page_shows_the_decision_why_and_the_cost(client_for, alice, helper, routed,
                                                                 django_assert_max_num_queries):
    c = client_for(alice)
    c.get(SIMULATOR)
    with django_assert_max_num_queries(14):
        response = c.post(SIMULATOR, {"agent": helper.uuid, "message": "Fix my Python <b>now</b>", "count": "message"})
    body = response.content.decode()
    assert response.status_code == 200
    assert "Rule <strong>“code”</strong> fires" in body and "<mark>Python</mark>" in body
    assert "Fix my <mark>Python</mark> &lt;b&gt;now&lt;/b&gt;" in body and "<b>now</b>" not in body
    assert "Cloud · gpt-4o" in body and "price table: gpt-4o (global v1, exact match)" in body
    assert "No price known" not in body and "free (offline demo)" in body  # own model
    assert "An estimate:" in body


def test_the_simulator_page_stays_bounded_as_rules_grow(client_for, alice, helper, cloud,
                                                         django_assert_max_num_queries):
    for i in range(40):
        RoutingRule.objects.create(team=helper.team, agent=helper if i % 2 else None, hint=f"h{i}",
                                   keywords=[f"w{i}"], priority=i % 3)
        ModelRoute.objects.create(team=helper.team, hint=f"h{i}", provider=cloud, model="gpt-4o")
    c = client_for(alice)
    c.get(SIMULATOR)
    with django_assert_max_num_queries(14):
        response = c.post(SIMULATOR, {"agent": helper.uuid, "message": "w7 please"})
    assert response.status_code == 200 and "“h7”" in response.content.decode()


def test_htmx_gets_only_the_result(client_for, alice, helper, routed):
    response = client_for(alice).post(SIMULATOR, {"agent": helper.uuid, "message": "hi"},
                                      HTTP_HX_REQUEST="true", HTTP_HX_TARGET="result")
    body = response.content.decode()
    assert body.lstrip().startswith('<section id="result"') and "“short”" in body
    assert "<html" not in body


def test_the_simulator_escapes_rule_and_message_text(client_for, alice, helper):
    RoutingRule.objects.create(team=helper.team, hint="<img src=x onerror=alert(1)>",
                               keywords=["<script>"], patterns=["<svg onload"])
    body = client_for(alice).post(SIMULATOR, {"agent": helper.uuid, "message": "a <script>alert(1)</script>"}).content.decode()
    assert "<script>alert" not in body and "<img src=x" not in body and "<svg onload" not in body
    assert "&lt;img src=x onerror=alert(1)&gt;" in body and "/&lt;svg onload/" in body
    assert "a <mark>&lt;script&gt;</mark>alert(1)&lt;/script&gt;" in body


def test_a_long_message_is_posted_and_length_rules_see_all_of_it(helper, cloud, alice):
    from django.test import Client

    RoutingRule.objects.create(team=helper.team, hint="long", keywords=["summarise"], min_length=20_000)
    ModelRoute.objects.create(team=helper.team, hint="long", provider=cloud, model="gpt-4o-mini")
    c = Client(enforce_csrf_checks=True)
    c.force_login(alice)
    page = c.get(url(SIMULATOR, agent=helper.uuid, message="summarise this")).content.decode()
    assert "No rule fires." in page  # a short message in a link works too
    token = page.split('name="csrfmiddlewaretoken" value="')[1].split('"')[0]
    text = "summarise this: " + "lorem ipsum " * 2_000
    response = c.post(SIMULATOR, {"csrfmiddlewaretoken": token, "agent": helper.uuid, "message": text})
    assert response.status_code == 200
    assert "Rule <strong>“long”</strong> fires" in response.content.decode()


def test_an_empty_or_missing_message_shows_the_form(client_for, alice, helper):
    c = client_for(alice)
    page = c.get(SIMULATOR).content.decode()
    assert 'name="message"' in page and "Decision" not in page
    assert "Type a message" in c.post(SIMULATOR, {"message": "   "}).content.decode()


def test_simulator_is_for_team_admins_and_other_teams_are_404(client_for, alice, bob, charlie, vera, helper,
                                                             team_a, make_agent, team_b):
    for user in (bob, vera):
        assert client_for(user).get(SIMULATOR).status_code == 403
        assert client_for(user).get(url(BACKTEST, run="1", hint="x", keywords="y")).status_code == 403
    c = client_for(charlie)
    make_agent(name="Charlie's", team=team_b)
    assert c.get(SIMULATOR).status_code == 200  # his own team
    assert c.get(url(SIMULATOR, team=team_a.uuid)).status_code == 404
    assert c.get(url(SIMULATOR, agent=helper.uuid, message="hi")).status_code == 404
    assert c.post(SIMULATOR, {"agent": helper.uuid, "message": "hi"}).status_code == 404
    assert c.post(SIMULATOR, {"team": team_a.uuid, "message": "hi"}).status_code == 404
    assert c.get(url(BACKTEST, team=team_a.uuid)).status_code == 404
    assert c.get(url(BACKTEST, agent=helper.uuid, run="1", hint="x", keywords="y")).status_code == 404
    assert c.get(url(SIMULATOR, agent="not-a-uuid")).status_code == 404
    assert client_for(alice).get(url(SIMULATOR, team=team_a.uuid)).status_code == 200
    anonymous = SIMULATOR
    from django.test import Client

    assert Client().get(anonymous).status_code == 302


def test_an_admin_of_two_teams_picks_the_team(client_for, alice, helper, make_member, make_agent, team_b):
    make_member(team_b, "alice", "admin")
    theirs = make_agent(name="B agent", team=team_b)
    c = client_for(alice)
    body = c.get(url(SIMULATOR, team=team_b.uuid)).content.decode()
    assert "B agent" in body and "Helper (" not in body and 'name="team"' in body
    assert c.get(url(SIMULATOR, team=team_b.uuid, agent=helper.uuid)).status_code == 404
    assert c.get(url(SIMULATOR, team=team_b.uuid, agent=theirs.uuid, message="x")).status_code == 200


# -- the backtest ------------------------------------------------------------------------------------
@pytest.fixture
def history(helper, make_agent, alice, charlie, team_b):
    """Team A's user messages (oldest first) and one of team B's that mentions SQL too."""
    other = make_agent(name="Other")
    texts = [
        (helper, "How do I write a SQL join?"),
        (helper, "python: read a csv"),
        (other, "sql window functions please"),
        (helper, "tell me a joke"),
        (helper, "<script>alert('sql')</script>"),
        (other, "rust lifetimes"),
    ]
    conversations = {}
    for agent, text in texts:
        conv = conversations.get(agent.pk) or Conversation.objects.create(
            team=agent.team, agent=agent, created_by=alice)
        conversations[agent.pk] = conv
        Message.objects.create(conversation=conv, role="user", text=text, blocks=[])
        Message.objects.create(conversation=conv, role="assistant", text="sql sql", blocks=[])
    theirs = make_agent(name="Theirs", team=team_b)
    conv = Conversation.objects.create(team=team_b, agent=theirs, created_by=charlie)
    Message.objects.create(conversation=conv, role="user", text="TEAM-B-SECRET sql", blocks=[])
    return {"other": other}


def backtest(client, **params):
    params.setdefault("run", "1")
    return client.get(url(BACKTEST, **params))


def test_a_new_draft_rule_lists_the_messages_that_would_change_model(
        client_for, alice, helper, routed, history, django_assert_max_num_queries):
    c = client_for(alice)
    c.get(BACKTEST)
    before = list(RoutingRule.objects.values())
    with django_assert_max_num_queries(16):
        response = backtest(c, hint="sql", keywords="sql", priority="0")
    result = response.context["result"]
    assert response.status_code == 200
    assert result.considered == 6 and result.draft_fired == 3
    changed = [(ch.text, ch.before.model, ch.after.model) for ch in result.changed]
    assert changed == [
        ("<script>alert('sql')</script>", "demo", "gpt-4o-mini"),
        ("sql window functions please", "demo", "gpt-4o-mini"),
        ("How do I write a SQL join?", "demo", "gpt-4o-mini"),
    ]
    counts = {r.label: (r.before, r.after) for r in result.routes}
    assert counts == {"Demo for Helper · demo": (3, 1), "Demo for Other · demo": (1, 0),
                      "Cloud · gpt-4o": (2, 2), "Cloud · gpt-4o-mini": (0, 3)}
    body = response.content.decode()
    assert "TEAM-B-SECRET" not in body
    assert "&lt;script&gt;alert(&#x27;sql&#x27;)&lt;/script&gt;" in body and "<script>alert" not in body
    assert "<strong>3</strong> of 6 messages" in body
    # Saved nowhere.
    assert list(RoutingRule.objects.values()) == before
    assert not AuditEvent.objects.exists()


def test_the_backtest_query_count_does_not_grow_with_messages(client_for, alice, helper, routed, history,
                                                              django_assert_max_num_queries):
    conv = Conversation.objects.filter(agent=helper).first()
    Message.objects.bulk_create([Message(conversation=conv, role="user", text=f"python {i}", blocks=[])
                                 for i in range(300)])
    c = client_for(alice)
    c.get(BACKTEST)
    with django_assert_max_num_queries(16):
        response = backtest(c, hint="sql", keywords="python", priority="9", n="1000")
    assert response.context["result"].considered == 306
    assert len(response.context["result"].changed) == 301


def test_replacing_a_rule_moves_its_messages(client_for, alice, helper, routed, history):
    code = routed["code"]
    response = backtest(client_for(alice), replace=code.uuid, hint="code", keywords="rust", priority="5")
    result = response.context["result"]
    assert [(ch.text, ch.before.model, ch.after.model) for ch in result.changed] == [
        ("python: read a csv", "gpt-4o", "demo")]
    RoutingRule.objects.get(pk=code.pk, keywords=["Python", "rust"])  # unchanged


def test_a_replacement_keeps_the_replaced_rules_place_among_ties(client_for, alice, helper, cloud, history):
    first = RoutingRule.objects.create(team=helper.team, hint="code", keywords=["zzz"])
    RoutingRule.objects.create(team=helper.team, hint="sql", keywords=["sql"])
    ModelRoute.objects.create(team=helper.team, hint="code", provider=cloud, model="gpt-4o")
    ModelRoute.objects.create(team=helper.team, hint="sql", provider=cloud, model="gpt-4o-mini")
    result = backtest(client_for(alice), replace=first.uuid, hint="code", keywords="sql").context["result"]
    # Same priority, and the replaced rule is the older one: the draft now wins every sql message.
    assert {ch.after.model for ch in result.changed} == {"gpt-4o"} and len(result.changed) == 3


def test_switching_a_rule_off_in_the_draft(client_for, alice, helper, routed, history):
    result = backtest(client_for(alice), replace=routed["code"].uuid, enabled="no").context["result"]
    assert sorted(ch.text for ch in result.changed) == ["python: read a csv", "rust lifetimes"]
    assert result.draft_fired == 0
    body = backtest(client_for(alice), enabled="no").content.decode()
    assert "A disabled new rule changes nothing" in body


def test_the_backtest_takes_the_latest_n_and_filters_by_agent(client_for, alice, helper, routed, history):
    c = client_for(alice)
    latest = backtest(c, hint="sql", keywords="sql", n="2").context["result"]
    assert latest.considered == 2 and [ch.text for ch in latest.changed] == ["<script>alert('sql')</script>"]
    other = backtest(c, hint="sql", keywords="sql", agent=history["other"].uuid).context["result"]
    assert other.considered == 2 and [ch.text for ch in other.changed] == ["sql window functions please"]
    too_many = backtest(c, hint="sql", keywords="sql", n="5000")
    assert too_many.context["result"] is None and "1000" in too_many.content.decode().replace(",", "")


def test_a_draft_is_validated_like_a_rule(client_for, alice, helper, routed, history):
    c = client_for(alice)
    response = backtest(c, hint="sql", patterns=r"(sql)\1")
    assert response.context["result"] is None
    assert "a backreference" in response.content.decode().replace("&#x27;", "'")
    response = backtest(c, hint="sql", keywords="x", min_length="9", max_length="3")
    assert response.context["result"] is None and "smaller than the minimum" in response.content.decode()


def test_a_hostile_draft_pattern_cannot_stall_the_backtest_or_the_simulator(client_for, alice, helper, routed, history):
    c = client_for(alice)
    response = backtest(c, hint="sql", patterns="(a|a)*b")  # 6.5 s on 26 characters with re
    assert response.status_code == 200 and response.context["result"] is not None
    # A rule stored before patterns ran on RE2 (the admin now refuses nothing here: it is linear)
    RoutingRule.objects.create(team=helper.team, hint="slow", patterns=["(a|a)*b", "(x+x+)+y"])
    c.get(SIMULATOR)
    response = c.post(SIMULATOR, {"agent": helper.uuid, "message": "a" * 4000 + "x" * 4000})
    assert response.status_code == 200  # with re: hours (bench.hostile_input times RE2)


def test_a_draft_without_a_model_route_is_flagged(client_for, alice, helper, routed, history):
    result = backtest(client_for(alice), hint="nowhere", keywords="joke").context["result"]
    assert result.draft_fired == 1 and result.changed == []
    assert "No model route has the hint “nowhere”" in result.warnings[0]


def test_loading_a_rule_fills_the_draft(client_for, alice, charlie, helper, routed):
    code = routed["code"]
    body = client_for(alice).get(url(BACKTEST, load=code.uuid)).content.decode()
    assert 'id="id_keywords">\nPython\nrust</textarea>' in body
    assert f'<option value="{code.uuid}" selected>' in body
    assert client_for(charlie).get(url(BACKTEST, load=code.uuid)).status_code == 404


def test_conversations_with_a_model_chosen_by_hand_are_left_alone(client_for, alice, helper, routed, history):
    Conversation.objects.filter(agent=helper).update(model_override="demo-large")
    result = backtest(client_for(alice), hint="sql", keywords="sql").context["result"]
    assert result.overridden == 4 and [ch.text for ch in result.changed] == ["sql window functions please"]


def test_charlie_cannot_draft_with_team_a_agents(client_for, charlie, helper, team_b, make_agent):
    make_agent(name="Charlie's", team=team_b)
    response = backtest(client_for(charlie), hint="x", keywords="y", rule_agent=helper.uuid)
    assert response.status_code == 200 and response.context["result"] is None
    assert "Select a valid choice" in response.content.decode()


def test_a_superuser_reaches_any_team_and_a_bad_team_id_is_404(client_for, helper, team_a, team_b):
    from django.contrib.auth import get_user_model

    root = get_user_model().objects.create_superuser("root", "root@example.com", "root-pass-123")
    c = client_for(root)
    body = c.post(SIMULATOR, {"team": team_a.uuid, "agent": helper.uuid, "message": "hi"}).content.decode()
    assert "Helper" in body and "Decision" in body
    assert c.get(url(SIMULATOR, team="nope")).status_code == 404
    assert c.get(url(BACKTEST, team=team_b.uuid)).status_code == 200
