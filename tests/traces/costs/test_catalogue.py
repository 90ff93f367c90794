"""The community model catalogue: reading LiteLLM's file into our units, the plan of an import
(add, change as a new version, unchanged, skip), applying it to global rows only with
provenance, the shipped snapshot and the upgrade path, the command and the admin page.

``fixtures/model_prices_and_context_window.sample.json`` holds real entries of the catalogue
(litellm 1.109.1), as the file writes them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from traces.costs.catalogue import (
    SNAPSHOT_PATH,
    Action,
    CatalogueError,
    catalogue_apply,
    catalogue_plan,
    catalogue_read,
    snapshot_apply,
)
from traces.costs.catalogue.plan import FIRST_PRICE_FROM
from traces.costs.catalogue.read import per_million
from traces.costs.pricing import model_limits, price_table_for
from traces.models import ModelPrice

pytestmark = pytest.mark.django_db

SAMPLE = Path(__file__).parent / "fixtures" / "model_prices_and_context_window.sample.json"
EARLY = datetime(2024, 1, 1, tzinfo=UTC)


def litellm(**models) -> dict:
    """A catalogue in LiteLLM's shape: ``name=(provider, mode, input, output, extra)``."""
    doc = {}
    for key, (provider, mode, inp, out, extra) in models.items():
        doc[key.replace("__", "/")] = {"litellm_provider": provider, "mode": mode,
                                       "input_cost_per_token": inp, "output_cost_per_token": out, **extra}
    return doc


def global_rows(model: str) -> list[ModelPrice]:
    return list(ModelPrice.objects.filter(team__isnull=True, model=model).order_by("version"))


def current_rates(row: ModelPrice) -> tuple:
    return (row.input_per_mtok, row.output_per_mtok, row.cache_write_per_mtok, row.cache_read_per_mtok)


# -- reading --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("per_token", "per_mtok"), [
    (1.25e-07, "0.125"), (5e-09, "0.005"), (1.5625e-05, "15.625"), (3e-06, "3"), (0.000168, "168"),
    (2.5e-08, "0.025"), (0, "0"), ("1.1e-06", "1.1")])
def test_per_token_prices_become_exact_per_million_decimals(per_token, per_mtok):
    value = per_million(per_token, "input")
    assert value == Decimal(per_mtok) and format(value, "f") == per_mtok


@pytest.mark.parametrize("bad", [-1e-06, True, None, "cheap", float("nan"), 1.234567891e-07])
def test_a_price_that_is_not_a_price_is_refused(bad):
    with pytest.raises(ValueError, match="price"):
        per_million(bad, "input")


def test_only_chat_rows_of_our_providers_are_kept_by_their_own_names():
    catalogue = catalogue_read(SAMPLE.read_bytes(), source="sample.json")
    names = {e.model: e for e in catalogue.entries}
    assert sorted(names) == ["claude-opus-4-5", "claude-sonnet-4-6", "gemini-2.5-pro", "gemini-flash-latest",
                             "gpt-4o", "gpt-4o-2024-05-13", "gpt-4o-mini", "gpt-5-nano", "gpt-5.2-pro"]
    pro = names["gemini-2.5-pro"]  # "gemini/" stripped, the vendor is Google
    assert (pro.key, pro.vendor, pro.input, pro.output, pro.cache_write, pro.cache_read) == (
        "gemini/gemini-2.5-pro", "google", Decimal("1.25"), Decimal(10), None, Decimal("0.125"))
    assert (pro.context_window, pro.max_output_tokens) == (1_048_576, 65_536)
    assert "Prompts over 200k tokens cost more" in pro.note
    sonnet = names["claude-sonnet-4-6"]
    assert sonnet.rates == (Decimal(3), Decimal(15), Decimal("3.75"), Decimal("0.3"))
    assert sonnet.source.startswith("https://")
    assert names["gpt-5.2-pro"].key == "gpt-5.2-pro"  # mode "responses" is a chat model too
    # the same model listed twice at the same price: one row, under the provider's own key
    assert names["gemini-flash-latest"].key == "gemini/gemini-flash-latest"
    reasons = {s.key: s.reason for s in catalogue.skipped}
    assert reasons["sample_spec"] == "the format's own description"
    assert "not a chat model" in reasons["text-embedding-3-small"] and "not a chat model" in reasons["gpt-realtime"]
    assert "fine-tuning base" in reasons["ft:gpt-4o-mini-2024-07-18"]
    assert reasons["openai/container"] == "no input and output price"
    # Vertex's gemini-2.5-flash is another provider's row: left out, not read as Google's API
    assert "gemini-2.5-flash" not in names and catalogue.other_providers == 1


