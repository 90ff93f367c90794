"""``/api/v1/costs``: what the team's model requests cost over a range of days, grouped by day,
agent, model, person or API key (scope ``costs:read``).

The figures come from the cost ledger the costs page reads (``traces.costs.selectors``, the
daily roll-ups): the totals and every group's amounts are sums of the same rows, so they add up
to each other and to the traces' costs. Costs are the team's: everyone in it reads every figure.
The money lost to prompt-cache misses is the costs page's figure too
(``traces.costs.cache_selectors``), computed from the model requests of the range's latest turns
rather than the roll-ups, so a script reads the same number the page shows, with the same filters
and the same sample.
The answer is one report, not a paginated list: its groups are bounded by the range (at most
366 days) and by the team's agents, models, people and keys."""

from __future__ import annotations

from datetime import date
from typing import Any, Literal

from django.contrib.auth import get_user_model
from django.db.models import Sum
from django.http import HttpRequest
from ninja import Field, Query, Router, Schema

from agents.api.auth import scope_check
from agents.api.end_users import end_user_conversations, request_end_user
from agents.api.errors import ApiError, errors
from agents.api.rest.common import is_uuid
from agents.api.rest.conversations import END_USER_PARAM
from agents.models import Agent, Conversation
from agentsite.access import sees_all_of_team
from agentsite.models import ApiKey, Membership, Team
from traces.costs.breakdowns import breakdown
from traces.costs.end_users import end_user_breakdown
from traces.costs.rollups import AMOUNT_FIELDS
from traces.costs.selectors import (
    BROWSER,
    MAX_DAYS,
    Amounts,
    CostFilters,
    Resolved,
    cost_totals,
    resolve_filters,
    rollup_rows,
)
from traces.json_values import usd

router = Router(tags=["costs"])
Scope = ApiKey.Scope
GroupBy = Literal["day", "agent", "model", "person", "key", "end_user"]


class CostAmountsOut(Schema):
    cost_usd: str = Field(description="A decimal string, in US dollars.")
    calls: int = Field(description="Model requests.")
    unpriced_calls: int = Field(description="Model requests without a price (counted as $0).")
    estimated_calls: int = Field(description="Model requests whose tokens are an estimate.")
    input_tokens: int
    output_tokens: int
    cache_write_tokens: int
    cache_read_tokens: int
    reasoning_tokens: int
    total_tokens: int
    cache_lost_usd: str = Field(description="What prompt-cache misses cost (a decimal string, in US "
                                            "dollars), counted as cache_lost is.")


class CostGroupOut(CostAmountsOut):
    key: str | None = Field(description="day: the date; agent: its id; model: its name; person: the "
                                        "username; key: the key's id (your own keys; every key for a "
                                        "team admin), or \"browser\" for the chat. Empty for a "
                                        "deleted agent, person or key, or someone else's key.")
    label: str
    provider: str | None = Field(None, description="model: the provider that served it.")


class CacheLostOut(Schema):
    usd: str = Field(description="Dollars lost to prompt-cache misses, a decimal string: tokens that "
                                 "could have been read from the cache (the start of the request "
                                 "before it, unchanged) but were billed as input, priced at the input "
                                 "rate less the cache-read rate. Each successful request is compared "
                                 "with the one before it in its conversation; the loss is recorded "
                                 "when the request is priced and summed in the cost ledger.")
    requests: int = Field(description="The model requests of the range and filters it covers.")
    turns: int | None = Field(None, description="Always null: the figure comes from the cost ledger, "
                                                "which counts model requests, not turns.")
    partial: bool = Field(description="Always false: the figure covers the whole range.")


class CostReportOut(Schema):
    date_from: date
    date_to: date
    group_by: str
    totals: CostAmountsOut
    cache_lost: CacheLostOut = Field(description="What prompt-cache misses cost over the range and "
                                                 "filters, as on the costs page.")
    data: list[CostGroupOut]


class CostQuery(Schema):
    group_by: GroupBy = Field("day", description="day, agent, model, person, key or end_user (the end "
                                                 "users of the team's keys, each with the person "
                                                 "whose keys name it).")
    date_from: date | None = Field(None, description=f"First day (default: a week before date_to); at most "
                                                     f"{MAX_DAYS} days in all.")
    date_to: date | None = Field(None, description="Last day (default: today).")
    agent: str | None = Field(None, description="Only this agent (its id or slug).")
    user: str | None = Field(None, description="Only this person (a username).")
    model: str | None = Field(None, description="Only this model.")
    key: str | None = Field(None, description=f"Only what came through this API key (its id), or "
                                              f"\"{BROWSER}\" for the chat.")


def amounts_out(amounts: Amounts) -> dict[str, Any]:
    return {**{name: getattr(amounts, name) for name in AMOUNT_FIELDS
               if name not in ("cost_units", "cache_lost_units")},
            "cost_usd": usd(amounts.cost), "total_tokens": amounts.total_tokens,
            "cache_lost_usd": usd(amounts.cache_lost)}


