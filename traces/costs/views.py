"""The costs page, and re-pricing of a trace or of a date range.

Everyone in the team reads costs and previews re-pricing (viewers too); only admins and owners
apply a correction. Another team's trace is a 404, as everywhere."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

from django.contrib import messages as flash
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from agentsite.access import team_required
from agentsite.models import Membership

from ..models import Trace
from ..record.selectors import trace_get_or_404
from . import breakdowns, selectors
from .budgets import request_budget_states
from .charts import shares, stacked_by_day
from .end_users import end_user_breakdown
from .pricing import price_table_for
from .repricing import (
    Target,
    range_reprice_apply,
    range_reprice_preview,
    target_choices,
    trace_reprice_apply,
    trace_reprice_preview,
)

Role = Membership.Role
SERIES_SHOWN = 7  # bars are stacked by the largest few; the rest is "other"
CORRECT_ACTION = "correct recorded costs"


@team_required()
@require_GET
def costs(request: HttpRequest) -> HttpResponse:
    team = request.team
    filters, errors = selectors.CostFilters.from_query(request.GET)
    resolved = selectors.resolve_filters(team=team, filters=filters)
    read = breakdowns.breakdowns(team=team, filters=filters, resolved=resolved,
                                 by=("agent", "model", "user", "key"), membership=request.membership)
    totals = read.totals
    tables: dict[str, Any] = dict(read.groups)
    # The per-conversation ledger is not kept per key: with a key filter there is no table.
    tables["conversation"] = None if filters.key else breakdowns.breakdown(
        team=team, filters=filters, resolved=resolved, by="conversation",
        membership=request.membership, limit=selectors.TOP_CONVERSATIONS)
    # The end users of the team's keys: shown when any call named one.
    end_users = end_user_breakdown(team=team, filters=filters, resolved=resolved,
                                   limit=selectors.TOP_CONVERSATIONS, total=totals)
    tables["end_user"] = end_users if any(g.key[0] for g in end_users) else None
    shown = tables[filters.split][:SERIES_SHOWN]
    series = breakdowns.daily_series(team=team, filters=filters, resolved=resolved, by=filters.split,
                                     keys=[g.key for g in shown])
    labels = [(g.key, g.label) for g in shown]
    if "other" in series:
        labels.append(("other", "Other"))
    chart = stacked_by_day(days=filters.days, series=labels, values=series)
    context: dict[str, Any] = {
        "filters": filters, "errors": errors, "totals": totals, "chart": chart, "tables": tables,
        "split_label": selectors.split_noun(filters.split),
        "buckets": shares([("Input", totals.input_tokens, "bucket-input"),
                           ("Cache write", totals.cache_write_tokens, "bucket-cache-write"),
                           ("Cache read", totals.cache_read_tokens, "bucket-cache-read"),
                           ("Output", totals.output_tokens, "bucket-output")]),
        "top_traces": selectors.top_traces(membership=request.membership, filters=filters,
                                           resolved=resolved),
        "budgets": request_budget_states(request),
        "choices": selectors.cost_filter_choices(team=team, membership=request.membership),
        "can_correct": request.membership.can_configure,
        "today": timezone.localdate(),
    }
    partial = request.htmx and request.htmx.target == "cost-body"
    return render(request, "costs/costs.html#cost-body" if partial else "costs/costs.html", context)


def _trace(request: HttpRequest, trace_uuid: Any) -> Trace:
    """A trace the person may see (``traces.record.selectors``); 404 otherwise."""
    return trace_get_or_404(request.membership,
                            Trace.objects.select_related("agent", "user", "user_message"),
                            uuid=trace_uuid)


@team_required()
@require_GET
def trace_reprice(request: HttpRequest, trace_uuid: Any) -> HttpResponse:
    """Recorded cost of each model request beside its cost under another model's price or the
    current price table."""
    trace = _trace(request, trace_uuid)
    table = price_table_for(request.team.pk, with_providers=True)
    target = Target.parse(request.GET.get("target", "table"), table=table, team_id=request.team.pk)
    error = ""
    if target is None:
        error = "That price is not in the table any more; showing the current table instead."
        target = Target()
    preview = trace_reprice_preview(trace=trace, target=target, table=table)
    return render(request, "costs/reprice_trace.html", {
        "trace": trace, "preview": preview, "target": target, "error": error,
        "choices": target_choices(table, team_id=request.team.pk),
        "can_correct": request.membership.can_configure,
    })


@team_required(Role.ADMIN, action=CORRECT_ACTION)
@require_POST
def trace_reprice_correct(request: HttpRequest, trace_uuid: Any) -> HttpResponse:
    trace = _trace(request, trace_uuid)
    table = price_table_for(request.team.pk, with_providers=True)
    try:
        correction = trace_reprice_apply(trace=trace, table=table, actor=request.user)
    except ValueError as exc:
        flash.error(request, str(exc))
        return redirect("trace_reprice", trace_uuid=trace.uuid)
    if correction.steps:
        flash.success(request, f"Corrected {correction.steps} model request"
                               f"{'s' if correction.steps != 1 else ''}: the trace now costs "
                               f"${correction.after:.6f} (was ${correction.before:.6f}).")
    else:
        flash.info(request, "Nothing to correct: the recorded costs match the current price table.")
    return redirect("trace_detail", trace_uuid=trace.uuid)


def _range(request: HttpRequest, params: Any) -> tuple[date, date, dict[str, str]]:
    today = timezone.localdate()
    filters, errors = selectors.CostFilters.from_query(
        {"date_from": params.get("date_from", ""), "date_to": params.get("date_to", "")}, today=today)
    return filters.date_from, filters.date_to, errors


@team_required()
@require_http_methods(["GET"])
def range_reprice(request: HttpRequest) -> HttpResponse:
    """Re-price every trace started in a date range: recorded and recomputed cost per model."""
    date_from, date_to, errors = _range(request, request.GET)
    table = price_table_for(request.team.pk, with_providers=True)
    target = Target.parse(request.GET.get("target", "table"), table=table, team_id=request.team.pk)
    if target is None:
        errors["target"] = "That price is not in the table any more; showing the current table."
        target = Target()
    preview = None
    if request.GET.get("run"):
        preview = range_reprice_preview(team=request.team, date_from=date_from, date_to=date_to,
                                        target=target, table=table)
    return render(request, "costs/reprice_range.html", {
        "date_from": date_from, "date_to": date_to, "errors": errors, "target": target,
        "preview": preview, "choices": target_choices(table, team_id=request.team.pk),
        "can_correct": request.membership.can_configure,
        "default_from": timezone.localdate() - timedelta(days=6),
    })


@team_required(Role.ADMIN, action=CORRECT_ACTION)
@require_POST
def range_reprice_correct(request: HttpRequest) -> HttpResponse:
    date_from, date_to, errors = _range(request, request.POST)
    if errors:
        flash.error(request, " ".join(errors.values()))
        return redirect("cost_reprice")
    table = price_table_for(request.team.pk, with_providers=True)
    correction = range_reprice_apply(team=request.team, date_from=date_from, date_to=date_to,
                                     table=table, actor=request.user)
    if correction.steps:
        flash.success(request, f"Corrected {correction.steps} model requests in "
                               f"{correction.traces} traces: ${correction.before:.6f} → "
                               f"${correction.after:.6f}.")
    else:
        flash.info(request, "Nothing to correct: the recorded costs match the current price table.")
    return redirect(f"{reverse('cost_reprice')}?date_from={date_from}&date_to={date_to}"
                    "&target=table&run=1")
