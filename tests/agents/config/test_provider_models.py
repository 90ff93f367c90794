"""Context window, longest answer and capabilities per provider and per model in the admin:
a save keeps what the form does not show, per-model rows are edited inline (team-scoped and
audited), and the migration moves the old ``capabilities["context_window"]`` into them."""

from __future__ import annotations

import pytest
from django.urls import reverse

from agents.models import Provider, ProviderModel
from agents.models.legacy_windows import (
    legacy_windows_move,
    legacy_windows_restore,
    legacy_windows_split,
)
from agentsite.models import AuditEvent
from tests.agents.config.test_providers import provider_data


def inline(rows: list[dict], initial: int = 0) -> dict:
    """The inline formset's POST data for ``rows`` (the first ``initial`` of them stored)."""
    data = {"model_settings-TOTAL_FORMS": str(len(rows)),
            "model_settings-INITIAL_FORMS": str(initial)}
    for index, row in enumerate(rows):
        values = {"model": "", "context_window": "", "max_output_tokens": "",
                  "native_tool_calling": "unknown", "vision": "unknown",
                  "prompt_caching": "unknown", "streaming": "unknown", **row}
        for name, value in values.items():
            data[f"model_settings-{index}-{name}"] = value
    return data


@pytest.fixture
def local(team_a):
    return Provider.objects.create(
        team=team_a, name="Alpha gateway", kind="openai",
        capabilities={"vision": True, "reasoning_effort": "high", "context_window": 8192})


def change_url(provider) -> str:
    return reverse("admin:agents_provider_change", args=[provider.pk])


# -- the provider form --------------------------------------------------------------------------------
def test_a_save_keeps_the_context_window_and_keys_the_form_does_not_show(client_for, alice, local):
    c = client_for(alice)
    response = c.post(change_url(local), provider_data(
        capability_streaming="off", context_window="65536", max_output_tokens="4096"))
    assert response.status_code == 302
    local.refresh_from_db()
    # the four capabilities as chosen (vision back to default), everything else kept
    assert local.capabilities == {"streaming": False, "reasoning_effort": "high", "context_window": 8192}
    assert (local.context_window, local.max_output_tokens) == (65536, 4096)

    # saving again without touching the limits keeps them
    c.post(change_url(local), provider_data(capability_streaming="off", context_window="65536",
                                            max_output_tokens="4096"))
    local.refresh_from_db()
    assert (local.context_window, local.max_output_tokens) == (65536, 4096)
    page = c.get(change_url(local)).content.decode()
    assert 'name="context_window" value="65536"' in page and "Settings per model" in page


@pytest.mark.parametrize(("changes", "field", "message"), [
    ({"context_window": "0"}, "context_window", "greater than or equal to 1"),
    ({"context_window": "1000", "max_output_tokens": "2000"}, "max_output_tokens", "cannot be longer"),
])
def test_limits_are_checked_with_plain_messages(client_for, alice, local, changes, field, message):
    response = client_for(alice).post(change_url(local), provider_data(**changes))
    assert response.status_code == 200
    assert message in str(response.context["adminform"].form.errors[field])
    local.refresh_from_db()
    assert local.context_window is None


# -- per-model rows --------------------------------------------------------------------------------------
def test_model_rows_are_added_changed_and_deleted_inline_and_audited(client_for, alice, local):
    c = client_for(alice)
    response = c.post(change_url(local), {**provider_data(), **inline([
        {"model": " qwen3-8b ", "context_window": "32768", "native_tool_calling": "false",
         "streaming": "false"},
        {"model": "gpt-4o", "max_output_tokens": "2048", "vision": "true"},
    ])})
    assert response.status_code == 302
    rows = {r.model: r for r in ProviderModel.objects.filter(provider=local)}
    assert set(rows) == {"qwen3-8b", "gpt-4o"}
    qwen, gpt = rows["qwen3-8b"], rows["gpt-4o"]
    assert (qwen.context_window, qwen.native_tool_calling, qwen.streaming, qwen.vision) == (32768, False, False, None)
    assert (gpt.max_output_tokens, gpt.vision, gpt.context_window) == (2048, True, None)

    page = c.get(change_url(local)).content.decode()
    assert 'value="qwen3-8b"' in page and '<option value="false" selected>Off</option>' in page

    # change one, delete the other
    response = c.post(change_url(local), {**provider_data(), **inline([
        {"id": str(qwen.pk), "provider": str(local.pk), "model": "qwen3-8b",
         "context_window": "40960", "streaming": "true"},
        {"id": str(gpt.pk), "provider": str(local.pk), "model": "gpt-4o", "DELETE": "on"},
    ], initial=2)})
    assert response.status_code == 302
    assert list(ProviderModel.objects.filter(provider=local).values_list(
        "model", "context_window", "streaming", "native_tool_calling")) == [("qwen3-8b", 40960, True, None)]

    events = AuditEvent.objects.filter(object_type="agents.ProviderModel").order_by("id")
    assert [(e.action, e.object_repr) for e in events] == [
        ("create", "qwen3-8b on Alpha gateway"), ("create", "gpt-4o on Alpha gateway"),
        ("update", "qwen3-8b on Alpha gateway"), ("delete", "gpt-4o on Alpha gateway")]
    update = events[2]
    assert update.changes["context_window"] == (32768, 40960) and update.team_id == local.team_id
    assert events[3].before["max_output_tokens"] == 2048 and events[3].object_id == str(gpt.pk)


