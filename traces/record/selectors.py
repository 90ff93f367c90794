"""Read queries for traces: who may see which, the filtered list, the inspector's skeleton,
changes since a seq.

Who sees a trace: the team's owners and admins see every trace of the team; members and viewers
see the traces of the conversations they may see (their own, and those shared with the team).
Any other trace is a 404. The conversation's rule is ``agents.access``; it is applied here
through the trace's conversation (``conversation__created_by``, ``conversation__shared``), as
this app knows nothing of the agents' models.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import connection
from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from django.http import Http404
from django.utils import timezone

from agentsite.access import (
    get_for_team_or_404,
    may_act_for,
    own_or_shared,
    sees_all_of_team,
    viewer_standin,
    visible_by_uuid,
)
from agentsite.db.prepared import Prepared
from agentsite.models import Membership, Team

from ..models import Feedback, Step, StepPayload, Trace, TrajectoryState

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


# -- who sees which trace ---------------------------------------------------------------------------
ADMIN_NOTICE = "You see every trace of this team as an admin."


def trace_visibility(membership: Membership | None, *, prefix: str = "") -> Q:
    """The filter for the traces ``membership`` may see (``prefix``: the path from another
    model to its trace, such as ``"trace__"``)."""
    return own_or_shared(membership, owner=f"{prefix}conversation__created_by",
                         shared=f"{prefix}conversation__shared")


def traces_visible(membership: Membership | None, queryset: QuerySet[Trace] | None = None) -> QuerySet[Trace]:
    """The traces of ``membership``'s team that it may see."""
    qs = Trace.objects.all() if queryset is None else queryset
    if membership is None:
        return qs.none()
    return qs.filter(team_id=membership.team_id).filter(trace_visibility(membership))


def recent_turns(membership: Membership, *, limit: int) -> tuple[list[Trace], list[Trace]]:
    """The newest ``limit`` running (queued or running) and finished traces ``membership`` may
    see, for a list of links, in one query: each active status's newest from the (team, status,
    -created_at) index, the newest finished from (team, -created_at). (SQLite answers "status IN
    (queued, running) ORDER BY created_at" by walking every trace of the team.)"""
    rows = _recent_read(membership.team_id, membership.user_id, sees_all=sees_every_trace(membership), limit=limit)
    running = [t for t in rows if t.status in Trace.ACTIVE][:limit]
    return running, [t for t in rows if t.status not in Trace.ACTIVE][:limit]


def _recent(team_id: int, user_id: int, *, sees_all: bool, limit: int) -> QuerySet[Trace]:
    visible = traces_visible(viewer_standin(team_id, user_id, sees_all=sees_all)).order_by("-created_at", "-id")
    newest = Q(pk__in=visible.exclude(status__in=Trace.ACTIVE).values("pk")[:limit])
    for status in Trace.ACTIVE:
        newest |= Q(pk__in=visible.filter(status=status).values("pk")[:limit])
    return (Trace.objects.filter(newest).select_related("agent", "user_message")
            .only("uuid", "status", "created_at", "cost_usd", "agent__name", "user_message__text")
            .order_by("-created_at", "-id"))


_recent_read = Prepared(_recent)  # the home page's: compiled once per process


def trace_get_or_404(membership: Membership, queryset: QuerySet[Trace] | None = None, **lookup: Any) -> Trace:
    """One trace of the membership's team that it may see; any other is a 404."""
    qs = Trace.objects.all() if queryset is None else queryset
    return get_for_team_or_404(qs.filter(trace_visibility(membership)), membership.team, **lookup)


PAGE_RELATED = ("agent", "conversation", "user", "user_message", "api_key")


