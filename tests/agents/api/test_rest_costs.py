"""``/api/v1/costs``: the cost ledger (daily roll-ups) over a range of days, grouped by day,
agent, model, person or API key; totals and groups are sums of the same rows. The money lost to
prompt-cache misses is the costs page's figure, read from turns run through the real task."""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from agents.models import Conversation
from agents.runtime.providers.demo_cache import PROMPT_CACHE
from tests.agents.api.rest_keys import error_of, key_client
from tests.traces.cost_helpers import EARLY, run
from traces.costs.cache_selectors import step_cache_explanation
from traces.json_values import usd
from traces.models import CostRollup, ModelPrice

pytestmark = pytest.mark.django_db

DOLLAR = 10_000_000_000  # cost units of one dollar
LONG_PROMPT = "You are a careful assistant. Answer briefly and check your arithmetic. " * 80


@pytest.fixture
def ledger(agent, make_agent, alice, bob, team_a, team_b):
    """Team A's spend: three days, two agents, two models, alice and bob, the browser and two keys."""
    other = make_agent(name="Writer")
    alices = key_client(alice, team_a, ["costs:read"], name="alice's script")
    bobs = key_client(bob, team_a, ["costs:read"], name="bob's script")
    today = timezone.localdate()

    def row(days_ago, agent_, user, key, model, dollars, **amounts):
        return CostRollup.objects.create(
            team=team_a, day=today - timedelta(days=days_ago), agent_id=agent_.pk if agent_ else 987654,
            user_id=user.pk, api_key_id=key.key.pk if key else 0, provider="Demo", model=model,
            calls=1, cost_units=dollars * DOLLAR, input_tokens=100, output_tokens=10, **amounts)

    row(0, agent, alice, None, "demo", 1)
    row(0, agent, alice, alices, "demo", 2)
    row(1, other, bob, bobs, "demo-large", 4)
    row(2, None, bob, None, "demo", 8)  # an agent deleted since
    CostRollup.objects.create(team=team_b, day=today, provider="Demo", model="demo", calls=1, cost_units=99 * DOLLAR)
    return {"today": today, "agent": agent, "other": other, "alice": alices, "bob": bobs}


def report(client, **params) -> dict:
    response = client.get("/api/v1/costs", params)
    assert response.status_code == 200, response.content
    return response.json()


def test_by_day_every_day_of_the_range_adds_up_to_the_totals(ledger, alice, team_a):
    today = ledger["today"]

    body = report(ledger["alice"], date_from=(today - timedelta(days=3)).isoformat())

    assert body["group_by"] == "day" and body["date_to"] == today.isoformat()
    assert [(g["key"], g["cost_usd"]) for g in body["data"]] == [
        ((today - timedelta(days=n)).isoformat(), cost) for n, cost in ((3, "0"), (2, "8"), (1, "4"), (0, "3"))]
    assert body["totals"]["cost_usd"] == "15" and body["totals"]["calls"] == 4
    assert body["totals"]["total_tokens"] == 4 * 110


def test_by_agent_the_largest_first_with_public_ids(ledger):
    body = report(ledger["alice"], group_by="agent")

    assert [(g["key"], g["label"], g["cost_usd"]) for g in body["data"]] == [
        (None, "(deleted agent)", "8"), (str(ledger["other"].uuid), "Writer", "4"),
        (str(ledger["agent"].uuid), "Helper", "3")]


def test_by_model_and_by_person(ledger):
    by_model = report(ledger["alice"], group_by="model")
    by_person = report(ledger["alice"], group_by="person")

    assert [(g["key"], g["provider"], g["cost_usd"]) for g in by_model["data"]] == [
        ("demo", "Demo", "11"), ("demo-large", "Demo", "4")]
    assert [(g["key"], g["cost_usd"]) for g in by_person["data"]] == [("bob", "12"), ("alice", "3")]


def test_by_key_names_only_the_keys_the_caller_may_see(ledger, bob, team_a):
    as_admin = {g["key"]: g["cost_usd"] for g in report(ledger["alice"], group_by="key")["data"]}
    as_bob = report(ledger["bob"], group_by="key")["data"]

    assert as_admin == {"browser": "9", str(ledger["alice"].key.uuid): "2", str(ledger["bob"].key.uuid): "4"}
    assert {g["key"]: g["cost_usd"] for g in as_bob} == {"browser": "9", None: "2", str(ledger["bob"].key.uuid): "4"}
    hidden = next(g for g in as_bob if g["key"] is None)
    assert "alice's script" not in hidden["label"]


