"""State changes of one trace's record: heartbeat, configuration, steps and trajectory states,
steps cut off when a turn ends. A turn's life around them (claim, close, cancel, dispatch,
reap) belongs to the turns (``agents.turns.lifecycle``, ``agents.turns.reaper``).

Every change that a live client can see bumps ``Trace.event_seq`` by one, and the row it touched
stores the new number (``traces.models``). Changes a worker makes are conditional on the trace
still being its own: ``status == running`` and ``attempts`` equal to the attempt it claimed. A
worker whose trace was reaped, or claimed again after a resumption, therefore cannot overwrite
what happened since; its writes raise ``TraceNotOwned`` and it stops.
"""

from __future__ import annotations

import functools
import logging
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection, transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from agents.runtime.pricing import TOKEN_FIELDS
from agentsite.models import Membership

from . import rollups
from .export import pipeline as export_pipeline
from .models import Feedback, Step, StepPayload, Trace, TrajectoryState

logger = logging.getLogger(__name__)
Status = Trace.Status

# Step columns a recorder may write (the rest belong to the row's creation).
STEP_FIELDS = frozenset({
    "kind", "name", "iteration", "status", "success", "duration_ms", "error", "provider",
    "model", "call_id", "cost_usd", "price_id", "price_match", "meta", *TOKEN_FIELDS,
})
LIVE_RELATED = ("conversation", "agent", "user", "team", "user_message", "api_key")


class TraceNotOwned(Exception):  # noqa: N818 - a state, not a programming error
    """The trace is no longer the caller's to write: reaped, cancelled, or claimed again."""


# -- helpers ------------------------------------------------------------------------------------
def trace_owned(trace_id: int, attempt: int) -> QuerySet[Trace]:
    return Trace.objects.filter(pk=trace_id, status=Status.RUNNING, attempts=attempt)


def event_bump(trace_id: int, attempt: int | None = None) -> int:
    """The trace's next event number. With ``attempt``, only while that attempt owns it.
    Call inside a transaction: the row stays locked until it commits."""
    if _update_returns_rows():
        return _bump_returning(trace_id, attempt)
    rows = trace_owned(trace_id, attempt) if attempt is not None else Trace.objects.filter(pk=trace_id)
    if rows.update(event_seq=F("event_seq") + 1) != 1:
        raise TraceNotOwned(f"trace {trace_id} is no longer owned by attempt {attempt}")
    return Trace.objects.filter(pk=trace_id).values_list("event_seq", flat=True).get()


def _update_returns_rows() -> bool:
    # UPDATE ... RETURNING: PostgreSQL, and SQLite from 3.35. One query instead of two on the
    # hottest write of a turn.
    if connection.vendor == "postgresql":
        return True
    return connection.vendor == "sqlite" and sqlite3.sqlite_version_info >= (3, 35)


def _bump_returning(trace_id: int, attempt: int | None) -> int:
    table = connection.ops.quote_name(Trace._meta.db_table)
    where, params = "id = %s", [trace_id]
    if attempt is not None:
        where += " AND status = %s AND attempts = %s"
        params += [Status.RUNNING.value, attempt]
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET event_seq = event_seq + 1 WHERE {where} "  # noqa: S608 - a model's table name, values as parameters
                       "RETURNING event_seq", params)
        row = cursor.fetchone()
    if row is None:
        raise TraceNotOwned(f"trace {trace_id} is no longer owned by attempt {attempt}")
    return int(row[0])


def reason_sentence(reason: str) -> str:
    """A cancel reason ("Cancelled by alice", "interrupted by a new message") as the sentence
    shown as the trace's error."""
    text = (reason or "").strip() or "Cancelled"
    text = text[0].upper() + text[1:]
    return text if text[-1] in ".!?" else text + "."


def trace_for_live(trace_id: int) -> Trace:
    """The trace with what announcements render, so they need no query of their own."""
    return Trace.objects.select_related(*LIVE_RELATED).get(pk=trace_id)


def step_totals(trace_id: int) -> dict[str, Any]:
    return rollups.trace_totals_from_steps(trace_id)


def duration_ms(started: datetime | None, now: datetime) -> int | None:
    return max(int((now - started).total_seconds() * 1000), 0) if started else None


# -- the worker's side --------------------------------------------------------------------------
@dataclass(frozen=True)
class Heartbeat:
    owned: bool
    cancel_reason: str | None = None


def trace_heartbeat(*, trace_id: int, attempt: int, now: datetime | None = None) -> Heartbeat:
    """Renew the heartbeat; also reports a cancel request (the fallback to the Redis signal)."""
    if not trace_owned(trace_id, attempt).update(heartbeat_at=now or timezone.now()):
        return Heartbeat(owned=False)
    row = Trace.objects.filter(pk=trace_id).values("cancel_requested_at", "cancel_reason").get()
    if row["cancel_requested_at"] is None:
        return Heartbeat(owned=True)
    return Heartbeat(owned=True, cancel_reason=row["cancel_reason"] or "Cancelled by user.")