def _filters(team: Team, query: CostQuery) -> CostFilters:
    params = {"date_from": query.date_from.isoformat() if query.date_from else "",
              "date_to": query.date_to.isoformat() if query.date_to else "",
              "agent": query.agent or "", "user": query.user or "", "model": query.model or "",
              "key": query.key or ""}
    if params["agent"] and not is_uuid(params["agent"]):
        found = Agent.objects.filter(team=team, slug=params["agent"]).values_list("uuid", flat=True).first()
        params["agent"] = str(found) if found else params["agent"]
    filters, problems = CostFilters.from_query(params)
    if problems:
        param, message = next(iter(problems.items()))
        raise ApiError(400, message, param=param, code="invalid_value")
    return filters


BREAKDOWN = {"agent": "agent", "model": "model", "person": "user", "key": "key"}


def _public_ids(team: Team, membership: Membership, group_by: str, ids: list[int]) -> dict[int, str]:
    """The public ids of the roll-ups' agents, people or API keys. Someone else's key is named
    only by whose it is (as on the keys page), so its id is left out unless the caller sees
    every key of the team."""
    ids = [i for i in ids if i]
    if group_by == "agent":
        return {pk: str(code) for pk, code in Agent.objects.filter(team=team, pk__in=ids).values_list("pk", "uuid")}
    if group_by == "person":
        return dict(get_user_model().objects.filter(pk__in=ids).values_list("pk", "username"))
    if group_by == "key":
        keys = ApiKey.objects.filter(team=team, pk__in=ids)
        if not sees_all_of_team(membership):
            keys = keys.filter(user_id=membership.user_id)
        return {0: BROWSER, **{pk: str(code) for pk, code in keys.values_list("pk", "uuid")}}
    return {}


def _by_day(filters: CostFilters, rows: Any) -> list[dict[str, Any]]:
    grouped = rows.values("day").annotate(**{name: Sum(name) for name in AMOUNT_FIELDS}).order_by("day")
    by_day = {row["day"]: Amounts.of(row) for row in grouped}
    return [{"key": day.isoformat(), "label": day.isoformat(), **amounts_out(by_day.get(day, Amounts()))}
            for day in filters.days]


def cache_lost_out(totals: Amounts) -> dict[str, Any]:
    return {"usd": usd(totals.cache_lost), "requests": totals.calls, "turns": None, "partial": False}


def cost_groups(*, team: Team, membership: Membership, filters: CostFilters, resolved: Resolved,
                rows: Any, group_by: str) -> list[dict[str, Any]]:
    """The report's groups: every day of the range in order, or the costs page's break-down
    (largest cost first) with each group's public id."""
    if group_by == "end_user":
        return [{"key": g.key[0] or None, "label": g.label, **amounts_out(g.amounts)}
                for g in end_user_breakdown(team=team, filters=filters, resolved=resolved)]
    if group_by == "day":
        return _by_day(filters, rows)
    groups = breakdown(team=team, filters=filters, resolved=resolved, by=BREAKDOWN[group_by],
                       membership=membership)
    if group_by == "model":
        return [{"key": g.key[1], "label": g.label, "provider": g.key[0], **amounts_out(g.amounts)}
                for g in groups]
    ids = _public_ids(team, membership, group_by, [g.key for g in groups])
    return [{"key": ids.get(g.key), "label": g.label, **amounts_out(g.amounts)} for g in groups]


@router.get("", response={200: CostReportOut, **errors(400)}, summary="Costs over a range of days",
            openapi_extra=END_USER_PARAM)
def cost_report(request: HttpRequest, query: Query[CostQuery]) -> dict[str, Any]:
    """Totals over the range and one group per day, agent, model, person or API key
    (``group_by``), largest cost first (days in order), with the money lost to prompt-cache
    misses (in all, and per group). With `X-Agentsite-End-User`, that end
    user's costs only (their conversations, from the per-conversation ledger). Scope `costs:read`."""
    caller = scope_check(request, Scope.COSTS)
    team = request.team
    filters = _filters(team, query)
    resolved = resolve_filters(team=team, filters=filters)
    end_user = request_end_user(request, caller)
    if end_user:  # that end user's conversations only (``agents.api.end_users``)
        if query.group_by == "key":
            raise ApiError(400, "An end user's costs are not kept per key: group by day, agent, "
                                "model or person.", param="group_by")
        resolved.conversations = end_user_conversations(
            Conversation.objects.filter(team=team), caller, end_user).values("pk")
    rows = rollup_rows(team=team, filters=filters, resolved=resolved)
    groups = cost_groups(team=team, membership=request.membership, filters=filters, resolved=resolved,
                         rows=rows, group_by=query.group_by)
    totals = cost_totals(rows)
    return {"date_from": filters.date_from, "date_to": filters.date_to, "group_by": query.group_by,
            "totals": amounts_out(totals), "cache_lost": cache_lost_out(totals), "data": groups}