def test_filters_narrow_every_figure(ledger):
    client = ledger["alice"]

    assert report(client, agent=ledger["other"].slug)["totals"]["cost_usd"] == "4"
    assert report(client, agent=str(ledger["agent"].uuid), group_by="person")["data"][0]["key"] == "alice"
    assert report(client, user="bob")["totals"]["cost_usd"] == "12"
    assert report(client, model="demo-large")["totals"]["cost_usd"] == "4"
    assert report(client, key="browser")["totals"]["cost_usd"] == "9"
    assert report(client, key=str(ledger["bob"].key.uuid))["totals"]["cost_usd"] == "4"


def test_another_teams_spend_is_never_counted(ledger, charlie, team_b):
    body = report(key_client(charlie, team_b, ["costs:read"]), group_by="agent")

    assert body["totals"]["cost_usd"] == "99"
    assert [g["label"] for g in body["data"]] == ["(deleted agent)"]


@pytest.mark.parametrize(("params", "param"), [
    ({"group_by": "planet"}, "group_by"), ({"date_from": "last week"}, "date_from"),
    ({"date_from": "2026-02-01", "date_to": "2026-01-01"}, "date_from"),
    ({"date_from": "2020-01-01", "date_to": "2026-01-01"}, "date_from"), ({"agent": "no-such-agent"}, "agent"),
    ({"key": "someone"}, "key")])
def test_a_bad_parameter_is_a_400_naming_it(ledger, params, param):
    response = ledger["alice"].get("/api/v1/costs", params)

    assert response.status_code == 400
    assert error_of(response)["param"] == param


def test_costs_need_the_costs_scope(ledger, alice, team_a):
    response = key_client(alice, team_a, ["chat", "traces:read"]).get("/api/v1/costs")

    assert response.status_code == 403
    assert error_of(response)["code"] == "insufficient_scope"


def test_the_default_range_is_the_last_week(ledger):
    body = report(ledger["alice"])

    assert date.fromisoformat(body["date_to"]) - date.fromisoformat(body["date_from"]) == timedelta(days=6)
    assert len(body["data"]) == 7


# -- what cache misses cost ---------------------------------------------------------------------------
def test_without_cache_misses_nothing_is_lost_in_any_group(ledger):
    by_agent = report(ledger["alice"], group_by="agent")
    by_model = report(ledger["alice"], group_by="model")

    assert by_agent["cache_lost"] == {"usd": "0", "requests": by_agent["totals"]["calls"],
                                      "turns": None, "partial": False}
    assert [g["cache_lost_usd"] for g in by_agent["data"]] == ["0", "0", "0"]
    assert {g["cache_lost_usd"] for g in by_model["data"]} == {"0"}


@pytest.fixture
def cached_chat(make_agent, alice, team_a):
    """alice's conversation with an agent whose long system prompt is cached, on a model priced
    with a cache-read rate (so a miss costs money)."""
    PROMPT_CACHE.clear()
    ModelPrice.objects.create(team=team_a, provider_kind="demo", model="demo-cached", input_per_mtok=Decimal(3),
                              output_per_mtok=Decimal(15), cache_read_per_mtok=Decimal("0.3"), effective_from=EARLY)
    agent = make_agent(name="Cached", system_prompt=LONG_PROMPT)
    agent.model = "demo-cached"
    agent.save(update_fields=["model"])
    yield Conversation.objects.create(team=team_a, agent=agent, created_by=alice)
    PROMPT_CACHE.clear()