def trace_configure(*, trace_id: int, attempt: int, routing: dict[str, Any], provider_name: str,
                    provider_kind: str, model: str, warnings: list[str],
                    agent_version: int | None = None) -> Trace:
    """Record how the turn was set up: the routing decision, provider and model, warnings, and
    the agent's configuration version it runs with."""
    with transaction.atomic():
        event_bump(trace_id, attempt)
        meta = Trace.objects.filter(pk=trace_id).values_list("meta", flat=True).get() or {}
        if warnings:
            meta = {**meta, "warnings": list(warnings)}
        extra = {"agent_version": agent_version} if agent_version is not None else {}
        Trace.objects.filter(pk=trace_id).update(
            routing=routing, provider_name=provider_name[:100], provider_kind=provider_kind[:16],
            model=model[:200], meta=meta, **extra)
    return trace_for_live(trace_id)


def trace_budget_note(*, trace_id: int, attempt: int, note: dict[str, Any],
                      route: Mapping[str, str] | None = None) -> Trace:
    """Record what a budget decided during the turn in ``routing["budget"]`` (a warning, a
    route down, a block). A route down also names the provider and model the rest of the turn
    uses, so "Why this model" shows the model that answered and why."""
    with transaction.atomic():
        event_bump(trace_id, attempt)
        routing = Trace.objects.filter(pk=trace_id).values_list("routing", flat=True).get() or {}
        budget = dict(routing.get("budget") or {}) if isinstance(routing, dict) else {}
        budget.update(note)
        routing = {**(routing if isinstance(routing, dict) else {}), "budget": budget}
        updates: dict[str, Any] = {"routing": routing}
        if route:
            updates.update(provider_name=route["provider_name"][:100],
                           provider_kind=route["provider_kind"][:16], model=route["model"][:200])
        Trace.objects.filter(pk=trace_id).update(**updates)
    return trace_for_live(trace_id)


Payloads = Mapping[str, tuple[str, str]]  # kind -> (content, content type)


def _unchanged(step: Step, values: Mapping[str, Any], payloads: Payloads) -> bool:
    # Decimals compare by value (0E-10 == 0); meta compares as the JSON it round-trips to.
    if any(getattr(step, name) != value for name, value in values.items()):
        return False
    if not payloads:
        return True
    stored = dict(step.payloads.filter(kind__in=list(payloads)).values_list("kind", "content"))
    return all(stored.get(kind) == content for kind, (content, _) in payloads.items())


def _goes_back(step: Step, values: Mapping[str, Any]) -> bool:
    """A finished step never becomes running or waiting again: that write is a stale replay."""
    finished = (Step.Status.OK, Step.Status.ERROR)
    return step.status in finished and values.get("status", step.status) not in finished


def step_record(*, trace_id: int, attempt: int, seq: int, values: Mapping[str, Any],
                payloads: Payloads | None = None, started_at: datetime | None = None,
                offset_ms: int = 0) -> Step | None:
    """Create or update step ``seq`` of the trace. Idempotent: writing what the row already
    holds, or moving a finished step back to running, is a no-op and returns None (no event).
    ``started_at``/``offset_ms`` are kept from the row's creation. Raises ``TraceNotOwned`` when
    the attempt no longer owns the trace.

    A finished model request changes what the trace has cost: its totals and the cost
    roll-ups move in the same transaction (``traces.rollups``), as a second event; the
    returned step's ``totals_seq`` is that event's number (0 when the totals did not move)."""
    unknown = set(values) - STEP_FIELDS
    if unknown:
        raise ValueError(f"not step fields: {sorted(unknown)}")
    payloads = payloads or {}
    with transaction.atomic():
        step = Step.objects.filter(trace_id=trace_id, seq=seq).first()
        if step is not None and (_unchanged(step, values, payloads) or _goes_back(step, values)):
            return None
        event_seq = event_bump(trace_id, attempt)
        stored: set[str] = set()
        before = rollups.step_share(step) if step is not None else None
        was_open = step is None or step.status in (Step.Status.RUNNING, Step.Status.WAITING)
        if step is None:
            step = Step(trace_id=trace_id, seq=seq, started_at=started_at or timezone.now(),
                        offset_ms=max(int(offset_ms), 0))
            # The header's "Steps" counts as the timeline grows, not only when the turn ends.
            Trace.objects.filter(pk=trace_id).update(step_count=F("step_count") + 1)
        elif payloads:
            stored = set(step.payloads.values_list("kind", flat=True))
        for name, value in values.items():
            setattr(step, name, value)
        step.event_seq = event_seq
        step.save()
        moved = rollups.share_moved(trace_id=trace_id, before=before, after=rollups.step_share(step))
        step.totals_seq = moved.event_seq if moved is not None else 0
        new = []
        for kind, (content, content_type) in payloads.items():
            fields = {"content": content, "content_type": content_type, "size": len(content.encode())}
            if kind in stored:
                StepPayload.objects.filter(step=step, kind=kind).update(**fields)
            else:
                new.append(StepPayload(step=step, kind=kind, **fields))
        StepPayload.objects.bulk_create(new)
        if was_open and step.status in (Step.Status.OK, Step.Status.ERROR):
            # Its span leaves once the step is committed (traces.export), off this thread.
            transaction.on_commit(functools.partial(export_pipeline.step_finished, trace_id, seq))
    return step


