"""Read queries for traces: the filtered list, the inspector's skeleton, changes since a seq."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db.models import Q, QuerySet
from django.utils import timezone

from agentsite.models import Membership, Team

from .models import Step, StepPayload, Trace, TrajectoryState

# Steps rendered per chunk of the inspector's timeline; later chunks load as they scroll in.
STEP_CHUNK = 200
# Trajectory states shown at first (the latest); earlier ones load on request.
STATE_CHUNK = 20
# A re-sync that would patch more rows than this reloads the page instead.
CHANGES_LIMIT = 400
# Payload characters shown inline; the rest is behind a download link.
PAYLOAD_PREVIEW_CHARS = 16_000

LIST_COLUMNS = (
    "id", "uuid", "status", "created_at", "started_at", "finished_at", "duration_ms", "iterations", "step_count",
    "model", "provider_name", "cost_usd", "unpriced_calls", "prefix_priced_calls", "estimated_calls", "input_tokens", "output_tokens", "cache_write_tokens",
    "cache_read_tokens", "reasoning_tokens", "error", "answer", "team_id", "agent_id", "user_id", "conversation_id",
    "routing",
)


def date_param(params: Any, name: str, default: date | None, errors: dict[str, str]) -> Any:
    """The date in GET parameter ``name`` (YYYY-MM-DD), else ``default``; a value that is not
    a date is reported in ``errors`` and replaced by ``default``."""
    raw = (params.get(name) or "").strip()
    if not raw:
        return default
    try:
        return date.fromisoformat(raw)
    except ValueError:
        errors[name] = "Use a date like 2026-11-21."
        return default


@dataclass(frozen=True)
class TraceFilters:
    agent: str = ""
    status: str = ""
    user: str = ""
    model: str = ""
    date_from: date | None = None
    date_to: date | None = None
    min_cost: Decimal | None = None
    text: str = ""

    @classmethod
    def from_query(cls, params: Any) -> tuple[TraceFilters, dict[str, str]]:
        """Parse GET parameters; bad values are dropped and reported, never a 500."""
        errors: dict[str, str] = {}

        def day(name: str) -> date | None:
            return date_param(params, name, None, errors)

        min_cost = None
        raw_cost = (params.get("min_cost") or "").strip()
        if raw_cost:
            try:
                min_cost = Decimal(raw_cost)
                if not min_cost.is_finite() or min_cost < 0:
                    raise InvalidOperation
            except (InvalidOperation, ValueError):
                errors["min_cost"] = "Use a number of dollars, like 0.01."
                min_cost = None
        status = (params.get("status") or "").strip()
        if status and status not in Trace.Status.values:
            errors["status"] = "Unknown status."
            status = ""
        return (
            cls(
                agent=(params.get("agent") or "").strip(),
                status=status,
                user=(params.get("user") or "").strip(),
                model=(params.get("model") or "").strip()[:200],
                date_from=day("date_from"),
                date_to=day("date_to"),
                min_cost=min_cost,
                text=(params.get("q") or "").strip()[:200],
            ),
            errors,
        )

    @property
    def active(self) -> bool:
        return any((self.agent, self.status, self.user, self.model, self.date_from, self.date_to,
                    self.min_cost is not None, self.text))


def _day_start(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, time.min), timezone.get_current_timezone())


def trace_list(*, team: Team, filters: TraceFilters) -> QuerySet[Trace]:
    qs = (
        Trace.objects.filter(team=team)
        .select_related("agent", "user", "user_message")
        .only(*LIST_COLUMNS, "agent__name", "agent__uuid", "user__username", "user_message__text")
        .order_by("-created_at", "-id")
    )
    if filters.agent:
        qs = qs.filter(agent__uuid=filters.agent) if _is_uuid(filters.agent) else qs.none()
    if filters.status:
        qs = qs.filter(status=filters.status)
    if filters.user:
        qs = qs.filter(user__username=filters.user)
    if filters.model:
        qs = qs.filter(model=filters.model)
    if filters.date_from:
        qs = qs.filter(created_at__gte=_day_start(filters.date_from))
    if filters.date_to:
        qs = qs.filter(created_at__lt=_day_start(filters.date_to + timedelta(days=1)))
    if filters.min_cost is not None:
        qs = qs.filter(cost_usd__gte=filters.min_cost)
    if filters.text:
        qs = qs.filter(Q(user_message__text__icontains=filters.text) | Q(answer__icontains=filters.text) | Q(error__icontains=filters.text))
    return qs


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def trace_filter_choices(*, team: Team) -> dict[str, list]:
    """Values for the list's filter menus (agents, people, models seen in this team)."""
    return {
        "agents": list(team.agents.order_by("name").values_list("uuid", "name")),
        "users": list(Membership.objects.filter(team=team).order_by("user__username").values_list("user__username", flat=True)),
        "models": list(
            Trace.objects.filter(team=team).exclude(model="").order_by("model").values_list("model", flat=True).distinct()[:200]
        ),
        "statuses": Trace.Status.choices,
    }


# -- the inspector --------------------------------------------------------------------------------
STEP_COLUMNS = (
    "id", "trace_id", "seq", "kind", "name", "iteration", "status", "success", "started_at", "offset_ms",
    "duration_ms", "error", "provider", "model", "call_id", "cost_usd", "price_id", "price_match",
    "meta", "event_seq", "input_tokens", "output_tokens", "cache_write_tokens", "cache_read_tokens", "reasoning_tokens",
)


def trace_steps(trace: Trace, *, after_seq: int = 0, limit: int = STEP_CHUNK) -> list[Step]:
    """A chunk of the timeline: steps with ``seq`` above ``after_seq``, without payloads."""
    steps = list(trace.steps.filter(seq__gt=after_seq).only(*STEP_COLUMNS).order_by("seq")[:limit])
    for step in steps:
        step.trace = trace  # the rows render with their trace; no query per row
    return steps


def trace_states(trace: Trace, *, before: int | None = None, limit: int = STATE_CHUNK) -> tuple[list[TrajectoryState], bool]:
    """The latest ``limit`` states (before iteration ``before``), oldest first, and whether
    earlier ones exist."""
    qs = trace.trajectory_states.all()
    if before:
        qs = qs.filter(iteration__lt=before)
    rows = list(qs.order_by("-iteration")[: limit + 1])
    earlier = len(rows) > limit
    states = rows[:limit][::-1]
    for state in states:
        state.trace = trace
    return states, earlier


def trace_changes(trace: Trace, *, since: int) -> tuple[list[Step] | None, list[TrajectoryState]]:
    """What changed after event ``since``, for a client that missed announcements; ``None``
    when it is more than ``CHANGES_LIMIT`` rows (the client then reloads the page)."""
    steps = list(trace.steps.filter(event_seq__gt=since).only(*STEP_COLUMNS).order_by("seq")[: CHANGES_LIMIT + 1])
    states = list(trace.trajectory_states.filter(event_seq__gt=since).order_by("iteration")[: CHANGES_LIMIT + 1])
    if len(steps) + len(states) > CHANGES_LIMIT:
        return None, []
    for row in (*steps, *states):
        row.trace = trace
    return steps, states


def step_payloads(step: Step) -> list[StepPayload]:
    order = {k: i for i, k in enumerate(StepPayload.Kind.values)}
    return sorted(step.payloads.all(), key=lambda p: order.get(p.kind, 99))
