"""The costs page's break-downs: the range's amounts grouped by agent, model, person, API key or
conversation (largest cost first, each named as its viewer may see it), and the cost per day of
the largest groups for the chart, all from the cost roll-ups (``selectors.ledger_rows``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Sum
from django.urls import reverse

from agentsite.access import own_or_shared, sees_all_of_team
from agentsite.models import ApiKey, Membership, Team

from .pricing import units_usd
from .rollups import AMOUNT_FIELDS
from .selectors import (
    BROWSER_LABEL,
    PRIVATE_CONVERSATION,
    Amounts,
    CostFilters,
    Resolved,
    ledger_of,
    ledger_rows,
    ledger_sums,
)


@dataclass
class Group:
    key: Any
    label: str
    amounts: Amounts
    url: str = ""
    detail: str = ""


def _names(kind: str, ids: Iterable[int], team: Team,
           membership: Membership | None = None) -> dict[Any, tuple[str, str]]:
    """Display names (and a link) for roll-up ids; a conversation ``membership`` may not see
    is named as private, without its title or a link."""
    ids = [i for i in ids if i]
    if kind == "agent":
        return {pk: (name, "") for pk, name in team.agents.filter(pk__in=ids).values_list("pk", "name")}
    if kind == "user":
        return {pk: (name, "") for pk, name in
                get_user_model().objects.filter(pk__in=ids).values_list("pk", "username")}
    if kind == "conversation":
        # The conversation's own rule (``agents.access``), on its fields: its owner, shared.
        visible = own_or_shared(membership, owner="created_by", shared="shared")
        found = {pk: (PRIVATE_CONVERSATION, "") for pk in team.conversations.filter(pk__in=ids)
                 .exclude(visible).values_list("pk", flat=True)}
        for pk, title, code in (team.conversations.filter(pk__in=ids).filter(visible)
                                .values_list("pk", "title", "uuid")):
            found[pk] = (title or f"Conversation {code.hex[:8]}", reverse("conversation", args=[code]))
        return found
    if kind == "key":
        # A revoked key keeps its name; one that is gone is "Deleted key" (``_missing``). Names
        # follow the keys page: someone else's key is named by whose it is, not by its name.
        keys = {0: (BROWSER_LABEL, "")}
        rows = (ApiKey.objects.filter(team=team, pk__in=ids)
                .values_list("pk", "name", "prefix", "revoked_at", "user_id", "user__username"))
        for pk, name, prefix, revoked_at, user_id, username in rows:
            named = sees_all_of_team(membership) or (membership is not None and user_id == membership.user_id)
            label = f"{name} ({prefix}…)" if named else f"A key of {username} ({prefix}…)"
            keys[pk] = (f"{label}{' — revoked' if revoked_at else ''}", "")
        return keys
    return {}


def _missing(kind: str) -> str:
    return {"agent": "(deleted agent)", "user": "(deleted or no user)",
            "conversation": "(deleted conversation)", "key": "Deleted key"}.get(kind, "—")


KEYS = {"agent": ("agent_id",), "user": ("user_id",), "model": ("provider", "model"),
        "conversation": ("conversation_id",), "key": ("api_key_id",)}


def _key(row: dict[str, Any], by: str) -> Any:
    keys = KEYS[by]
    return tuple(row[k] for k in keys) if len(keys) > 1 else row[keys[0]]


def breakdown(*, team: Team, filters: CostFilters, resolved: Resolved, by: str,
              limit: int | None = None, membership: Membership | None = None) -> list[Group]:
    """Amounts grouped by agent, model, user, conversation or API key (0: the browser), largest
    cost first. Conversations and keys ``membership`` may not see keep their amounts but not
    their names."""
    if limit is None or len(KEYS[by]) > 1:
        groups = breakdowns(team=team, filters=filters, resolved=resolved, by=(by,),
                            membership=membership).groups[by]
        return groups[:limit] if limit is not None else groups
    model = ledger_of(resolved, by)
    rows = ledger_rows(model, team=team, filters=filters, resolved=resolved)
    key = KEYS[by][0]
    # The largest ``limit`` by cost alone first (the conversations' index holds it), then every
    # amount of those only: summing nine amounts of a month's rows of every conversation to keep
    # ten took 7-14 ms.
    top = (rows.values(key).annotate(cost_only=Sum("cost_units"))
           .order_by("-cost_only", key).values_list(key, flat=True)[:limit])
    rows = rows.filter(**{f"{key}__in": list(top)})
    summed = {row[key]: row for row in rows.values(key).annotate(**ledger_sums()).order_by()}
    return _groups(by, summed, team, membership)


@dataclass
class Breakdowns:
    totals: Amounts
    groups: dict[str, list[Group]]


def breakdowns(*, team: Team, filters: CostFilters, resolved: Resolved, by: Iterable[str],
               membership: Membership | None = None) -> Breakdowns:
    """The range's totals and several of ``breakdown``'s groupings (all of them, without a
    limit) from one read of the ledger: its rows summed by every id the groupings need, then
    added up per grouping here (a query per grouping took a millisecond or more each)."""
    by = tuple(by)
    model = ledger_of(resolved, "conversation" if "conversation" in by else "")
    rows = ledger_rows(model, team=team, filters=filters, resolved=resolved)
    dims = tuple(dict.fromkeys(k for grouping in by for k in KEYS[grouping]))
    summed: dict[str, dict[Any, dict[str, int]]] = {grouping: {} for grouping in by}
    total = dict.fromkeys(AMOUNT_FIELDS, 0)
    for row in rows.values(*dims).annotate(**ledger_sums()).order_by():
        amounts = {name: int(row[name] or 0) for name in AMOUNT_FIELDS}
        for name, value in amounts.items():
            total[name] += value
        for grouping in by:
            into = summed[grouping].setdefault(_key(row, grouping), dict.fromkeys(AMOUNT_FIELDS, 0))
            for name, value in amounts.items():
                into[name] += value
    return Breakdowns(Amounts.of(total), {grouping: _groups(grouping, summed[grouping], team, membership)
                                          for grouping in by})


def _groups(by: str, summed: dict[Any, dict[str, Any]], team: Team,
            membership: Membership | None) -> list[Group]:
    """``summed`` amounts per key as the page's groups, named, largest cost first."""
    order = sorted(summed, key=lambda key: (-int(summed[key]["cost_units"] or 0), key))
    names = _names(by, order, team, membership) if by != "model" else {}
    groups = []
    for key in order:
        if by == "model":
            label, url, detail = key[1] or "—", "", key[0]
        else:
            (label, url), detail = names.get(key, (_missing(by), "")), ""
        groups.append(Group(key, label, Amounts.of(summed[key]), url, detail))
    return groups


def daily_series(*, team: Team, filters: CostFilters, resolved: Resolved, by: str,
                 keys: list[Any]) -> dict[Any, dict[date, Decimal]]:
    """Cost per day of each of ``keys`` (of grouping ``by``); the rest summed as "other"."""
    model = ledger_of(resolved, by)
    rows = ledger_rows(model, team=team, filters=filters, resolved=resolved)
    wanted = set(keys)
    series: dict[Any, dict[date, Decimal]] = {}
    for row in rows.values("day", *KEYS[by]).annotate(cost=Sum("cost_units")).order_by():
        key = _key(row, by)
        bucket = series.setdefault(key if key in wanted else "other", {})
        bucket[row["day"]] = bucket.get(row["day"], Decimal(0)) + units_usd(row["cost"])
    return series