def test_rows_the_table_cannot_hold_are_skipped_with_the_reason():
    catalogue = catalogue_read(litellm(
        a=("openai", "chat", 1e-06, 2e-06, {"output_cost_per_reasoning_token": 4e-06}),
        b=("openai", "chat", 1e-06, None, {}),
        c=("anthropic", "chat", "junk", 1e-06, {}),
        gemini__twice=("gemini", "chat", 1e-06, 2e-06, {}), twice=("gemini", "chat", 3e-06, 2e-06, {}),
        **{"bad<b>name": ("openai", "chat", 1e-06, 2e-06, {})}))
    reasons = {s.key: s.reason for s in catalogue.skipped}
    assert catalogue.entries == []
    assert reasons["a"] == "reasoning tokens cost other than output tokens, which the table cannot price"
    assert reasons["b"] == "no input and output price" and reasons["c"] == "the input price is not a number"
    assert "different prices" in reasons["gemini/twice"] and "different prices" in reasons["twice"]
    assert reasons["bad<b>name"] == "not a plain model name"


def test_a_document_that_is_not_a_catalogue_is_refused():
    for raw, message in [(b"{not json", "not JSON"), (b"[1, 2]", "JSON object"),
                         (json.dumps({"x": {"litellm_provider": "bedrock"}}).encode(), "No models of OpenAI")]:
        with pytest.raises(CatalogueError, match=message):
            catalogue_read(raw)


def test_only_https_links_are_kept_as_a_models_source():
    raw = {"format": "agentsite.catalogue/1", "models": [
        {"model": "m1", "input": "1", "output": "2", "source": "javascript:alert(1)"},
        {"model": "m2", "input": "1", "output": "2", "source": "https://example.com/pricing"}]}
    assert [e.source for e in catalogue_read(json.dumps(raw)).entries] == ["", "https://example.com/pricing"]
    doc = litellm(m3=("openai", "chat", 1e-06, 2e-06, {"source": "data:text/html,<script>x</script>"}))
    assert catalogue_read(doc).entries[0].source == ""


def test_the_compact_form_reads_back_the_same_entries():
    catalogue = catalogue_read(SAMPLE.read_bytes(), source="sample.json", version="v1", read_at=EARLY)
    again = catalogue_read(catalogue.to_json())
    assert again.entries == catalogue.entries
    assert (again.source, again.version, again.read_at) == ("sample.json", "v1", EARLY)