def _page_trace(team_id: int, user_id: int, trace_uuid: uuid.UUID, *, sees_all: bool,
                flags: bool) -> QuerySet[Trace]:
    viewer = viewer_standin(team_id, user_id, sees_all=sees_all)
    rows = Trace.objects.select_related(*PAGE_RELATED)
    if flags:
        rows = rows.annotate(
            has_retries=Exists(Step.objects.filter(trace_id=OuterRef("pk"), kind=Step.Kind.RETRY)),
            has_forks=Exists(Trace.objects.filter(forked_from_id=OuterRef("pk"))),
            has_feedback=Exists(Feedback.objects.filter(trace_id=OuterRef("pk"))))
    return traces_visible(viewer, rows).filter(uuid=trace_uuid)


_page_trace_read = Prepared(_page_trace)


def page_trace_or_404(membership: Membership, trace_uuid: uuid.UUID, *, flags: bool = False) -> Trace:
    """The trace a page of the inspector shows, with its agent, conversation, person, message
    and key, if ``membership`` may see it (``traces_visible``); else 404. ``flags``: with
    whether it has failovers, forks and ratings to show (``has_retries``, ``has_forks``,
    ``has_feedback``). Every inspector request reads it: compiled once per process."""
    try:
        return _page_trace_read.get(membership.team_id, membership.user_id, trace_uuid,
                                    sees_all=sees_every_trace(membership), flags=flags)
    except Trace.DoesNotExist as exc:
        raise Http404("Not found.") from exc


def trace_visible_to(user: Any, trace_uuid: Any) -> bool:
    """Whether ``user`` may see (and so follow live) the trace with this public id."""
    return visible_by_uuid(user, Trace, trace_uuid, traces_visible)


def sees_every_trace(membership: Membership | None) -> bool:
    return sees_all_of_team(membership)


def trace_can_act(membership: Membership | None, trace: Trace) -> bool:
    """Whether ``membership`` may stop the trace's turn or decide on its tool calls (its
    conversation's owner or a team admin; ``agents.turns`` checks again when they do)."""
    if membership is None or membership.team_id != trace.team_id:
        return False
    return may_act_for(membership, trace.conversation.created_by_id)


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


FEEDBACK_FILTERS = {"up": "Rated good", "down": "Rated bad", "any": "Rated", "none": "Not rated"}


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
    feedback: str = ""  # "up", "down", "any" (rated) or "none" (not rated)

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
        feedback = (params.get("feedback") or "").strip()
        if feedback and feedback not in FEEDBACK_FILTERS:
            errors["feedback"] = "Unknown rating."
            feedback = ""
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
                feedback=feedback,
            ),
            errors,
        )

    @property
    def active(self) -> bool:
        return any((self.agent, self.status, self.user, self.model, self.date_from, self.date_to,
                    self.min_cost is not None, self.text, self.feedback))


def _day_start(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, time.min), timezone.get_current_timezone())