@pytest.mark.django_db(transaction=True)
def test_a_changed_system_prompt_costs_what_the_costs_page_says(
        cached_chat, make_agent, alice, charlie, team_a, team_b, sent_turns, use_redis):
    agent = cached_chat.agent
    client = key_client(alice, team_a, ["costs:read"])
    first = run(cached_chat, alice, "hello")

    # one request, with nothing before it to miss
    opening = report(client, group_by="agent")
    assert opening["cache_lost"] == {"usd": "0", "requests": 1, "turns": None, "partial": False}
    assert first.steps.filter(kind="llm_request").count() == 1

    agent.system_prompt = "Answer in French. " + LONG_PROMPT
    agent.save(update_fields=["system_prompt"])
    second = run(cached_chat, alice, "what is 2+2")
    body = report(client, group_by="agent")
    requests = [s for t in (first, second) for s in t.steps.filter(kind="llm_request")]

    lost = sum((step_cache_explanation(s).lost_usd for s in requests), Decimal(0))
    assert lost > 0
    assert body["cache_lost"] == {"usd": usd(lost), "requests": len(requests), "turns": None,
                                  "partial": False}
    row = next(g for g in body["data"] if g["key"] == str(agent.uuid))
    assert row["cache_lost_usd"] == body["cache_lost"]["usd"]
    # the same filters narrow it; every grouping carries its part
    other = make_agent(name="Quiet")
    assert report(client, agent=agent.slug)["cache_lost"]["usd"] == body["cache_lost"]["usd"]
    assert report(client, agent=other.slug)["cache_lost"] == {"usd": "0", "requests": 0, "turns": None,
                                                              "partial": False}
    assert report(client, model="demo")["cache_lost"]["requests"] == 0
    by_day = report(client)
    assert by_day["cache_lost"] == body["cache_lost"]
    assert sum(Decimal(g["cache_lost_usd"]) for g in by_day["data"]) == lost
    by_person = report(client, group_by="person")
    assert [g["cache_lost_usd"] for g in by_person["data"] if g["calls"]] == [usd(lost)]
    # another team's key counts none of it
    theirs = report(key_client(charlie, team_b, ["costs:read"]), group_by="agent")
    assert theirs["cache_lost"] == {"usd": "0", "requests": 0, "turns": None, "partial": False}


def test_by_end_user_from_the_conversations_ledger(agent, alice, bob, team_a):
    """Two people's keys, each naming an end user "ada" (two different end users), and a
    conversation of nobody's end user: three groups that add up to the conversations' spend."""
    from agents.turns.services import conversation_create
    from tests.members import member_of
    from traces.models import ConversationCostRollup

    today = timezone.localdate()
    made = {who: conversation_create(membership=member_of(who_user, team_a), agent=agent, end_user=end_user)
            for who, who_user, end_user in (("alice-ada", alice, "ada"), ("bob-ada", bob, "ada"),
                                            ("alice-own", alice, ""))}
    for name, dollars in (("alice-ada", 3), ("bob-ada", 5), ("alice-own", 1)):
        ConversationCostRollup.objects.create(
            team=team_a, day=today, conversation_id=made[name].pk, agent_id=agent.pk,
            user_id=made[name].created_by_id, provider="Demo", model="demo", calls=1,
            cost_units=dollars * DOLLAR, input_tokens=10, output_tokens=1)

    groups = report(key_client(alice, team_a, ["costs:read"]), group_by="end_user")["data"]

    assert [(g["key"], g["label"], g["cost_usd"]) for g in groups] == [
        ("ada", "ada (of bob's keys)", "5"), ("ada", "ada (of alice's keys)", "3"),
        (None, "No end user named", "1")]


def test_an_end_user_reads_their_own_costs_only(agent, alice, team_a):
    """Behind one key, with X-Agentsite-End-User: that end user's conversations, nobody else's
    (another end user's, the person's own, the team's)."""
    from agents.turns.services import conversation_create
    from tests.members import member_of
    from traces.models import ConversationCostRollup

    today = timezone.localdate()
    for end_user, dollars in (("ada", 3), ("bob", 5), ("", 7)):
        made = conversation_create(membership=member_of(alice, team_a), agent=agent, end_user=end_user)
        ConversationCostRollup.objects.create(
            team=team_a, day=today, conversation_id=made.pk, agent_id=agent.pk, user_id=alice.pk,
            provider="Demo", model="demo", calls=1, cost_units=dollars * DOLLAR, input_tokens=10)
    CostRollup.objects.create(team=team_a, day=today, provider="Demo", model="demo", calls=3,
                              cost_units=15 * DOLLAR)
    client = key_client(alice, team_a, ["costs:read"])

    def as_end_user(who, **params):
        response = client.get("/api/v1/costs", params, headers={"X-Agentsite-End-User": who})
        assert response.status_code == 200, response.content
        return response.json()

    assert as_end_user("ada")["totals"]["cost_usd"] == "3"
    assert [g["cost_usd"] for g in as_end_user("bob", group_by="agent")["data"]] == ["5"]
    assert as_end_user("carol")["totals"]["cost_usd"] == "0"
    assert report(client)["totals"]["cost_usd"] == "15"  # the person's own view: the team's ledger
    refused = client.get("/api/v1/costs", {"group_by": "key"}, headers={"X-Agentsite-End-User": "ada"})
    assert refused.status_code == 400 and error_of(refused)["param"] == "group_by"