# -- the plan and applying it ----------------------------------------------------------------------------
def test_the_plan_adds_changes_leaves_and_skips():
    ModelPrice.objects.create(model="gpt-house", input_per_mtok=1, output_per_mtok=2,
                              effective_from=timezone.now() + timedelta(days=30), version=1)
    catalogue = catalogue_read(litellm(
        **{"gpt-brand-new": ("openai", "chat", 1e-06, 2e-06, {"max_input_tokens": 64000}),
           "gpt-4o": ("openai", "chat", 2e-06, 8e-06, {"cache_read_input_token_cost": 1e-06}),
           "gpt-4o-mini": ("openai", "chat", 1.5e-07, 6e-07, {"cache_read_input_token_cost": 7.5e-08,
                                                             "max_input_tokens": 128000, "max_output_tokens": 16384}),
           "gpt-5": ("openai", "chat", 1.25e-06, 1e-05, {"cache_read_input_token_cost": 1.25e-07,
                                                        "max_input_tokens": 400000, "max_output_tokens": 128000}),
           "gpt-house": ("openai", "chat", 3e-06, 4e-06, {}),
           "whisper-2": ("openai", "audio_transcription", 1e-06, 0, {})}))
    plan = catalogue_plan(catalogue)
    actions = {i.key: i.action for i in plan.items}
    assert actions == {"gpt-brand-new": Action.ADD, "gpt-4o": Action.CHANGE, "gpt-4o-mini": Action.UNCHANGED,
                       "gpt-5": Action.UNCHANGED, "gpt-house": Action.SKIP, "whisper-2": Action.SKIP}
    change = plan.changes[0]
    assert change.current_rates_text == "$2.5 / $10 / as input / $1.25"
    assert change.rates_text == "$2 / $8 / as input / $1"
    assert [i.key for i in plan.unchanged if i.limits_changed] == ["gpt-5"]  # 272k -> 400k
    assert "a later price is already in the table" in plan.skipped[0].reason
    assert plan.summary().startswith("1 to add, 1 price changes (new versions), 2 unchanged (1 with new limits), 2 skipped")


def test_applying_adds_new_versions_with_provenance_and_a_second_import_adds_nothing(team_a):
    before = global_rows("gpt-4o")
    assert len(before) == 1
    read_at = datetime(2026, 11, 1, 9, 30, tzinfo=UTC)
    catalogue = catalogue_read(litellm(
        **{"gpt-4o": ("openai", "chat", 2e-06, 8e-06, {"max_input_tokens": 128000, "max_output_tokens": 16384,
                                                      "source": "https://example.com/pricing",
                                                      "deprecation_date": "2027-01-14"}),
           "gpt-brand-new": ("openai", "chat", 1e-06, 2e-06, {})}),
        source="https://example.com/model_prices_and_context_window.json", version="abc123", read_at=read_at)
    plan = catalogue_plan(catalogue)
    report = catalogue_apply(plan)
    assert sorted(r.model for r in report.created) == ["gpt-4o", "gpt-brand-new"]

    old, new = global_rows("gpt-4o")
    assert current_rates(old) == current_rates(before[0]) and old.pk == before[0].pk  # history kept
    assert (new.version, new.effective_from) == (2, plan.effective_from)
    assert current_rates(new) == (Decimal(2), Decimal(8), None, None)
    assert new.source_url == "https://example.com/pricing"
    assert new.source_note == ("Community catalogue (abc123), entry “gpt-4o”, read 2026-11-01. "
                               "Deprecated from 2027-01-14.")
    assert (new.catalogue_source, new.catalogue_version, new.catalogue_read_at) == (
        "https://example.com/model_prices_and_context_window.json", "abc123", read_at)
    brand_new = global_rows("gpt-brand-new")[0]
    assert brand_new.effective_from == FIRST_PRICE_FROM  # no earlier price: it holds from the start
    assert brand_new.source_url == "https://example.com/model_prices_and_context_window.json"  # its catalogue's
    assert price_table_for(None).match(provider_kind="openai", model="gpt-4o").row.id == new.pk

    again = catalogue_plan(catalogue)
    assert not again.writes and len(again.unchanged) == 2
    assert catalogue_apply(again).created == []
    assert ModelPrice.objects.filter(model__in=["gpt-4o", "gpt-brand-new"]).count() == 3


