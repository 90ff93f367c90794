"""Costs recorded at the moment a model request finishes add up everywhere: sum of step costs =
trace cost = roll-ups = the costs page's total for the same filter. The costs page, its charts
and its access rules; re-pricing a trace or a range; the live cost so far."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from agents.models import Conversation
from agentsite.models import AuditEvent
from tests.helpers import drain, listen
from tests.members import member_of
from traces.costs.rollups import rollups_rebuild
from traces.models import Budget, ConversationCostRollup, CostRollup, ModelPrice, Trace
from traces.record.live import inspector_payload

from ..cost_helpers import (
    STEP_TOKENS,
    conversation_ledger_total,
    ledger_rows,
    ledger_total,
    priced_demo,
    run,
    steps_total,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def viewer(team_a, make_member):
    return make_member(team_a, "victor", "viewer")


def page_total(client, **params) -> Decimal:
    response = client.get(reverse("costs"), params)
    assert response.status_code == 200
    return response.context["totals"].cost


# -- everything adds up ----------------------------------------------------------------------------
def test_step_costs_trace_costs_rollups_and_the_page_total_add_up(priced_agent, chat, alice, bob, sent_turns,
                                                                  use_redis, client_for):
    first = run(chat, alice)
    second = run(chat, alice, "What is 12 * (7 + 5)?")
    bobs = Conversation.objects.create(team=priced_agent.team, agent=priced_agent, created_by=bob)
    third = run(bobs, bob, "call the current_time tool 3 times")
    assert all(t.status == "completed" for t in (first, second, third))
    for trace in (first, second, third):
        steps = list(trace.steps.all())
        assert len([s for s in steps if s.kind == "llm_request"]) >= 2
        assert trace.cost_usd == sum((s.cost_usd or Decimal(0) for s in steps), Decimal(0)) > 0
        for name in STEP_TOKENS:
            assert getattr(trace, name) == sum(getattr(s, name) for s in steps)
    everything = steps_total()
    assert everything == sum((t.cost_usd for t in (first, second, third)), Decimal(0))
    assert ledger_total() == conversation_ledger_total() == everything
    client = client_for(alice)
    assert page_total(client) == everything
    assert page_total(client, user="bob") == third.cost_usd == ledger_total(user_id=bob.pk)
    assert page_total(client, agent=str(priced_agent.uuid), model="demo") == everything
    assert page_total(client, model="gpt-4o") == 0
    yesterday = timezone.localdate() - timedelta(days=1)
    assert page_total(client, date_from=yesterday - timedelta(days=3), date_to=yesterday) == 0
    # the roll-ups kept live equal a rebuild from the steps
    live, live_conv = ledger_rows(), ledger_rows(ConversationCostRollup)
    rollups_rebuild(team_id=priced_agent.team_id)
    assert ledger_rows() == live and ledger_rows(ConversationCostRollup) == live_conv


def test_each_model_request_records_its_price_row_and_match(priced_agent, chat, alice, sent_turns, use_redis):
    trace = run(chat, alice)
    row = ModelPrice.objects.get(team=priced_agent.team, model="demo")
    for step in trace.steps.filter(kind="llm_request"):
        usage = (step.input_tokens * Decimal(3) + step.output_tokens * Decimal(15)) / Decimal(1_000_000)
        assert (step.price_id, step.price_match, step.meta["unpriced"]) == (row.pk, "exact", False)
        assert step.cost_usd == usage > 0
    assert (trace.unpriced_calls, trace.prefix_priced_calls) == (0, 0)


def test_a_model_without_a_price_is_flagged_unpriced_at_zero(make_agent, alice, sent_turns, use_redis,
                                                            client_for):
    agent = make_agent(name="Unpriced")
    agent.model = "demo-huge"  # the demo model answers to any name; this one has no price
    agent.save(update_fields=["model"])
    chat = Conversation.objects.create(team=agent.team, agent=agent, created_by=alice)
    trace = run(chat, alice)
    llm = list(trace.steps.filter(kind="llm_request"))
    assert llm and all(s.meta["unpriced"] and s.price_id is None and s.cost_usd == 0 for s in llm)
    assert trace.unpriced_calls == len(llm) and trace.cost_usd == 0
    page = client_for(alice).get(reverse("costs"))
    assert page.context["totals"].unpriced_calls == len(llm)
    assert b"Unpriced requests" in page.content
    detail = client_for(alice).get(reverse("step_detail", args=[trace.uuid, llm[0].seq])).content.decode()
    assert "no price for “demo-huge” in the price table, so it is counted as $0" in detail
    header = client_for(alice).get(reverse("trace_detail", args=[trace.uuid])).content.decode()
    assert f"{len(llm)} unpriced" in header and "demo-huge: no price, counted as $0" in header


def test_a_prefix_match_is_flagged_on_the_step_and_the_trace(make_agent, team_a, alice, sent_turns, use_redis,
                                                             client_for):
    priced_demo(team_a, model="house")
    agent = make_agent(name="Dated")
    agent.model = "house-20260101"
    agent.save(update_fields=["model"])
    chat = Conversation.objects.create(team=agent.team, agent=agent, created_by=alice)
    trace = run(chat, alice, "hello")
    step = trace.steps.get(kind="llm_request")
    assert (step.price.model, step.price_match) == ("house", "prefix") and step.cost_usd > 0
    assert trace.prefix_priced_calls == 1
    detail = client_for(alice).get(reverse("step_detail", args=[trace.uuid, step.seq])).content.decode()
    assert "prefix match" in detail and "team price v1" in detail


def test_a_deleted_conversation_keeps_its_spend_in_the_ledger(priced_agent, chat, alice, sent_turns, use_redis):
    trace = run(chat, alice)
    spent = ledger_total()
    assert spent == trace.cost_usd > 0
    Trace.objects.filter(pk=trace.pk).delete()
    assert ledger_total() == spent  # budgets do not reset when a chat is deleted


# -- live -------------------------------------------------------------------------------------------
def test_the_cost_so_far_is_announced_as_each_model_request_finishes(priced_agent, chat, alice, sent_turns, use_redis):
    from agents.turns.services import turn_start
    from agents.turns.tasks import turn_run

    trace = turn_start(conversation=chat, membership=member_of(alice, chat), text="call the current_time tool 2 times")
    channel = listen(trace.group_name)
    turn_run(trace.pk)
    trace.refresh_from_db()

    events = [e for e in drain(channel) if e["event"] != "delta"]
    costs = [Decimal(e["totals"]["cost_usd"]) for e in events if e["event"] == "trace"]
    llm_steps = trace.steps.filter(kind="llm_request").count()
    running = [c for c in costs if c > 0]
    assert len(running) >= llm_steps  # one announcement per finished request (and the end)
    assert running == sorted(running) and running[-1] == trace.cost_usd
    assert [e["seq"] for e in events] == list(range(1, trace.event_seq + 1))  # no gap, no repeat
    assert all("html" not in e for e in events)  # the worker renders nothing...
    # ...the inspector's socket does, for an open page, from the record as it is by then
    header = inspector_payload([e for e in events if e["event"] == "trace"][1])["html"]
    assert 'id="trace-header"' in header and f'data-seq="{trace.event_seq}"' in header
    assert f"${trace.cost_usd:.6f}" in header


# -- the page -----------------------------------------------------------------------------------------
def test_members_and_viewers_read_costs_and_charlie_sees_nothing_of_team_a(priced_agent, chat, alice, bob, viewer,
                                                                           charlie, sent_turns, use_redis,
                                                                           client_for):
    trace = run(chat, alice)
    for person in (alice, bob, viewer):
        assert page_total(client_for(person)) == trace.cost_usd
    response = client_for(charlie).get(reverse("costs"))
    assert response.status_code == 200 and response.context["totals"].cost == 0
    assert priced_agent.name.encode() not in response.content and b"Alice&#x27;s chat" not in response.content
    for url in (reverse("trace_reprice", args=[trace.uuid]), reverse("trace_reprice", args=[trace.uuid]) + "?target=table"):
        assert client_for(charlie).get(url).status_code == 404
    assert client_for(charlie).post(reverse("trace_reprice_apply", args=[trace.uuid])).status_code == 404
    # alice's conversation is private: its trace is not the viewer's to re-price until she shares it
    assert client_for(viewer).get(reverse("trace_reprice", args=[trace.uuid])).status_code == 404
    Conversation.objects.filter(pk=chat.pk).update(shared=True)
    assert client_for(viewer).get(reverse("trace_reprice", args=[trace.uuid])).status_code == 200
    assert client_for(viewer).post(reverse("trace_reprice_apply", args=[trace.uuid])).status_code == 403
    assert client_for(bob).post(reverse("trace_reprice_apply", args=[trace.uuid])).status_code == 403
    assert client_for(bob).post(reverse("cost_reprice_apply"), {"date_from": "2026-01-01"}).status_code == 403


def test_the_page_draws_svg_charts_without_inline_styles_and_with_a_table(priced_agent, chat, alice, sent_turns,
                                                                         use_redis, client_for):
    run(chat, alice)
    body = client_for(alice).get(reverse("costs")).content.decode()
    svg = body[body.index('<svg class="chart"'):body.index("</svg>", body.index('<svg class="chart"'))]
    assert "style=" not in body.split("<main", 1)[1] and "<script" not in body.split("<main", 1)[1]
    assert 'role="img"' in svg and "<title" in svg and 'class="series-0"' in svg
    assert re.search(r"<rect class=\"series-0\"[^>]*><title>[A-Z][a-z]{2} \d+: Helper \$", svg)
    assert "The figures as a table" in body and "<th scope=\"col\">Day</th>" in body
    for split in ("model", "user", "conversation"):
        response = client_for(alice).get(reverse("costs"), {"split": split})
        assert response.status_code == 200 and response.context["chart"].series
    bad = client_for(alice).get(reverse("costs"), {"date_from": "soon", "split": "planet", "agent": "x"})
    assert bad.status_code == 200 and bad.context["filters"].split == "agent"
    assert set(bad.context["errors"]) == {"date_from", "split", "agent"}


def test_the_charts_names_are_escaped(priced_agent, chat, alice, sent_turns, use_redis, client_for):
    priced_agent.name = '<img src=x onerror="alert(1)"> & co'
    priced_agent.save(update_fields=["name"])
    run(chat, alice)
    body = client_for(alice).get(reverse("costs")).content.decode()
    svg = body[body.index('<svg class="chart"'):body.index("</svg>", body.index('<svg class="chart"'))]
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt; &amp; co $" in svg
    assert "<img" not in body.split("<main", 1)[1]


def test_the_page_runs_a_bounded_number_of_queries(team_a, alice, client_for, make_agent, make_member,
                                                  django_assert_max_num_queries):
    agents = [make_agent(name=f"Agent {i}") for i in range(10)]
    people = [make_member(team_a, f"person{i}") for i in range(12)]
    today = timezone.localdate()
    rows, conv_rows = [], []
    for n in range(240):
        a, p = agents[n % 10], people[n % 12]
        chat = Conversation.objects.create(team=team_a, agent=a, created_by=p, title=f"chat {n}")
        day = today - timedelta(days=n % 7)
        amounts = {"calls": 2, "cost_units": 1000 * n, "input_tokens": 10, "output_tokens": 5, "cache_read_tokens": 3}
        rows.append(CostRollup(team=team_a, day=day, agent_id=a.pk, user_id=p.pk, provider="P",
                               model=f"m{n % 5}", **amounts))
        conv_rows.append(ConversationCostRollup(team=team_a, day=day, conversation_id=chat.pk, agent_id=a.pk,
                                                user_id=p.pk, provider="P", model=f"m{n % 5}", **amounts))
        Trace.objects.create(team=team_a, conversation=chat, agent=a, user=p, status="completed",
                             cost_usd=Decimal(n) / 1000, model=f"m{n % 5}")
    CostRollup.objects.bulk_create(rows)
    ConversationCostRollup.objects.bulk_create(conv_rows)
    Budget.objects.create(team=team_a, period="month", limit_usd=Decimal("5"))
    Budget.objects.create(team=team_a, user=alice, period="day", limit_usd=Decimal("1"))
    c = client_for(alice)
    c.get(reverse("costs"))  # the first page after signing in keeps the active team in the session
    for split in ("agent", "conversation"):
        # Who is asking (3); the totals, a break-down by agent, model, person and key (with the
        # names of the agents and people), the ten costliest conversations (found by cost,
        # then summed, then named: 4), the money lost to cache misses (the sampled turns, their
        # requests), the chart, the costliest traces, the budgets and their spend, the filter
        # menus (4): 24 for 10 agents, 12 people and 240 conversations.
        with django_assert_max_num_queries(24):
            response = c.get(reverse("costs"), {"split": split})
        assert response.status_code == 200
    assert response.context["totals"].cost == Decimal(sum(1000 * n for n in range(240))) * Decimal("1e-10")
    assert len(response.context["top_traces"]) == 10 and len(response.context["tables"]["conversation"]) == 10
    assert response.context["tables"]["agent"][0].amounts.cache_read_share == pytest.approx(3 / 13)


# -- re-pricing ---------------------------------------------------------------------------------------
def test_a_trace_is_repriced_under_another_model_beside_what_was_recorded(priced_agent, chat, alice, viewer,
                                                                          sent_turns, use_redis, client_for):
    trace = run(chat, alice)
    Conversation.objects.filter(pk=chat.pk).update(shared=True)  # so that the viewer may see its trace
    gpt = ModelPrice.objects.get(team__isnull=True, model="gpt-4o")
    response = client_for(viewer).get(reverse("trace_reprice", args=[trace.uuid]), {"target": f"row:{gpt.pk}"})
    preview = response.context["preview"]
    steps = list(trace.steps.filter(kind="llm_request").order_by("seq"))
    assert [r.step.seq for r in preview.rows] == [s.seq for s in steps]
    for row, step in zip(preview.rows, steps, strict=True):
        expected = (step.input_tokens * Decimal("2.5") + step.output_tokens * Decimal(10)) / Decimal(1_000_000)
        assert row.recorded == step.cost_usd and row.new.cost == expected
    assert preview.recorded_total == trace.cost_usd and preview.new_total < trace.cost_usd
    body = response.content.decode()
    assert "Apply the correction" not in body  # a what-if is never applied
    assert Trace.objects.get(pk=trace.pk).cost_usd == trace.cost_usd


def test_an_admin_corrects_recorded_costs_to_the_updated_table_and_it_is_audited(priced_agent, chat, alice, team_a,
                                                                                  sent_turns, use_redis,
                                                                                  client_for):
    trace = run(chat, alice)
    other = run(chat, alice, "hello")
    before = trace.cost_usd
    old_row = ModelPrice.objects.get(team=team_a, model="demo")
    # the price was wrong: a corrected version, in force since before the turns
    new_row = priced_demo(team_a, inp="30", out="150", since=old_row.effective_from + timedelta(seconds=1))
    c = client_for(alice)
    preview = c.get(reverse("trace_reprice", args=[trace.uuid])).context["preview"]
    assert preview.new_total == before * 10 and len(preview.changed) == len(preview.rows)
    assert trace.cost_usd == Trace.objects.get(pk=trace.pk).cost_usd  # previewing changed nothing
    response = c.post(reverse("trace_reprice_apply", args=[trace.uuid]))
    assert response.status_code == 302
    trace.refresh_from_db()
    assert trace.cost_usd == before * 10
    assert set(trace.steps.filter(kind="llm_request").values_list("price_id", flat=True)) == {new_row.pk}
    assert steps_total(trace=trace) == trace.cost_usd
    assert ledger_total() == conversation_ledger_total() == steps_total() == trace.cost_usd + other.cost_usd
    event = AuditEvent.objects.get(team=team_a, object_type="traces.Trace", object_id=str(trace.pk))
    assert (event.actor, Decimal(event.before["cost_usd"]), Decimal(event.after["cost_usd"])) == (alice, before, before * 10)
    # the other trace was not touched until the range is corrected
    assert Trace.objects.get(pk=other.pk).cost_usd == other.cost_usd
    today = timezone.localdate().isoformat()
    range_page = c.get(reverse("cost_reprice"), {"date_from": today, "date_to": today, "run": "1"})
    assert range_page.context["preview"].changed == other.steps.filter(kind="llm_request").count()
    c.post(reverse("cost_reprice_apply"), {"date_from": today, "date_to": today})
    assert Trace.objects.get(pk=other.pk).cost_usd == other.cost_usd * 10
    assert ledger_total() == steps_total() == sum(Trace.objects.values_list("cost_usd", flat=True), Decimal(0))
    correction = AuditEvent.objects.get(team=team_a, object_type="traces.CostCorrection")
    assert correction.object_id == f"{today}..{today}" and correction.after["steps_changed"] > 0
    rows = list(CostRollup.objects.filter(team=team_a))
    rollups_rebuild(team_id=team_a.pk)
    assert sorted((r.day, r.cost_units, r.calls) for r in rows) == sorted(
        (r.day, r.cost_units, r.calls) for r in CostRollup.objects.filter(team=team_a))


def test_the_inspector_links_to_re_pricing_and_shows_price_provenance(priced_agent, chat, alice, sent_turns, use_redis,
                                                                      client_for):
    trace = run(chat, alice)
    c = client_for(alice)
    page = c.get(reverse("trace_detail", args=[trace.uuid])).content.decode()
    assert reverse("trace_reprice", args=[trace.uuid]) in page
    assert "demo: demo, team price v1, exact match" in page
    step = trace.steps.filter(kind="llm_request").first()
    detail = c.get(reverse("step_detail", args=[trace.uuid, step.seq])).content.decode()
    assert "team price v1 from 2020-01-01" in detail and "input $3" in detail and "output $15" in detail


def test_the_ledger_amounts_are_the_roll_up_tables_columns():
    """``AMOUNT_FIELDS`` (the one list of the ledger's amounts, which the roll-ups write and
    the costs page and API sum) names the columns of both roll-up tables, tokens included."""
    from agents.runtime.pricing import TOKEN_FIELDS
    from traces.costs.rollups import AMOUNT_FIELDS
    from traces.models import CostAmounts

    assert AMOUNT_FIELDS == tuple(f.name for f in CostAmounts._meta.fields)
    assert set(TOKEN_FIELDS) < set(AMOUNT_FIELDS)
    for table in (CostRollup, ConversationCostRollup):
        assert set(AMOUNT_FIELDS) <= {f.name for f in table._meta.fields}
