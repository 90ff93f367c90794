"""Read queries of the costs page: totals, per-day series and break-downs from the cost
roll-ups, and the most expensive traces from the trace table. Every figure for a filter is a sum
of the same roll-up rows, so the page's total, its charts' bars and its tables add up to each
other and to the steps behind them.

Costs are the team's: everyone in it reads every figure. What a figure names follows the privacy
model: a private conversation's title and link, and the traces of the list of the most expensive
ones, only for the people who may see them (``selectors.traces_visible``)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode

from django.contrib.auth import get_user_model
from django.db.models import Q, QuerySet, Sum
from django.utils import timezone

from agentsite.access import sees_all_of_team
from agentsite.db.prepared import Prepared
from agentsite.models import ApiKey, Membership, Team

from ..models import ConversationCostRollup, CostRollup, Trace
from ..record.selectors import date_param, traces_visible
from .pricing import units_usd
from .rollups import AMOUNT_FIELDS, LedgerAmounts

DEFAULT_DAYS = 7
MAX_DAYS = 366
SPLITS = {"agent": "Agent", "model": "Model", "user": "Person", "conversation": "Conversation",
          "key": "API key"}
# The ``key`` filter's value for requests made in the browser (roll-ups store no key as 0).
BROWSER = "browser"
BROWSER_LABEL = "Browser"
TOP_TRACES = 10
TOP_CONVERSATIONS = 10
PRIVATE_CONVERSATION = "(a private conversation)"


def split_noun(split: str) -> str:
    """A split's name inside a sentence: "by person", "by API key"."""
    label = SPLITS[split]
    return label if label.split()[0].isupper() else label.lower()


@dataclass(frozen=True)
class CostFilters:
    date_from: date
    date_to: date
    agent: str = ""
    user: str = ""
    model: str = ""
    split: str = "agent"
    # An API key's public id, or ``BROWSER`` for what was not sent with a key.
    key: str = ""

    @classmethod
    def from_query(cls, params: Any, *, today: date | None = None) -> tuple[CostFilters, dict[str, str]]:
        """Parse GET parameters; a bad value is reported and replaced, never a 500."""
        today = today or timezone.localdate()
        errors: dict[str, str] = {}

        def day(name: str, default: date) -> date:
            return date_param(params, name, default, errors)

        date_to = day("date_to", today)
        date_from = day("date_from", date_to - timedelta(days=DEFAULT_DAYS - 1))
        if date_from > date_to:
            errors["date_from"] = "The start is after the end; showing the end's week."
            date_from = date_to - timedelta(days=DEFAULT_DAYS - 1)
        if (date_to - date_from).days >= MAX_DAYS:
            errors["date_from"] = f"At most {MAX_DAYS} days at once."
            date_from = date_to - timedelta(days=MAX_DAYS - 1)
        split = (params.get("split") or "agent").strip()
        if split not in SPLITS:
            errors["split"] = "Unknown split."
            split = "agent"
        agent = (params.get("agent") or "").strip()
        if agent and not _is_uuid(agent):
            errors["agent"] = "Unknown agent."
            agent = ""
        key = (params.get("key") or "").strip()
        if key and key != BROWSER and not _is_uuid(key):
            errors["key"] = "Unknown API key."
            key = ""
        if key and split == "conversation":
            # The per-conversation ledger is not kept per key.
            errors["split"] = "Conversations are not counted per API key; split by key instead."
            split = "key"
        return cls(date_from=date_from, date_to=date_to, agent=agent,
                   user=(params.get("user") or "").strip()[:150],
                   model=(params.get("model") or "").strip()[:200], split=split, key=key), errors

    @property
    def days(self) -> list[date]:
        return [self.date_from + timedelta(days=n) for n in range((self.date_to - self.date_from).days + 1)]

    def query(self, **changes: Any) -> str:

        values = {"date_from": self.date_from.isoformat(), "date_to": self.date_to.isoformat(),
                  "agent": self.agent, "user": self.user, "model": self.model, "split": self.split,
                  "key": self.key}
        values.update(changes)
        return urlencode({k: v for k, v in values.items() if v})


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


@dataclass
class Resolved:
    """Filter values as the ids roll-ups store; ``impossible`` when one names nothing."""

    agent_id: int | None = None
    user_id: int | None = None
    api_key_id: int | None = None  # 0: the browser
    impossible: bool = False
    # Only these conversations (a query of their ids; an end user's, through the API): every
    # figure then comes from the per-conversation ledger.
    conversations: Any = None


def resolve_filters(*, team: Team, filters: CostFilters) -> Resolved:
    resolved = Resolved()
    if filters.agent:
        resolved.agent_id = team.agents.filter(uuid=filters.agent).values_list("pk", flat=True).first()
        resolved.impossible |= resolved.agent_id is None
    if filters.user:
        resolved.user_id = (get_user_model().objects.filter(username=filters.user)
                            .values_list("pk", flat=True).first())
        resolved.impossible |= resolved.user_id is None
    if filters.key == BROWSER:
        resolved.api_key_id = 0
    elif filters.key:
        resolved.api_key_id = ApiKey.objects.filter(team=team, uuid=filters.key).values_list("pk", flat=True).first()
        resolved.impossible |= resolved.api_key_id is None
    return resolved


def ledger_rows(model: Any, *, team: Team, filters: CostFilters, resolved: Resolved) -> QuerySet:
    rows = model.objects.filter(team=team, day__gte=filters.date_from, day__lte=filters.date_to)
    if resolved.impossible:
        return rows.none()
    if resolved.agent_id is not None:
        rows = rows.filter(agent_id=resolved.agent_id)
    if resolved.user_id is not None:
        rows = rows.filter(user_id=resolved.user_id)
    if filters.model:
        rows = rows.filter(model=filters.model)
    if resolved.api_key_id is not None:
        if model is not CostRollup:
            return rows.none()  # only the main ledger is kept per key
        rows = rows.filter(api_key_id=resolved.api_key_id)
    if resolved.conversations is not None:
        rows = rows.filter(conversation_id__in=resolved.conversations)
    return rows.order_by()