def test_a_teams_own_rows_are_never_touched(team_a):
    own = ModelPrice.objects.create(team=team_a, model="gpt-4o", input_per_mtok=Decimal("1.5"),
                                    output_per_mtok=6, effective_from=EARLY, version=1)
    team_rows = list(ModelPrice.objects.filter(team=team_a).values())
    catalogue_apply(catalogue_plan(catalogue_read(litellm(
        **{"gpt-4o": ("openai", "chat", 9e-06, 9e-06, {}), "gpt-team-less": ("openai", "chat", 1e-06, 1e-06, {})}))))
    assert list(ModelPrice.objects.filter(team=team_a).values()) == team_rows
    table = price_table_for(team_a.pk)
    assert table.match(provider_kind="openai", model="gpt-4o", team_id=team_a.pk).row.id == own.pk
    assert table.match(provider_kind="openai", model="gpt-4o", team_id=None).price.input == Decimal(9)


def test_a_sibling_model_is_neither_priced_nor_sized_by_an_import():
    ModelPrice.objects.filter(team__isnull=True).delete()
    catalogue_apply(catalogue_plan(catalogue_read(litellm(
        **{"gpt-4o": ("openai", "chat", 2.5e-06, 1e-05, {"max_input_tokens": 128000})}))))
    table = price_table_for(None)
    assert table.match(provider_kind="openai", model="gpt-4o-mini") is None
    assert table.match(provider_kind="openai", model="gpt-4o-2024-08-06").kind.value == "prefix"
    assert model_limits("gpt-4o-mini", "openai") is None
    assert model_limits("gpt-4o-2024-08-06", "openai").context_window == 128_000


def test_an_upgraded_table_gets_the_snapshot_as_new_versions_only_where_prices_differ():
    ModelPrice.objects.filter(team__isnull=True).delete()

    def old_row(model, inp, out, read, **extra):
        return ModelPrice.objects.create(model=model, vendor="openai", input_per_mtok=Decimal(inp),
                                         output_per_mtok=Decimal(out), cache_read_per_mtok=Decimal(read),
                                         effective_from=EARLY, version=1, source_note="hand list", **extra)

    stale = old_row("gpt-4o", "5", "15", "2.5", aliases=["gpt-4o-house"], label="flagship")
    same = old_row("gpt-4o-mini", "0.15", "0.60", "0.075")
    retired = old_row("gpt-3-retired", "1", "2", "0.5")
    report = snapshot_apply()
    snapshot = json.loads(SNAPSHOT_PATH.read_text())["models"]
    assert len(report.created) == len(snapshot) - 1  # all but gpt-4o-mini: new, or a new version of gpt-4o
    v1, v2 = global_rows("gpt-4o")
    assert v1.pk == stale.pk and current_rates(v1) == current_rates(stale)
    assert (v2.version, v2.input_per_mtok, v2.aliases, v2.label) == (2, Decimal("2.5"), ["gpt-4o-house"], "flagship")
    [mini] = global_rows("gpt-4o-mini")
    assert mini.pk == same.pk and mini.source_note == "hand list" and mini.context_window == 128_000
    assert global_rows("gpt-3-retired") == [retired]  # not in the catalogue: left alone
    assert snapshot_apply().created == []


# -- the shipped snapshot ------------------------------------------------------------------------------
def test_the_price_table_agrees_with_the_community_table_for_every_model_both_have():
    """The fresh test database was seeded from the snapshot; every global row the catalogue knows
    prices and sizes the model exactly as the catalogue does (and the snapshot as LiteLLM's own
    file writes it, for the real entries in the sample)."""
    snapshot = json.loads(SNAPSHOT_PATH.read_text())
    table = price_table_for(None)
    compared = 0
    for item in snapshot["models"]:
        found = table.match(provider_kind="", model=item["model"])
        assert found is not None and found.kind.value == "exact", item["model"]
        row = ModelPrice.objects.get(pk=found.row.id)
        expected = tuple(None if item[k] is None else Decimal(item[k])
                         for k in ("input", "output", "cache_write", "cache_read"))
        assert current_rates(row) == expected, item["model"]
        assert (row.context_window, row.max_output_tokens) == (item["context_window"], item["max_output_tokens"])
        compared += 1
    assert compared == len(snapshot["models"]) > 150
    raw = json.loads(SAMPLE.read_text())
    for key in ("gpt-4o", "gpt-5-nano", "claude-sonnet-4-6", "gemini/gemini-2.5-pro"):
        row = ModelPrice.objects.get(team__isnull=True, model=key.removeprefix("gemini/"))
        assert row.input_per_mtok == Decimal(str(raw[key]["input_cost_per_token"])) * 1_000_000
        assert row.output_per_mtok == Decimal(str(raw[key]["output_cost_per_token"])) * 1_000_000
        assert row.context_window == raw[key]["max_input_tokens"]