def trace_list(*, membership: Membership, filters: TraceFilters) -> QuerySet[Trace]:
    """The traces ``membership`` may see, filtered, newest first."""
    qs = (
        traces_visible(membership)
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
    if filters.feedback in ("up", "down"):
        rating = Feedback.Rating.UP if filters.feedback == "up" else Feedback.Rating.DOWN
        qs = qs.filter(Exists(Feedback.objects.filter(trace_id=OuterRef("pk"), rating=rating)))
    elif filters.feedback in ("any", "none"):
        rated = Exists(Feedback.objects.filter(trace_id=OuterRef("pk")))
        qs = qs.filter(rated if filters.feedback == "any" else ~rated)
    if filters.text:
        qs = qs.filter(Q(user_message__text__icontains=filters.text) | Q(answer__icontains=filters.text) | Q(error__icontains=filters.text))
    return qs


class ListedTraces:
    """The list without filters (its most read form) as ``Paginator`` pages it: its count, then
    a page's slice, each a read compiled once per process (and page) instead of at every
    request."""

    def __init__(self, membership: Membership) -> None:
        self.team_id, self.user_id = membership.team_id, membership.user_id
        self.sees_all = sees_every_trace(membership)

    def count(self) -> int:
        counted = _listed_count_read(self.team_id, self.user_id, sees_all=self.sees_all)
        return counted[0] if counted else 0

    def __len__(self) -> int:
        return self.count()

    def __getitem__(self, part: slice) -> list[Trace]:
        start = part.start or 0
        if part.stop <= start:  # an empty list's page
            return []
        return _listed_read(self.team_id, self.user_id, sees_all=self.sees_all, offset=start,
                            limit=part.stop - start)


def trace_list_pages(*, membership: Membership, filters: TraceFilters) -> QuerySet[Trace] | ListedTraces:
    """``trace_list`` as the list page pages it."""
    return trace_list(membership=membership, filters=filters) if filters.active else ListedTraces(membership)


def _listed(team_id: int, user_id: int, *, sees_all: bool, offset: int, limit: int) -> QuerySet[Trace]:
    viewer = viewer_standin(team_id, user_id, sees_all=sees_all)
    return trace_list(membership=viewer, filters=TraceFilters())[offset:offset + limit]


def _listed_count(team_id: int, user_id: int, *, sees_all: bool) -> QuerySet[Trace]:
    visible = traces_visible(viewer_standin(team_id, user_id, sees_all=sees_all))
    return visible.order_by().values("team_id").annotate(n=Count("pk")).values_list("n", flat=True)


_listed_read = Prepared(_listed)
_listed_count_read = Prepared(_listed_count)


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
        "models": trace_models(team_id=team.pk),
        "statuses": Trace.Status.choices,
        "feedback": list(FEEDBACK_FILTERS.items()),
    }


def trace_models(*, team_id: int, limit: int = 200) -> list[str]:
    """The distinct models of the team's traces, in order (the first ``limit``): a loose scan of
    the (team, model) index that takes one step per model, where ``SELECT DISTINCT`` reads
    every trace of the team (8 ms at 10,000 traces on SQLite, and growing with them)."""
    table = connection.ops.quote_name(Trace._meta.db_table)
    following = f"SELECT MIN(model) FROM {table} WHERE team_id = %s AND model > "  # noqa: S608 - a model's table
    sql = (f"WITH RECURSIVE found(model, n) AS (SELECT ({following}''), 1 "  # noqa: S608 - values as parameters
           f"UNION ALL SELECT ({following}found.model), n + 1 FROM found "
           "WHERE found.model IS NOT NULL AND n < %s) "
           "SELECT model FROM found WHERE model IS NOT NULL ORDER BY n")
    with connection.cursor() as cursor:
        cursor.execute(sql, [team_id, team_id, limit])
        return [model for (model,) in cursor.fetchall()]


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


def trace_states(trace: Trace, *, before: int | None = None,
                 limit: int = STATE_CHUNK) -> tuple[list[TrajectoryState], TrajectoryState | None]:
    """The latest ``limit`` states (before iteration ``before``), oldest first, and the state
    before the first of them (None when there is none: no earlier states to load). One query:
    that state is read with them, for the first one's diff."""
    qs = trace.trajectory_states.all()
    if before:
        qs = qs.filter(iteration__lt=before)
    rows = list(qs.order_by("-iteration")[: limit + 1])
    previous = rows[limit] if len(rows) > limit else None
    states = rows[:limit][::-1]
    for state in (*states, *([previous] if previous else [])):
        state.trace = trace
    return states, previous


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


def streaming_text(trace: Trace) -> tuple[int, str] | None:
    """The running trace's streaming model request and the text it has streamed so far, as the
    worker last saved it (a page opened mid-answer shows it, and live frames continue it)."""
    row = (StepPayload.objects.filter(kind=StepPayload.Kind.PARTIAL, step__trace=trace,
                                      step__status=Step.Status.RUNNING)
           .values_list("step__seq", "content").order_by("-step__seq").first())
    return (row[0], row[1]) if row else None
