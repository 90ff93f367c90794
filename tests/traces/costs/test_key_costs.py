"""Spend through API keys: a turn sent with a key writes its cost into the key's roll-up rows
(and a rebuild from the steps writes the same rows); the costs page splits and filters by key,
naming the browser, revoked and deleted keys; a key's budget counts only that key's spend and is
set in the admin."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from agents.turns.services import turn_send
from agents.turns.tasks import turn_run
from agentsite.api_keys import api_key_create, api_key_revoke
from agentsite.models import ApiKey
from tests.members import acting_of, member_of
from traces.costs.budgets import budget_states
from traces.costs.rollups import rollups_rebuild
from traces.models import Budget, ConversationCostRollup, CostRollup, Trace

from ..cost_helpers import ledger_rows, ledger_total, run

pytestmark = pytest.mark.django_db(transaction=True)


def key_for(user, team, name: str = "report script") -> ApiKey:
    key, _secret = api_key_create(membership=member_of(user, team), name=name, scopes=["chat"])
    return key


def run_with_key(conversation, user, key: ApiKey, text: str = "call the current_time tool 2 times") -> Trace:
    trace = turn_send(acting=acting_of(user, conversation), text=text, api_key=key).trace
    turn_run(trace.pk)
    trace.refresh_from_db()
    return trace


def page(client, **params):
    response = client.get(reverse("costs"), params)
    assert response.status_code == 200
    return response


# -- the ledger --------------------------------------------------------------------------------------
def test_a_turn_through_a_key_is_in_the_keys_rollups_and_a_rebuild_agrees(priced_agent, chat, alice, team_a,
                                                                          sent_turns, use_redis):
    key = key_for(alice, team_a)
    keyed = run_with_key(chat, alice, key)
    browser = run(chat, alice, "What is 12 * (7 + 5)?")
    assert keyed.status == browser.status == "completed"
    assert keyed.api_key_id == key.pk and browser.api_key_id is None
    assert keyed.cost_usd > 0 and browser.cost_usd > 0
    assert ledger_total(api_key_id=key.pk) == keyed.cost_usd
    assert ledger_total(api_key_id=0) == browser.cost_usd
    assert set(CostRollup.objects.values_list("api_key_id", flat=True)) == {0, key.pk}
    live, live_conv = ledger_rows(), ledger_rows(ConversationCostRollup)
    rollups_rebuild(team_id=team_a.pk)
    assert ledger_rows() == live and ledger_rows(ConversationCostRollup) == live_conv


# -- the costs page ----------------------------------------------------------------------------------
def spend(team, user, usd: str, *, key: ApiKey | None = None, days_ago: int = 0) -> None:
    CostRollup.objects.create(team=team, day=timezone.localdate() - timedelta(days=days_ago), user_id=user.pk,
                              api_key_id=key.pk if key else 0, provider="Demo", model="demo", calls=1,
                              cost_units=int(Decimal(usd) / Decimal("1e-10")))


def test_the_costs_page_splits_by_key_and_names_browser_revoked_and_deleted_keys(
        team_a, alice, bob, client_for, django_assert_max_num_queries):
    script = key_for(alice, team_a, "report script")
    old = key_for(alice, team_a, "old job")
    gone = key_for(bob, team_a, "gone")
    spend(team_a, alice, "1.50", key=script)
    spend(team_a, alice, "0.25", key=old)
    spend(team_a, bob, "0.75", key=gone)
    spend(team_a, alice, "2")
    api_key_revoke(key=old, membership=member_of(alice, old))
    gone.delete()
    c = client_for(alice)
    with django_assert_max_num_queries(30):
        response = page(c, split="key")
    groups = {g.label: g.amounts.cost for g in response.context["tables"]["key"]}
    assert groups == {"Browser": Decimal(2), f"report script ({script.prefix}…)": Decimal("1.5"),
                      "Deleted key": Decimal("0.75"), f"old job ({old.prefix}…) — revoked": Decimal("0.25")}
    assert [s.label for s in response.context["chart"].series] == [
        "Browser", f"report script ({script.prefix}…)", "Deleted key", f"old job ({old.prefix}…) — revoked"]
    body = response.content.decode()
    assert "By API key" in body and f"report script ({script.prefix}…)" in body
    # the figures add up to the page's total
    assert sum(groups.values()) == response.context["totals"].cost == Decimal("4.5")


def test_someone_elses_key_is_named_by_whose_it_is_for_members(team_a, alice, bob, client_for):
    secret_project = key_for(alice, team_a, "secret project")
    mine = key_for(bob, team_a, "bob's script")
    spend(team_a, alice, "1", key=secret_project)
    spend(team_a, bob, "1", key=mine)
    response = page(client_for(bob), split="key")
    labels = {g.label for g in response.context["tables"]["key"]}
    assert labels == {f"A key of alice ({secret_project.prefix}…)", f"bob's script ({mine.prefix}…)"}
    assert "secret project" not in response.content.decode()
    assert [label for _code, label in response.context["choices"]["keys"]] == [f"bob's script ({mine.prefix}…)"]


def test_the_costs_page_filters_by_key(team_a, alice, client_for):
    script = key_for(alice, team_a)
    spend(team_a, alice, "1.50", key=script)
    spend(team_a, alice, "2")
    c = client_for(alice)
    assert page(c, key=str(script.uuid)).context["totals"].cost == Decimal("1.5")
    assert page(c, key="browser").context["totals"].cost == Decimal(2)
    assert page(c).context["totals"].cost == Decimal("3.5")
    # a key of nobody, or of another team, matches nothing; a bad value is reported
    assert page(c, key="00000000-0000-0000-0000-000000000000").context["totals"].cost == 0
    response = page(c, key="nonsense")
    assert response.context["errors"]["key"] == "Unknown API key." and response.context["totals"].cost == Decimal("3.5")
    # the conversation ledger is not kept per key: no conversation table, no split by it
    response = page(c, key=str(script.uuid), split="conversation")
    assert response.context["filters"].split == "key" and "split" in response.context["errors"]
    assert response.context["tables"]["conversation"] is None
    assert "Conversations are not counted per API key" in response.content.decode()


def test_the_most_expensive_traces_follow_the_key_filter(priced_agent, chat, alice, team_a, client_for,
                                                         sent_turns, use_redis):
    key = key_for(alice, team_a)
    keyed = run_with_key(chat, alice, key)
    browser = run(chat, alice, "What is 12 * (7 + 5)?")
    c = client_for(alice)
    assert [t.pk for t in page(c, key=str(key.uuid)).context["top_traces"]] == [keyed.pk]
    assert [t.pk for t in page(c, key="browser").context["top_traces"]] == [browser.pk]


# -- budgets -------------------------------------------------------------------------------------------
def test_a_keys_budget_counts_only_that_keys_spend(team_a, alice, bob):
    key = key_for(alice, team_a)
    other = key_for(alice, team_a, "other")
    spend(team_a, alice, "1.25", key=key)
    spend(team_a, alice, "2", key=other)
    spend(team_a, alice, "4")
    spend(team_a, bob, "8")
    Budget.objects.create(team=team_a, api_key=key, period="day", limit_usd=Decimal(5), mode="block")
    Budget.objects.create(team=team_a, user=alice, period="day", limit_usd=Decimal(50), mode="block")
    Budget.objects.create(team=team_a, period="day", limit_usd=Decimal(100), mode="block")
    states = {s.scope: s.spent for s in budget_states(team_id=team_a.pk, user_id=alice.pk, api_key_id=key.pk)}
    assert states == {"key": Decimal("1.25"), "user": Decimal("7.25"), "team": Decimal("15.25")}
    # not through the key: its budget does not apply
    assert {s.scope for s in budget_states(team_id=team_a.pk, user_id=alice.pk)} == {"user", "team"}
    assert {s.scope for s in budget_states(team_id=team_a.pk, user_id=alice.pk, api_key_id=other.pk)} == {
        "user", "team"}


def budget_form(team, **changes):
    data = {"team": team.pk, "user": "", "api_key": "", "period": "day", "limit_usd": "5", "mode": "block",
            "warn_at_percent": "80", "route_down_hint": "", "route_down_provider": "", "route_down_model": "",
            "enabled": "on"}
    data.update(changes)
    return data


def test_admins_set_a_keys_budget_in_the_admin(client_for, alice, bob, team_a, team_b, charlie):
    key = key_for(bob, team_a, "bob's script")
    theirs = key_for(charlie, team_b, "charlie's")
    c = client_for(alice)
    add = reverse("admin:traces_budget_add")
    form = c.get(add).content.decode()
    assert f"bob&#x27;s script ({key.prefix}…)" in form and "charlie&#x27;s" not in form
    response = c.post(add, budget_form(team_a, user=bob.pk, api_key=key.pk))
    assert response.status_code == 200 and "leave the person or the key empty" in response.content.decode()
    response = c.post(add, budget_form(team_a, api_key=theirs.pk))
    assert response.status_code == 200 and not Budget.objects.exists()  # not a choice
    assert c.post(add, budget_form(team_a, api_key=key.pk)).status_code == 302
    row = Budget.objects.get()
    assert row.api_key == key and row.user is None
    spend(team_a, bob, "1", key=key)
    spend(team_a, bob, "3")
    listing = c.get(reverse("admin:traces_budget_changelist")).content.decode()
    assert f"API key bob&#x27;s script ({key.prefix}…) daily budget" in listing
    assert "$1.0000 (20%)" in listing


def test_the_costs_page_shows_end_users_once_a_key_names_one(team_a, alice, bob, agent, client_for):
    from agents.turns.services import conversation_create

    c = client_for(alice)
    assert page(c).context["tables"]["end_user"] is None  # nobody named one: no table
    script = key_for(alice, team_a)
    today = timezone.localdate()
    for who, end_user, dollars, key in ((alice, "ada", 3, script), (bob, "ada", 5, None), (alice, "", 1, None)):
        conversation = conversation_create(membership=member_of(who, team_a), agent=agent, end_user=end_user,
                                           api_key=key)
        amounts = {"team": team_a, "day": today, "agent_id": agent.pk, "user_id": who.pk,
                   "provider": "Demo", "model": "demo", "calls": 1, "cost_units": dollars * 10**10}
        ConversationCostRollup.objects.create(conversation_id=conversation.pk, **amounts)
        CostRollup.objects.create(api_key_id=key.pk if key else 0, **amounts)

    response = page(c)
    rows = [(g.label, g.amounts.cost) for g in response.context["tables"]["end_user"]]
    assert rows == [("ada (of bob's keys)", 5), ("ada (of alice's keys)", 3), ("No end user named", 1)]
    # The rest is the page's total less the end users'; were the ledgers ever to disagree, it is
    # summed from the per-conversation one.
    CostRollup.objects.filter(team=team_a).delete()
    rows = [(g.label, g.amounts.cost) for g in page(c).context["tables"]["end_user"]]
    assert rows == [("ada (of bob's keys)", 5), ("ada (of alice's keys)", 3), ("No end user named", 1)]
    assert "By end user" in response.content.decode()
    # Through one key: its end users only.
    through = page(c, key=str(script.uuid)).context["tables"]["end_user"]
    assert [(g.label, g.amounts.cost) for g in through] == [("ada (of alice's keys)", 3)]