def test_the_snapshot_covers_current_models_of_the_three_vendors():
    snapshot = json.loads(SNAPSHOT_PATH.read_text())
    names = {m["model"] for m in snapshot["models"]}
    assert {"gpt-5.1", "gpt-5.2", "claude-opus-4-6", "claude-sonnet-4-6", "gemini-3.1-pro-preview"} <= names
    assert {m["vendor"] for m in snapshot["models"]} == {"openai", "anthropic", "google"}
    assert snapshot["version"] == "litellm 1.109.1" and snapshot["read_at"].startswith("2026-")


# -- the command -----------------------------------------------------------------------------------------
def test_the_command_is_a_dry_run_unless_told_to_apply(capsys):
    before = ModelPrice.objects.count()
    ModelPrice.objects.filter(team__isnull=True, model="gpt-4o").update(input_per_mtok=Decimal("3"))
    call_command("catalogue_import", str(SAMPLE))
    out = capsys.readouterr().out
    assert "change     gpt-4o: $3 / $10 / as input / $1.25 (v1) -> $2.5 / $10 / as input / $1.25" in out
    assert "Dry run: nothing written" in out and "skip       the format's own description: sample_spec" in out
    assert ModelPrice.objects.count() == before

    call_command("catalogue_import", str(SAMPLE), "--apply", "--effective-from", "2026-12-01",
                 "--catalogue-version", "litellm 1.109.1")
    assert "1 price row added from the catalogue" in capsys.readouterr().out
    new = global_rows("gpt-4o")[-1]
    assert new.effective_from == timezone.make_aware(datetime(2026, 12, 1)) and new.input_per_mtok == Decimal("2.5")
    assert new.catalogue_source == SAMPLE.name and new.catalogue_version == "litellm 1.109.1"


def test_the_command_says_plainly_what_it_could_not_read(tmp_path):
    with pytest.raises(CommandError, match="Could not read"):
        call_command("catalogue_import", str(tmp_path / "missing.json"))
    with pytest.raises(CommandError, match="not a date"):
        call_command("catalogue_import", str(SAMPLE), "--effective-from", "soon")
    # a URL goes through the outbound policy: nothing inside the network
    with pytest.raises(CommandError, match="Refused: 127.0.0.1 is a loopback address"):
        call_command("catalogue_import", "https://127.0.0.1/model_prices_and_context_window.json")


def test_the_command_writes_a_compact_snapshot(tmp_path):
    target = tmp_path / "snapshot.json"
    call_command("catalogue_import", str(SAMPLE), "--write-snapshot", str(target), "--source-name", "sample")
    written = catalogue_read(target.read_bytes())
    assert len(written.entries) == 9 and written.source == "sample"


# -- the admin page ----------------------------------------------------------------------------------------
@pytest.fixture
def root(db):
    return get_user_model().objects.create_superuser("root", "root@example.com", "root-pass-123")


def upload(doc: dict | bytes, name: str = "model_prices_and_context_window.json") -> SimpleUploadedFile:
    body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    return SimpleUploadedFile(name, body, content_type="application/json")


URL = reverse("admin:traces_modelprice_catalogue")