def ledger_of(resolved: Resolved, by: str = "") -> Any:
    """The ledger a figure is read from: the per-conversation one for conversations."""
    conversational = by == "conversation" or resolved.conversations is not None
    return ConversationCostRollup if conversational else CostRollup


def rollup_rows(*, team: Team, filters: CostFilters, resolved: Resolved) -> QuerySet[CostRollup]:
    return ledger_rows(ledger_of(resolved), team=team, filters=filters, resolved=resolved)


def ledger_sums() -> dict[str, Sum]:
    return {name: Sum(name) for name in AMOUNT_FIELDS}


@dataclass(frozen=True, kw_only=True)
class Amounts(LedgerAmounts):
    """Summed roll-up amounts with what the page shows of them."""

    @classmethod
    def of(cls, row: dict[str, Any]) -> Amounts:
        return cls(**{name: int(row.get(name) or 0) for name in AMOUNT_FIELDS})

    @property
    def cost(self) -> Decimal:
        return units_usd(self.cost_units)

    @property
    def cache_lost(self) -> Decimal:
        """Dollars lost to prompt-cache misses."""
        return units_usd(self.cache_lost_units)

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cache_write_tokens + self.cache_read_tokens

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens

    @property
    def cache_read_share(self) -> float | None:
        """The part of the prompt tokens served from the provider's cache."""
        return self.cache_read_tokens / self.prompt_tokens if self.prompt_tokens else None


def cost_totals(rows: QuerySet[CostRollup]) -> Amounts:
    return Amounts.of(rows.aggregate(**ledger_sums()))


def traces_started_in(traces: QuerySet[Trace], *, filters: CostFilters,
                      resolved: Resolved) -> QuerySet[Trace]:
    """Of ``traces``, those started in the filters' range with their agent, person and API key
    (0: the browser). The model is the caller's to filter: the trace's, or its requests'."""
    zone = timezone.get_current_timezone()
    start = timezone.make_aware(datetime.combine(filters.date_from, time.min), zone)
    end = timezone.make_aware(datetime.combine(filters.date_to + timedelta(days=1), time.min), zone)
    traces = traces.filter(created_at__gte=start, created_at__lt=end)
    if resolved.agent_id is not None:
        traces = traces.filter(agent_id=resolved.agent_id)
    if resolved.user_id is not None:
        traces = traces.filter(user_id=resolved.user_id)
    if resolved.api_key_id is not None:
        traces = (traces.filter(api_key_id=resolved.api_key_id) if resolved.api_key_id
                  else traces.filter(api_key__isnull=True))
    if resolved.conversations is not None:
        traces = traces.filter(conversation_id__in=resolved.conversations)
    return traces


def top_traces(*, membership: Membership, filters: CostFilters, resolved: Resolved,
               limit: int = TOP_TRACES) -> list[Trace]:
    """The most expensive traces started in the range that ``membership`` may see (the
    ``trace_team_cost`` index)."""
    if resolved.impossible:
        return []
    traces = traces_started_in(traces_visible(membership), filters=filters,
                               resolved=resolved).filter(cost_usd__gt=0)
    if filters.model:
        traces = traces.filter(model=filters.model)
    return list(traces.select_related("agent", "user", "user_message")
                .only("uuid", "created_at", "cost_usd", "model", "status", "unpriced_calls",
                      "prefix_priced_calls", "estimated_calls", "input_tokens", "output_tokens", "cache_write_tokens",
                      "cache_read_tokens", "agent__name", "user__username", "user_message__text",
                      "team_id")
                .order_by("-cost_usd", "-id")[:limit])


def cost_filter_choices(*, team: Team, membership: Membership | None = None) -> dict[str, list]:
    """The filters' choices; the keys are those ``membership`` may see on the keys page."""
    keys = ApiKey.objects.filter(team=team)
    if not sees_all_of_team(membership):
        keys = keys.filter(user_id=membership.user_id if membership is not None else None)
    return {
        "agents": list(team.agents.order_by("name").values_list("uuid", "name")),
        "users": list(Membership.objects.filter(team=team).order_by("user__username")
                      .values_list("user__username", flat=True)),
        "models": list(CostRollup.objects.filter(team=team).exclude(model="").order_by("model")
                       .values_list("model", flat=True).distinct()[:200]),
        "splits": list(SPLITS.items()),
        "keys": [(code, f"{name} ({prefix}…)") for code, name, prefix in
                 keys.order_by("name", "id").values_list("uuid", "name", "prefix")],
    }


def recent_spend(*, team: Team, user_id: int | None, days: int = 7) -> tuple[Decimal, Decimal]:
    """What the team, and the person, spent over the last ``days`` days (today included), in
    one query."""
    since = timezone.localdate() - timedelta(days=days - 1)
    spent = _spent_read(team.pk, user_id or 0, since)  # one row, or none without roll-ups
    team_units, mine_units = spent[0] if spent else (None, None)
    return units_usd(team_units), units_usd(mine_units if user_id else None)


def _spent(team_id: int, user_id: int, since: date) -> QuerySet[CostRollup]:
    return (CostRollup.objects.filter(team_id=team_id, day__gte=since).order_by().values("team_id")
            .annotate(team=Sum("cost_units"), mine=Sum("cost_units", filter=Q(user_id=user_id)))
            .values_list("team", "mine"))


# Every home page reads it: compiled once per process.
_spent_read = Prepared(_spent)
