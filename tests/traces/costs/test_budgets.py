"""Budgets per team and per person, per day and month, checked before every model request of a
turn: warn (a banner from 80%), block (refused before the call, with ZeroClaw's message and what to
do) and route down (the rest of the turn on a cheaper route). Per-turn limits keep working."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from agents.models import Conversation, ModelRoute, Provider
from agentsite.models import AuditEvent
from traces.costs.budgets import (
    BudgetState,
    budget_decide,
    budget_states,
    money,
    request_budget_states,
)
from traces.models import Budget, CostRollup

from ..cost_helpers import priced_demo, run

pytestmark = pytest.mark.django_db(transaction=True)


def spend(team, user, usd: str, *, days_ago: int = 0, model: str = "demo"):
    CostRollup.objects.create(team=team, day=timezone.localdate() - timedelta(days=days_ago), user_id=user.pk,
                              provider="Demo", model=model, calls=1,
                              cost_units=int(Decimal(usd) / Decimal("1e-10")))


def budget(team, limit: str, *, mode: str = "block", period: str = "day", user=None, **fields) -> Budget:
    return Budget.objects.create(team=team, user=user, period=period, limit_usd=Decimal(limit), mode=mode, **fields)


# -- what has been spent ------------------------------------------------------------------------------
def test_spend_is_summed_per_scope_and_period(team_a, team_b, alice, bob, charlie):
    today = timezone.localdate()
    spend(team_a, alice, "1.25")
    spend(team_a, bob, "2")
    spend(team_a, alice, "4", days_ago=1 if today.day > 1 else 0)
    spend(team_b, charlie, "100")
    budget(team_a, "10", period="day")
    budget(team_a, "50", period="month")
    budget(team_a, "3", period="day", user=alice)
    states = {(s.budget.period, s.is_user): s.spent for s in budget_states(team_id=team_a.pk, user_id=alice.pk)}
    yesterday_in_month = today.day > 1
    assert states[("day", False)] == (Decimal("3.25") if yesterday_in_month else Decimal("7.25"))
    assert states[("month", False)] == Decimal("7.25")
    assert states[("day", True)] == (Decimal("1.25") if yesterday_in_month else Decimal("5.25"))
    assert [s.is_user for s in budget_states(team_id=team_a.pk, user_id=bob.pk)] == [False, False]


def test_levels_follow_zeroclaw_exceeded_over_the_limit_warning_from_the_threshold(team_a):
    state = BudgetState(budget(team_a, "10"), Decimal("7.99"))
    assert state.level() == "ok" and state.level(Decimal("0.01")) == "warning"
    assert state.level(Decimal("2.01")) == "warning"  # exactly at the limit is not over it
    assert state.level(Decimal("2.0100001")) == "exceeded"


def test_blocking_budgets_win_over_routing_and_a_persons_day_comes_first(team_a, alice):
    team_month = BudgetState(budget(team_a, "1", period="month", mode="route_down", route_down_hint="x"), Decimal(2))
    user_day = BudgetState(budget(team_a, "1", user=alice), Decimal(2))
    warn = BudgetState(budget(team_a, "10", mode="warn"), Decimal(9))
    verdict = budget_decide([team_month, warn, user_day], estimate=Decimal(0))
    assert verdict.action == "block" and verdict.state is user_day and len(verdict.warnings) == 3
    assert budget_decide([team_month, warn], estimate=Decimal(0)).action == "route_down"
    assert budget_decide([warn], estimate=Decimal(0)).action == "warn"
    assert budget_decide([warn], estimate=Decimal(2)).action == "warn"  # warn mode never blocks


def test_the_block_message_says_what_was_spent_of_which_budget_and_what_to_do(team_a, alice, settings):
    day = BudgetState(budget(team_a, "10"), Decimal("10.25"))
    assert day.exceeded_message() == (
        "Budget exceeded: $10.25 spent of the team's daily budget of $10.00, so no further model "
        "requests are made. Ask a team admin to raise it, or try again after midnight (UTC).")
    # ZeroClaw's sentence would read "$0.0001 of $0.00 Month limit": the limit keeps its digits
    month = BudgetState(budget(team_a, "0.0001", period="month", user=alice), Decimal("0.00012"))
    assert month.exceeded_message() == (
        "Budget exceeded: $0.00012 spent of your monthly budget of $0.0001, so no further model "
        "requests are made. Ask a team admin to raise it, or try again on the 1st of next month (UTC).")


def test_the_message_never_says_exceeded_while_the_spend_is_under_the_limit(team_a):
    row = budget(team_a, "0.03")
    state = BudgetState(row, Decimal("0.029832"))
    verdict = budget_decide([state], estimate=Decimal("0.0004"))
    assert verdict.action == "block"
    assert verdict.message.startswith(
        "Budget reached: $0.0298 spent of the team's daily budget of $0.03, and the next model "
        "request (about $0.0004) would go over it, so it was not made.")
    assert "exceeded" not in verdict.message
    over = budget_decide([BudgetState(row, Decimal("0.031"))], estimate=Decimal("0.0004"))
    assert over.message.startswith("Budget exceeded: $0.031 spent of the team's daily budget of $0.03,")


# -- in turns -------------------------------------------------------------------------------------------
def test_a_blocked_turn_is_refused_before_any_model_request(priced_agent, chat, team_a, alice, sent_turns, use_redis):
    spend(team_a, alice, "0.02")
    budget(team_a, "0.01")
    trace = run(chat, alice)
    assert trace.status == "failed" and trace.error_kind == "budget"
    assert trace.error.startswith("Budget exceeded: $0.02 spent of the team's daily budget of $0.01, so "
                                  "no further model requests are made.")
    assert not trace.steps.filter(kind="llm_request").exists()
    assert trace.routing["budget"]["status"] == "blocked" and trace.routing["budget"]["message"] == trace.error


def test_a_budget_is_checked_before_every_model_request_inside_a_turn(priced_agent, chat, team_a, alice, sent_turns,
                                                                      use_redis):
    # One request of the demo model costs about $0.0004 here: the first goes, the second would not fit.
    budget(team_a, "0.0005")
    trace = run(chat, alice)
    assert trace.status == "failed" and trace.error_kind == "budget"
    assert trace.steps.filter(kind="llm_request").count() == 1
    assert trace.cost_usd > 0 and trace.error.startswith(f"Budget exceeded: {money(trace.cost_usd)} spent of the team's "
                                                       "daily budget of $0.0005,")
    # never charged-then-silent: the tool the model asked for does not run when the request that
    # would read its result will not be made, and the turn says so
    assert not trace.steps.filter(kind="tool_call").exists()
    assert trace.error.endswith("The model asked to run current_time; it was not run, because the request "
                                "that reads the results would not be made.")
    assert trace.routing["budget"]["before_tools"] == ["current_time"]


def test_warn_mode_lets_the_turn_run_notes_it_and_shows_a_banner(priced_agent, chat, team_a, alice, bob, sent_turns,
                                                                 use_redis, client_for):
    spend(team_a, bob, "8.5")
    budget(team_a, "10", mode="warn")
    trace = run(chat, alice)
    assert trace.status == "completed"
    note = trace.routing["budget"]
    assert note["status"] == "warning" and note["message"].startswith("The team's daily budget is 85% used ($8.50 of $10.00)")
    page = client_for(alice).get(reverse("traces")).content.decode()
    assert 'class="budget-banner"' in page and "The team&#x27;s daily budget is 85% used" in page
    header = client_for(alice).get(reverse("trace_detail", args=[trace.uuid])).content.decode()
    assert "85% used" in header


def test_the_banner_costs_one_query_and_shows_only_the_viewers_budgets(team_a, alice, bob, client_for,
                                                                       django_assert_num_queries):
    from django.test import RequestFactory

    from traces.context_processors import budget_banner

    def page(user):
        request = RequestFactory().get("/")
        request.team, request.user = team_a, user
        return request

    request = page(alice)
    with django_assert_num_queries(1):
        assert list(budget_banner(request)["budget_banner"]) == []
    with django_assert_num_queries(0):  # the page's own figures read them: once a request
        assert request_budget_states(request) == []
    budget(team_a, "1", user=bob)
    spend(team_a, bob, "0.9")
    with django_assert_num_queries(1):
        assert list(budget_banner(page(alice))["budget_banner"]) == []  # bob's budget is not alice's
    request = page(bob)
    with django_assert_num_queries(1):  # the budgets with their spends
        lines = list(budget_banner(request)["budget_banner"])
    assert lines == ["Your daily budget is 90% used ($0.90 of $1.00); then new requests are refused until it resets."]


def test_route_down_sends_the_rest_of_the_turn_to_the_cheaper_route(priced_agent, chat, team_a, alice, sent_turns,
                                                                    use_redis, client_for):
    priced_demo(team_a, model="demo-fast", inp="0.1", out="0.2", aliases=())
    ModelRoute.objects.create(team=team_a, hint="cheap", provider=priced_agent.provider, model="demo-fast")
    spend(team_a, alice, "5")
    budget(team_a, "1", mode="route_down", route_down_hint="cheap")
    trace = run(chat, alice)
    assert trace.status == "completed"
    models = set(trace.steps.filter(kind="llm_request").values_list("model", flat=True))
    assert models == {"demo-fast"}
    assert (trace.model, trace.provider_name) == ("demo-fast", priced_agent.provider.name)
    note = trace.routing["budget"]
    assert note["status"] == "routed_down" and note["from"] == "demo" and note["to"].endswith("/ demo-fast")
    assert note["message"].startswith("The team's daily budget was exceeded ($5.00 spent of $1.00), so the rest "
                                      "of this turn uses demo-fast")
    page = client_for(alice).get(reverse("trace_detail", args=[trace.uuid])).content.decode()
    assert "so the rest of this turn uses demo-fast" in page  # Why this model


def test_route_down_to_another_provider_mid_turn(priced_agent, chat, team_a, alice, sent_turns, use_redis):
    cheap = Provider.objects.create(team=team_a, name="Cheap demo", kind="demo")
    budget(team_a, "0.0005", mode="route_down", route_down_provider=cheap, route_down_model="demo-careful")
    trace = run(chat, alice)
    assert trace.status == "completed"
    steps = list(trace.steps.filter(kind="llm_request").order_by("seq").values_list("provider", "model"))
    assert steps[0] == (priced_agent.provider.name, "demo") and set(steps[1:]) == {("Cheap demo", "demo-careful")}
    assert trace.provider_name == "Cheap demo"


def test_a_route_down_without_a_usable_route_refuses_instead(priced_agent, chat, team_a, alice, sent_turns, use_redis):
    spend(team_a, alice, "5")
    budget(team_a, "1", mode="route_down", route_down_hint="nowhere")
    trace = run(chat, alice)
    assert trace.status == "failed" and "Its cheaper route is not set up" in trace.error
    assert any("routes down to a route that does not exist" in w for w in trace.meta.get("warnings", []))


def test_a_persons_budget_blocks_them_and_not_their_team(priced_agent, chat, team_a, alice, bob, sent_turns, use_redis):
    spend(team_a, bob, "3")
    budget(team_a, "2", user=bob)
    bobs = Conversation.objects.create(team=team_a, agent=priced_agent, created_by=bob)
    assert run(bobs, bob).error.startswith("Budget exceeded: $3.00 spent of your daily budget of $2.00,")
    assert run(chat, alice).status == "completed"


def test_the_agents_per_turn_limits_still_stop_a_turn(priced_agent, chat, alice, sent_turns, use_redis):
    priced_agent.max_cost_per_turn = Decimal("0.0001")
    priced_agent.save(update_fields=["max_cost_per_turn"])
    trace = run(chat, alice)
    assert trace.status == "failed" and "reached the agent's limit of $0.0001 per turn" in trace.error
    assert trace.steps.filter(kind="llm_request").count() == 1
    priced_agent.max_cost_per_turn, priced_agent.max_tokens_per_turn = None, 10
    priced_agent.save(update_fields=["max_cost_per_turn", "max_tokens_per_turn"])
    trace = run(chat, alice, "call the current_time tool 2 times")
    assert "reached the agent's limit of 10 tokens per turn" in trace.error


# -- the admin --------------------------------------------------------------------------------------------
def budget_form(team, **changes):
    data = {"team": team.pk, "user": "", "period": "day", "limit_usd": "5", "mode": "block",
            "warn_at_percent": "80", "route_down_hint": "", "route_down_provider": "", "route_down_model": "",
            "enabled": "on"}
    data.update(changes)
    return data


def test_admins_set_budgets_in_the_admin_with_checks_and_an_audit_trail(client_for, alice, team_a, team_b,
                                                                         charlie):
    c = client_for(alice)
    add = reverse("admin:traces_budget_add")
    response = c.post(add, budget_form(team_a, mode="route_down"))
    assert response.status_code == 200 and b"Route down to a model route" in response.content
    response = c.post(add, budget_form(team_a, user=charlie.pk))
    assert response.status_code == 200  # charlie is not a choice: not in alice's teams
    response = c.post(add, budget_form(team_a, limit_usd="0"))
    assert b"Enter an amount above 0." in response.content
    assert c.post(add, budget_form(team_a)).status_code == 302
    row = Budget.objects.get(team=team_a)
    assert AuditEvent.objects.filter(team=team_a, object_type="traces.Budget", action="create").exists()
    listing = c.get(reverse("admin:traces_budget_changelist")).content.decode()
    assert "$0.0000 (0%)" in listing
    assert client_for(charlie).get(reverse("admin:traces_budget_change", args=[row.pk])).status_code in (302, 404)
    assert "Team daily budget" not in client_for(charlie).get(reverse("admin:traces_budget_changelist")).content.decode()


def test_members_cannot_set_budgets(client_for, bob, team_a):
    response = client_for(bob).post(reverse("admin:traces_budget_add"), budget_form(team_a))
    assert response.status_code == 302 and not Budget.objects.exists()  # to the admin's login


@pytest.mark.parametrize(("amount", "shown"), [
    ("12.5", "$12.50"), ("1234.5", "$1,234.50"), ("0.5", "$0.50"), ("0.215064", "$0.2151"),
    ("0.0004", "$0.0004"), ("0.000042", "$0.000042"), ("0", "$0.00"), ("0.029998", "$0.029998"),
])
def test_money_shows_amounts_as_the_meter_does(amount, shown):
    assert money(Decimal(amount)) == shown