@pytest.mark.parametrize(("rows", "message"), [
    ([{"model": "gpt-4o"}, {"model": "GPT-4o"}], "listed twice"),
    ([{"model": "small", "context_window": "1000", "max_output_tokens": "5000"}], "cannot be longer"),
    ([{"model": "   ", "context_window": "1000"}], "Enter the model"),
])
def test_bad_model_rows_are_refused_and_nothing_is_saved(client_for, alice, local, rows, message):
    response = client_for(alice).post(change_url(local), {**provider_data(name="Renamed"), **inline(rows)})
    assert response.status_code == 200 and message in response.content.decode()
    local.refresh_from_db()
    assert local.name == "Alpha gateway" and not ProviderModel.objects.exists()


def test_only_the_teams_admins_edit_model_rows(client_for, alice, bob, charlie, local):
    ProviderModel.objects.create(provider=local, model="gpt-4o", context_window=1000)
    assert client_for(charlie).get(change_url(local)).status_code == 404  # not in their admin: not found
    charlie_post = client_for(charlie).post(change_url(local), {**provider_data(), **inline(
        [{"model": "gpt-4o", "context_window": "5"}])})
    assert charlie_post.status_code in (302, 403, 404)
    bob_post = client_for(bob).post(change_url(local), {**provider_data(), **inline(
        [{"model": "gpt-4o", "context_window": "5"}])})
    assert bob_post.status_code in (302, 403)
    assert list(ProviderModel.objects.values_list("context_window", flat=True)) == [1000]


# -- the migration's move ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("caps", "provider", "per_model", "kept"), [
    ({}, None, {}, {}),
    ({"context_window": 131072, "vision": True}, 131072, {}, {"vision": True}),
    ({"context_window": "4096"}, 4096, {}, {}),
    ({"context_window": {"llama3.1:8b": 131072, "*": 8192}}, 8192, {"llama3.1:8b": 131072}, {}),
    ({"context_window": "junk", "x": 1}, None, {}, {"context_window": "junk", "x": 1}),
    ({"context_window": {"a": 100, "b": -1, "c": True}}, None, {"a": 100},
     {"context_window": {"b": -1, "c": True}}),
])
def test_legacy_windows_split_moves_what_is_a_window_and_keeps_the_rest(caps, provider, per_model, kept):
    split = legacy_windows_split(caps)
    assert (split.provider, split.per_model, split.capabilities) == (provider, per_model, kept)


def test_legacy_windows_move_fills_fields_and_rows_and_keeps_what_was_set(team_a):
    plain = Provider.objects.create(team=team_a, name="Plain", kind="openai",
                                    capabilities={"context_window": 65536, "streaming": False})
    per_model = Provider.objects.create(
        team=team_a, name="Per model", kind="openai",
        capabilities={"context_window": {"Llama3.1:8b": 131072, "mistral": 32768, "*": 8192}})
    ProviderModel.objects.create(provider=per_model, model="mistral", context_window=16000)
    untouched = Provider.objects.create(team=team_a, name="Untouched", kind="demo",
                                        capabilities={"vision": True})

    assert legacy_windows_move(provider_model=Provider, model_row_model=ProviderModel) == 2

    plain.refresh_from_db(), per_model.refresh_from_db(), untouched.refresh_from_db()
    assert (plain.context_window, plain.capabilities) == (65536, {"streaming": False})
    assert (per_model.context_window, per_model.capabilities) == (8192, {})
    assert dict(per_model.model_settings.values_list("model", "context_window")) == {
        "Llama3.1:8b": 131072, "mistral": 16000}  # a row's own window stays
    assert per_model.settings_for("llama3.1:8b").context_window == 131072
    assert (untouched.context_window, untouched.capabilities) == (None, {"vision": True})
    # running it again changes nothing
    assert legacy_windows_move(provider_model=Provider, model_row_model=ProviderModel) == 0

    legacy_windows_restore(provider_model=Provider, model_row_model=ProviderModel)
    plain.refresh_from_db(), per_model.refresh_from_db()
    assert plain.capabilities == {"streaming": False, "context_window": 65536}
    assert per_model.capabilities["context_window"] == {"Llama3.1:8b": 131072, "mistral": 16000, "*": 8192}
