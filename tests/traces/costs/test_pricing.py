"""Which price a model request gets, what it costs for each provider's usage shape, the shipped
table, import and export, and editing prices in the admin."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import httpx
import pytest
from django.urls import reverse
from django.utils import timezone

from agents.runtime.messages import Message
from agents.runtime.pricing import Usage
from agents.runtime.providers.anthropic import AnthropicProvider
from agents.runtime.providers.base import ChatRequest
from agents.runtime.providers.openai import OpenAIProvider
from traces.costs.catalogue import snapshot_read
from traces.costs.price_services import price_export, price_import
from traces.costs.pricing import PriceTable, is_version_suffix, price_table_for, step_cost
from traces.models import ModelPrice

pytestmark = pytest.mark.django_db

EARLY = datetime(2020, 1, 1, tzinfo=UTC)


def price(team=None, model="m", *, kind="", vendor="", aliases=(), prefix=False, inp="1", out="2",
          write=None, read=None, since=EARLY, version=1, label=""):
    return ModelPrice.objects.create(
        team=team, provider_kind=kind, vendor=vendor, model=model, aliases=list(aliases), prefix=prefix,
        input_per_mtok=Decimal(inp), output_per_mtok=Decimal(out),
        cache_write_per_mtok=None if write is None else Decimal(write),
        cache_read_per_mtok=None if read is None else Decimal(read),
        effective_from=since, version=version, label=label)


def match(model, *, kind="openai", team=None, at=None):
    found = price_table_for(team.pk if team else None).match(
        provider_kind=kind, model=model, team_id=team.pk if team else None, at=at)
    return (found.row.model, found.kind.value) if found else None


# -- matching ---------------------------------------------------------------------------------------
def test_a_dated_version_is_priced_by_its_model_as_a_flagged_prefix_match():
    assert match("gpt-4o") == ("gpt-4o", "exact")
    # (dated names the shipped catalogue lists itself are exact rows of their own)
    assert match("gpt-4o-2024-08-06") == ("gpt-4o-2024-08-06", "exact")
    assert match("gpt-4o-2025-01-01") == ("gpt-4o", "prefix")
    assert match("claude-sonnet-4-6-20260301", kind="anthropic") == ("claude-sonnet-4-6", "prefix")
    assert match("claude-opus-4-5-latest", kind="anthropic") == ("claude-opus-4-5", "prefix")
    assert match("claude-opus-4-6@20260205", kind="anthropic") == ("claude-opus-4-6", "prefix")
    assert match("gemini-2.5-flash-001") == ("gemini-2.5-flash", "prefix")


def test_a_sibling_model_is_never_priced_as_its_neighbour():
    assert match("gpt-4o-mini") == ("gpt-4o-mini", "exact")
    assert match("gpt-4o-mini-2025-01-01") == ("gpt-4o-mini", "prefix")  # not gpt-4o
    assert match("gpt-4o-realtime-preview") is None
    assert match("o1-preview") is None  # not o1
    assert match("o1-mini") is None
    assert match("claude-opus-4-6-20260301", kind="anthropic") == ("claude-opus-4-6", "prefix")  # not claude-opus-4-5
    assert match("claude-sonnet-4-7", kind="anthropic") is None  # a newer model is unpriced, not 4-6's price
    assert match("gpt-5.2-mini") is None  # not gpt-5.2, nor gpt-5-mini
    assert match("gemini-3-pro-preview") is None  # not gemini-3.1-pro-preview


def test_only_version_suffixes_count_as_a_prefix():
    assert all(is_version_suffix(s) for s in ("-2024-08-06", "-20250514", "-0613", "-002", "-latest", ":latest", "@001"))
    assert not any(is_version_suffix(s) for s in ("-mini", "-preview", "-1", "-32k", "-2024-08", "", "-turbo-2024-04-09"))


def test_an_exact_row_beats_the_prefix_rule():
    # The first gpt-4o snapshot kept its launch price: priced at $5/$15, not as today's gpt-4o.
    table = price_table_for(None)
    found = table.match(provider_kind="openai", model="gpt-4o-2024-05-13")
    assert (found.row.model, found.kind.value, found.price.input) == ("gpt-4o-2024-05-13", "exact", Decimal(5))


def test_aliases_and_vendor_qualified_names_match_as_aliases():
    price(None, "claude-opus-4-5-house", vendor="anthropic", aliases=("claude-opus-4.5-house",), version=1)
    assert match("claude-opus-4.5-house", kind="anthropic") == ("claude-opus-4-5-house", "alias")
    assert match("anthropic/claude-opus-4.5-house") == ("claude-opus-4-5-house", "alias")  # OpenRouter's way
    assert match("anthropic/claude-opus-4-5") == ("claude-opus-4-5", "alias")
    assert match("openai/gpt-4o") == ("gpt-4o", "alias")
    assert match("google/gemini-2.5-pro") == ("gemini-2.5-pro", "alias")
    assert match("someone/gpt-4o") is None
    assert match("  GPT-4o ") == ("gpt-4o", "exact")


def test_a_row_may_declare_itself_a_prefix_and_the_longest_prefix_wins(team_a, team_b):
    price(team_a, "llama3.1", kind="openai", prefix=True, inp="0.1")
    price(team_a, "llama3.1:70b", kind="openai", prefix=True, inp="0.9")
    assert match("llama3.1:8b-q4", team=team_a) == ("llama3.1", "prefix")
    assert match("llama3.1:70b-q8", team=team_a) == ("llama3.1:70b", "prefix")
    assert match("llama3.1", team=team_a) == ("llama3.1", "exact")
    assert match("llama3.1:8b", team=team_b) is None  # another team's rows do not apply


def test_a_teams_own_price_wins_over_the_global_one_and_stays_in_its_team(team_a, team_b):
    own = price(team_a, "gpt-4o", inp="1.5", out="6")
    table = price_table_for(team_a.pk)
    assert table.match(provider_kind="openai", model="gpt-4o", team_id=team_a.pk).row.id == own.pk
    assert table.match(provider_kind="openai", model="gpt-4o-2025-01-01", team_id=team_a.pk).row.id == own.pk
    other = price_table_for(team_b.pk).match(provider_kind="openai", model="gpt-4o", team_id=team_b.pk)
    assert other.row.team_id is None and other.price.input == Decimal("2.5")


def test_rows_for_any_kind_never_price_the_offline_demo_model(team_a):
    assert match("gpt-4o", kind="demo") is None
    assert match("demo", kind="demo") == ("demo", "exact")
    assert match("demo-fast", kind="demo") == ("demo", "alias")
    assert match("demo-huge", kind="demo") is None
    price(team_a, "demo-huge", kind="demo", inp="3", out="15")
    assert match("demo-huge", kind="demo", team=team_a) == ("demo-huge", "exact")
    assert match("demo-huge", kind="openai", team=team_a) is None  # pinned to its kind


def test_the_version_in_force_at_the_requests_time_prices_it(team_a):
    january, march = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 3, 1, tzinfo=UTC)
    old = price(team_a, "house-model", kind="openai", inp="4", since=january, version=1)
    new = price(team_a, "house-model", kind="openai", inp="2", since=march, version=2)
    table = price_table_for(team_a.pk)
    at = lambda moment: table.match(provider_kind="openai", model="house-model", team_id=team_a.pk, at=moment)  # noqa: E731
    assert at(datetime(2026, 2, 1, tzinfo=UTC)).row.id == old.pk
    assert at(datetime(2026, 3, 2, tzinfo=UTC)).row.id == new.pk
    assert at(datetime(2025, 12, 31, tzinfo=UTC)) is None  # no price was in force yet


# -- cost maths for each usage shape ------------------------------------------------------------------
def test_openai_cached_tokens_inside_prompt_tokens_are_priced_once():
    usage = Usage.from_openai({"prompt_tokens": 1000, "completion_tokens": 300,
                               "prompt_tokens_details": {"cached_tokens": 800},
                               "completion_tokens_details": {"reasoning_tokens": 120}})
    priced = price_table_for(None).cost(provider_kind="openai", model="gpt-4o", usage=usage)
    # 200 uncached at $2.50, 800 cached at $1.25, 300 output (reasoning included) at $10.
    expected = (Decimal(200) * Decimal("2.5") + Decimal(800) * Decimal("1.25")
                + Decimal(300) * Decimal(10)) / Decimal(1_000_000)
    assert priced.cost == expected == Decimal("0.0045")
    double_counted = expected + Decimal(800) * Decimal("2.5") / Decimal(1_000_000)
    assert priced.cost != double_counted


def test_anthropic_cache_fields_beside_input_tokens_are_each_priced_at_their_rate():
    usage = Usage.from_anthropic({"input_tokens": 200, "output_tokens": 100,
                                  "cache_creation_input_tokens": 300, "cache_read_input_tokens": 500})
    priced = price_table_for(None).cost(provider_kind="anthropic", model="claude-sonnet-4-6-20260301", usage=usage)
    expected = (Decimal(200) * 3 + Decimal(300) * Decimal("3.75") + Decimal(500) * Decimal("0.3")
                + Decimal(100) * 15) / Decimal(1_000_000)
    assert priced.cost == expected and priced.match.kind.value == "prefix"


def test_each_providers_usage_is_normalised_at_its_boundary_before_pricing():
    def openai(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={
            "id": "x", "model": "gpt-4o-2024-08-06",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 10,
                      "prompt_tokens_details": {"cached_tokens": 600}}})

    def anthropic(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={
            "id": "y", "type": "message", "role": "assistant", "model": "claude-haiku-4-5-20251001",
            "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 50, "output_tokens": 10, "cache_creation_input_tokens": 400,
                      "cache_read_input_tokens": 600}})

    request = ChatRequest(model="m", messages=[Message.user("hello")])

    async def ask(provider):
        return await provider.chat(request)

    one = asyncio.run(ask(OpenAIProvider(api_key="k", http_client=httpx.AsyncClient(transport=httpx.MockTransport(openai)))))
    two = asyncio.run(ask(AnthropicProvider(api_key="k", http_client=httpx.AsyncClient(transport=httpx.MockTransport(anthropic)))))
    assert (one.usage.input_tokens, one.usage.cache_read_tokens, one.usage.prompt_tokens) == (400, 600, 1000)
    assert (two.usage.input_tokens, two.usage.cache_write_tokens, two.usage.cache_read_tokens) == (50, 400, 600)
    table = PriceTable([row for row in _seeded_rows()])
    assert table.cost(provider_kind="openai", model=one.model, usage=one.usage).cost == Decimal("0.00185")
    # claude-haiku-4-5: 50 x $1 + 400 x $1.25 + 600 x $0.10 + 10 x $5 per million
    assert table.cost(provider_kind="anthropic", model=two.model, usage=two.usage).cost == Decimal("0.00066")


def _seeded_rows():
    from traces.costs.pricing import PriceRow

    return [PriceRow.from_model(r) for r in ModelPrice.objects.filter(team__isnull=True)]


def test_unpriced_costs_zero_and_says_so():
    priced = price_table_for(None).cost(provider_kind="openai", model="my-finetune",
                                        usage=Usage(input_tokens=10_000, output_tokens=10_000))
    assert priced.cost == 0 and priced.unpriced and priced.price_id is None and priced.match_kind == ""


# -- the shipped table ------------------------------------------------------------------------------
def test_the_shipped_table_is_the_catalogue_snapshot_and_the_free_demo_row():
    rows = ModelPrice.objects.filter(team__isnull=True)
    assert rows.count() == len(snapshot_read().entries) + 1
    assert {r.vendor for r in rows} >= {"openai", "anthropic", "google"}
    for row in rows.exclude(provider_kind="demo"):
        assert "Community catalogue (litellm 1.109.1)" in row.source_note, row
        assert row.catalogue_version == "litellm 1.109.1" and row.catalogue_read_at is not None
    demo = rows.get(provider_kind="demo")
    assert demo.is_free and demo.label == "free (offline demo)" and demo.context_window == 8192


def test_seeding_again_adds_nothing():
    from traces.costs.price_seed import catalogue_seed

    assert catalogue_seed(ModelPrice) == 0


# -- import and export --------------------------------------------------------------------------------
def test_export_then_import_round_trips_a_teams_prices(team_a, team_b, alice):
    price(team_a, "house-model", kind="openai", aliases=("house",), inp="0.5", out="1.25",
          write="0.6", read="0.05", label="our GPU box")
    price(team_a, "other", prefix=True, inp="0.001", out="0.002", since=datetime(2026, 5, 1, tzinfo=UTC))
    document = json.loads(json.dumps(price_export(rows=ModelPrice.objects.filter(team=team_a).order_by("model"))))
    report = price_import(data=json.dumps(document), team_id=team_b.pk, allow_global=False, actor=alice)
    assert len(report.created) == 2
    again = json.loads(json.dumps(price_export(rows=ModelPrice.objects.filter(team=team_b).order_by("model"))))
    strip = lambda doc: [{k: v for k, v in p.items()} for p in doc["prices"]]  # noqa: E731
    assert strip(again) == strip(document)
    assert price_import(data=document, team_id=team_b.pk, allow_global=False).unchanged == 2  # idempotent


def test_import_refuses_bad_rows_as_a_whole_and_skips_global_rows_for_team_admins(team_a):
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError) as info:
        price_import(data=[{"model": "ok", "input": "1", "output": "1", "effective_from": "2026-01-01"},
                           {"model": "", "input": "1"}, {"model": "x", "input": "-1", "output": "1",
                                                         "effective_from": "2026-01-01"}],
                     team_id=team_a.pk, allow_global=False)
    assert "Price 2: “model” is required." in info.value.messages
    assert any(m.startswith("Price 3:") for m in info.value.messages)
    assert not ModelPrice.objects.filter(team=team_a).exists()
    report = price_import(data={"prices": [{"scope": "global", "model": "g", "input": "1", "output": "1",
                                            "effective_from": "2026-01-01"}]}, team_id=team_a.pk, allow_global=False)
    assert report.skipped_global == 1 and not report.created
    assert not ModelPrice.objects.filter(model="g").exists()


def test_a_change_of_the_same_price_imports_as_a_new_version(team_a):
    item = {"model": "house", "input": "1", "output": "2", "effective_from": "2026-01-01"}
    price_import(data=[item], team_id=team_a.pk, allow_global=False)
    price_import(data=[{**item, "input": "0.8", "effective_from": "2026-06-01"}], team_id=team_a.pk, allow_global=False)
    assert list(ModelPrice.objects.filter(team=team_a, model="house").order_by("version")
                .values_list("version", "input_per_mtok")) == [(1, Decimal("1")), (2, Decimal("0.8"))]


# -- the admin ------------------------------------------------------------------------------------------
def form_data(row, **changes):
    data = {"team": row.team_id or "", "provider_kind": row.provider_kind, "vendor": row.vendor,
            "model": row.model, "aliases_text": "\n".join(row.aliases), "input_per_mtok": row.input_per_mtok,
            "output_per_mtok": row.output_per_mtok, "cache_write_per_mtok": row.cache_write_per_mtok or "",
            "cache_read_per_mtok": row.cache_read_per_mtok or "",
            "effective_from_0": timezone.localtime(row.effective_from).strftime("%Y-%m-%d"),
            "effective_from_1": timezone.localtime(row.effective_from).strftime("%H:%M:%S"),
            "label": row.label, "source_url": row.source_url, "source_note": row.source_note}
    if row.prefix:
        data["prefix"] = "on"
    data.update(changes)
    return data


def test_changing_a_price_in_the_admin_saves_a_new_version_and_audits_it(client_for, alice, team_a):
    from agentsite.models import AuditEvent

    row = price(team_a, "house-model", kind="openai", inp="1", out="2")
    url = reverse("admin:traces_modelprice_change", args=[row.pk])
    response = client_for(alice).post(url, form_data(row, input_per_mtok="0.75"))
    assert response.status_code == 302, response.content.decode()[:3000]
    rows = list(ModelPrice.objects.filter(team=team_a, model="house-model").order_by("version"))
    assert [(r.version, r.input_per_mtok) for r in rows] == [(1, Decimal(1)), (2, Decimal("0.75"))]
    assert rows[1].effective_from > rows[0].effective_from and rows[1].created_by == alice
    event = AuditEvent.objects.get(team=team_a, object_type="traces.ModelPrice")
    assert event.before["input_per_mtok"] == "1.000000" and Decimal(event.after["input_per_mtok"]) == Decimal("0.75")
    # a label is not a price: edited in place
    client_for(alice).post(reverse("admin:traces_modelprice_change", args=[rows[1].pk]),
                           form_data(rows[1], label="negotiated"))
    assert ModelPrice.objects.filter(team=team_a, model="house-model").count() == 2


def test_team_admins_read_the_global_table_but_cannot_change_it(client_for, alice, team_a):
    row = ModelPrice.objects.get(team__isnull=True, model="gpt-4o")
    c = client_for(alice)
    assert c.get(reverse("admin:traces_modelprice_changelist")).status_code == 200
    assert c.get(reverse("admin:traces_modelprice_change", args=[row.pk])).status_code == 200
    response = c.post(reverse("admin:traces_modelprice_change", args=[row.pk]), form_data(row, input_per_mtok="0.01"))
    assert response.status_code == 403
    response = c.post(reverse("admin:traces_modelprice_add"), form_data(row, team="", model="mine"))
    assert response.status_code == 200 and b"only site admins change the global table" in response.content
    # the form starts on their team, with no "global" choice to trip on
    form = c.get(reverse("admin:traces_modelprice_add")).content.decode()
    team_select = form.split('name="team"')[1].split("</select>")[0]
    assert f'<option value="{team_a.pk}" selected>' in team_select and '<option value=""' not in team_select


def test_another_teams_prices_are_not_found_and_members_have_no_admin(client_for, alice, bob, charlie, team_a):
    row = price(team_a, "secret-model", inp="9")
    assert client_for(charlie).get(reverse("admin:traces_modelprice_change", args=[row.pk])).status_code in (302, 404)
    listing = client_for(charlie).get(reverse("admin:traces_modelprice_changelist"))
    assert b"secret-model" not in listing.content
    export = client_for(charlie).get(reverse("admin:traces_modelprice_export"))
    assert b"secret-model" not in export.content and b"gpt-4o" in export.content
    assert client_for(bob).get(reverse("admin:traces_modelprice_changelist")).status_code == 302  # to the admin login


def test_the_admin_exports_and_imports_json(client_for, alice, team_a):
    from django.core.files.uploadedfile import SimpleUploadedFile

    price(team_a, "house-model", inp="0.5")
    c = client_for(alice)
    exported = c.get(reverse("admin:traces_modelprice_export") + "?scope=team")
    document = json.loads(exported.content)
    assert [p["model"] for p in document["prices"]] == ["house-model"]
    document["prices"][0].update(model="house-model-2")
    upload = SimpleUploadedFile("prices.json", json.dumps(document).encode(), content_type="application/json")
    response = c.post(reverse("admin:traces_modelprice_import"), {"file": upload, "team": team_a.pk})
    assert response.status_code == 302
    assert ModelPrice.objects.filter(team=team_a, model="house-model-2", version=1).exists()


def test_a_price_in_use_cannot_be_deleted(team_a, conversation, alice):
    from django.db.models import RestrictedError

    from traces.models import Step, Trace

    row = price(team_a, "house-model")
    trace = Trace.objects.create(team=team_a, conversation=conversation, user=alice)
    Step.objects.create(trace=trace, seq=1, kind="llm_request", status="ok", started_at=timezone.now(),
                        model="house-model", cost_usd=Decimal(0), price=row, price_match="exact")
    with pytest.raises(RestrictedError):
        row.delete()
    trace.delete()  # the team's history goes with it; then the row may go
    row.delete()


def test_the_price_table_is_read_once_per_process_and_again_whenever_it_changes(
        django_assert_num_queries, team_a, team_b):
    def match(name: str):
        return price_table_for(team_a.pk).match(provider_kind="openai", model=name, team_id=team_a.pk)

    price_table_for(team_a.pk)
    with django_assert_num_queries(1):  # only the check that nothing changed
        table = price_table_for(team_a.pk)
    assert price_table_for(team_a.pk) is table
    assert match("house-model") is None

    row = price(team_a, "house-model", inp="3")
    assert match("house-model").row.id == row.pk  # a new row of the team's
    row.label = "negotiated"
    row.save()  # an edit in place (a label, a model's limits) is seen too
    assert match("house-model").row.label == "negotiated"
    other = price(team_b, "their-model")
    assert price_table_for(team_a.pk) is price_table_for(team_a.pk)  # another team's rows: same table
    assert match("their-model") is None
    other.delete()
    row.delete()
    assert match("house-model") is None


def test_the_price_table_is_two_queries_when_read(django_assert_num_queries, team_a):
    price(team_a, "read-afresh")  # the process has not seen this table yet
    with django_assert_num_queries(2):  # the check, then the rows
        table = price_table_for(team_a.pk)
    with django_assert_num_queries(0):
        for _ in range(1000):
            table.match(provider_kind="openai", model="gpt-4o-2024-08-06", team_id=team_a.pk,
                        at=timezone.now() - timedelta(days=1))


def test_a_known_model_is_priced_the_demo_model_is_free_and_an_unknown_one_unpriced():
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000)
    assert step_cost(provider_kind="openai", model="gpt-4o-mini", usage=usage) == (Decimal("0.75"), False)
    assert step_cost(provider_kind="demo", model="demo", usage=usage) == (Decimal(0), False)
    assert step_cost(provider_kind="demo", model="demo-huge", usage=usage) == (Decimal(0), True)