def test_only_site_admins_import_the_catalogue(client_for, alice, bob, charlie, root):
    changelist = reverse("admin:traces_modelprice_changelist")
    assert client_for(alice).get(URL).status_code == 403  # a team owner: the global table is not theirs
    assert "community catalogue" not in client_for(alice).get(changelist).content.decode()
    assert client_for(charlie).post(URL, {"step": "preview", "file": upload(json.loads(SAMPLE.read_text()))}
                                    ).status_code == 403
    assert client_for(bob).get(URL).status_code == 302  # no admin at all: to the login
    assert client_for(root).get(URL).status_code == 200
    assert "Import from the community catalogue" in client_for(root).get(changelist).content.decode()
    assert not ModelPrice.objects.filter(catalogue_source="model_prices_and_context_window.json").exists()


def test_the_admin_shows_the_plan_escaped_then_applies_it(client_for, root):
    ModelPrice.objects.filter(team__isnull=True, model="gpt-4o").update(input_per_mtok=Decimal("3"))
    doc = {**json.loads(SAMPLE.read_text()), **litellm(
        **{"gpt-<script>alert(1)</script>": ("openai", "chat", 1e-06, 2e-06, {}),
           "gpt-brand-new": ("openai", "chat", 1e-06, 2e-06, {"max_input_tokens": 64000})})}
    c = client_for(root)
    before = ModelPrice.objects.count()
    preview = c.post(URL, {"step": "preview", "file": upload(doc), "version": "<b>v9</b>"})
    body = preview.content.decode()
    assert preview.status_code == 200 and ModelPrice.objects.count() == before  # nothing written yet
    assert "1 to add, 1 price changes (new versions)" in body
    assert "gpt-brand-new" in body and "$3 / $10 / as input / $1.25 (v1)" in body
    assert "gpt-&lt;script&gt;alert(1)&lt;/script&gt;" in body and "<script>alert(1)" not in body
    assert "&lt;b&gt;v9&lt;/b&gt;" in body and "<b>v9</b>" not in body
    digest = c.session["traces_catalogue_preview"]["digest"]

    applied = c.post(URL, {"step": "apply", "digest": digest})
    assert applied.status_code == 302 and applied["Location"] == reverse("admin:traces_modelprice_changelist")
    assert ModelPrice.objects.count() == before + 2
    new = global_rows("gpt-4o")[-1]
    assert (new.version, new.input_per_mtok, new.created_by, new.catalogue_source) == (
        2, Decimal("2.5"), root, "model_prices_and_context_window.json")
    assert LogEntry.objects.filter(object_id=str(new.pk), change_message__contains="community catalogue").exists()
    assert "traces_catalogue_preview" not in c.session
    assert c.post(URL, {"step": "apply", "digest": digest}).status_code == 200  # the preview is spent
    assert ModelPrice.objects.count() == before + 2


def test_a_plan_is_applied_only_as_it_was_shown(client_for, root):
    c = client_for(root)
    c.post(URL, {"step": "preview", "file": upload(litellm(gpt_later=("openai", "chat", 1e-06, 2e-06, {})))})
    digest = c.session["traces_catalogue_preview"]["digest"]
    ModelPrice.objects.create(model="gpt_later", input_per_mtok=5, output_per_mtok=5, effective_from=EARLY)
    again = c.post(URL, {"step": "apply", "digest": digest})
    assert again.status_code == 200 and "The price table changed since the preview" in again.content.decode()
    assert global_rows("gpt_later")[0].input_per_mtok == 5 and len(global_rows("gpt_later")) == 1


def test_the_admin_form_needs_one_source_and_says_what_is_wrong(client_for, root):
    c = client_for(root)
    assert "Choose a file or give a URL" in c.post(URL, {"step": "preview"}).content.decode()
    assert "not JSON" in c.post(URL, {"step": "preview", "file": upload(b"{nope")}).content.decode()
    refused = c.post(URL, {"step": "preview", "url": "https://10.0.0.7/prices.json"}).content.decode()
    assert "Refused: 10.0.0.7 is a private address." in refused