def state_record(*, trace_id: int, attempt: int, iteration: int, fields: dict[str, Any],
                 changed: list[str]) -> TrajectoryState | None:
    """Create or update the trajectory state of one iteration; idempotent like ``step_record``."""
    with transaction.atomic():
        state = TrajectoryState.objects.filter(trace_id=trace_id, iteration=iteration).first()
        if state is not None and state.fields == fields and state.changed == changed:
            return None
        event_seq = event_bump(trace_id, attempt)
        if state is None:
            state = TrajectoryState(trace_id=trace_id, iteration=iteration)
        state.fields, state.changed, state.event_seq = fields, changed, event_seq
        state.save()
    return state


def step_keys(*, trace_id: int) -> dict[str, tuple[int, dict[str, Any]]]:
    """The steps already stored for the trace, by the recorder's event key: their ``seq`` and
    the values a recorder writes (so a replayed run merges onto what is there)."""
    names = sorted(STEP_FIELDS)
    found = {}
    for row in Step.objects.filter(trace_id=trace_id).values("seq", *names):
        meta = row["meta"] if isinstance(row["meta"], dict) else {}
        if meta.get("key"):
            found[str(meta["key"])] = (row["seq"], {name: row[name] for name in names})
    return found


def step_partial_save(*, trace_id: int, seq: int, text: str) -> None:
    """Keep what a model request has streamed so far with its step (empty: forget it). Not an
    event: nobody watches it live; it is what a resumed turn records of a cut-off request."""
    step_id = Step.objects.filter(trace_id=trace_id, seq=seq).values_list("pk", flat=True).first()
    if step_id is None:
        return
    if not text:
        StepPayload.objects.filter(step_id=step_id, kind=StepPayload.Kind.PARTIAL).delete()
        return
    StepPayload.objects.update_or_create(
        step_id=step_id, kind=StepPayload.Kind.PARTIAL,
        defaults={"content": text, "content_type": "text/plain", "size": len(text.encode())})


STEP_INTERRUPTED = "Interrupted: the turn ended before this step finished."


def steps_interrupt(*, trace_id: int) -> list[int]:
    """End the trace's running and waiting steps as errors (the turn ended under them); the ids
    of the steps changed. Call inside the transaction that ends the trace."""
    changed = []
    for step in Step.objects.filter(trace_id=trace_id,
                                    status__in=[Step.Status.RUNNING, Step.Status.WAITING]):
        before = rollups.step_share(step)
        step.status, step.success = Step.Status.ERROR, False
        step.error = step.error or STEP_INTERRUPTED
        step.event_seq = event_bump(trace_id)
        step.save(update_fields=["status", "success", "error", "event_seq"])
        # An interrupted model request still counts as a call in the ledger (at its cost).
        rollups.share_moved(trace_id=trace_id, before=before, after=rollups.step_share(step),
                            bump=False)
        changed.append(step.pk)
        transaction.on_commit(functools.partial(export_pipeline.step_finished, trace_id, step.seq))
    return changed


FEEDBACK_COMMENT_MAX = 2000


def feedback_set(*, trace: Trace, membership: Membership, rating: str, comment: str = "") -> Feedback | None:
    """The person's thumbs up (``"up"``) or down (``"down"``) on an answer, with an optional
    comment; ``""`` takes it back. The caller has checked they may see the trace; viewers only
    read, so they do not rate."""
    if not membership.can_chat:
        raise PermissionDenied("Your role lets you read answers, not rate them.")
    comment = (comment or "").strip()
    if len(comment) > FEEDBACK_COMMENT_MAX:
        raise ValidationError(f"The comment is {len(comment):,} characters long; the limit is "
                              f"{FEEDBACK_COMMENT_MAX:,}.")
    if rating not in ("up", "down", ""):
        raise ValidationError("Rate an answer up or down.")
    if not rating:
        Feedback.objects.filter(trace=trace, user_id=membership.user_id).delete()
        return None
    value = Feedback.Rating.UP if rating == "up" else Feedback.Rating.DOWN
    feedback, _ = Feedback.objects.update_or_create(
        trace=trace, user_id=membership.user_id,
        defaults={"team_id": trace.team_id, "rating": value, "comment": comment})
    return feedback
