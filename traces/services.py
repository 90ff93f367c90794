"""State changes of traces: claim, heartbeat, steps, close, cancel, dispatch and reap.

Every change that a live client can see bumps ``Trace.event_seq`` by one, and the row it touched
stores the new number (``traces.models``). Changes a worker makes are conditional on the trace
still being its own: ``status == running`` and ``attempts`` equal to the attempt it claimed. A
worker whose trace was reaped, or claimed again after a resumption, therefore cannot overwrite
what happened since; its writes raise ``TraceNotOwned`` and it stops.

One turn runs per conversation at a time. A trace is *dispatched* (its task sent, ``enqueued_at``
set) only when nothing else of its conversation runs; closing a trace dispatches the oldest one
still queued. Every transaction that decides this locks the conversation row first.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, F, OuterRef, Q, QuerySet
from django.utils import timezone

from agents.models import Conversation, Message
from agents.runtime.loop import INTERRUPTED_OUTPUT
from agents.runtime.messages import ToolResultBlock

from . import live, rollups
from .models import Step, StepPayload, Trace, TrajectoryState

logger = logging.getLogger(__name__)
Status = Trace.Status

TURN_TASK = "agents.turns.tasks.run_turn"
# A trace whose worker died before it recorded anything is tried this many times in all.
MAX_ATTEMPTS = 3
# A queued trace whose task was sent this long ago without being claimed is sent again (the
# broker may have lost it: the embedded Redis keeps nothing across restarts). A duplicate
# delivery is harmless: only one claim succeeds.
RESEND_AFTER_S = 120
# Extra seconds Celery's own hard limit gives after ours, for pools that enforce it.
CELERY_HARD_MARGIN_S = 15
# The hard limit of a trace whose agent was deleted: the longest any agent may have.
LONGEST_HARD_LIMIT_S = 3600 + 30

INTERRUPTED_MESSAGE = (
    "The worker running this turn stopped unexpectedly (it may have been restarted or run out "
    "of memory), so the turn was interrupted. The steps recorded so far are kept. Send your "
    "message again to retry."
)
HARD_LIMIT_MESSAGE = (
    "This turn ran past its hard time limit of {seconds} seconds and was stopped. The steps "
    "recorded so far are kept. Ask again, perhaps in smaller parts, or ask an admin to raise the "
    "agent's time limit."
)
STEP_INTERRUPTED = "Interrupted: the turn ended before this step finished."

USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_write_tokens", "cache_read_tokens",
                "reasoning_tokens")
# Step columns a recorder may write (the rest belong to the row's creation).
STEP_FIELDS = frozenset({
    "kind", "name", "iteration", "status", "success", "duration_ms", "error", "provider",
    "model", "call_id", "cost_usd", "price_id", "price_match", "meta", *USAGE_FIELDS,
})
LIVE_RELATED = ("conversation", "agent", "user", "team", "user_message")


class TraceNotOwned(Exception):  # noqa: N818 - a state, not a programming error
    """The trace is no longer the caller's to write: reaped, cancelled, or claimed again."""


# -- helpers ------------------------------------------------------------------------------------
def _owned(trace_id: int, attempt: int) -> QuerySet[Trace]:
    return Trace.objects.filter(pk=trace_id, status=Status.RUNNING, attempts=attempt)


def _bump(trace_id: int, attempt: int | None = None) -> int:
    """The trace's next event number. With ``attempt``, only while that attempt owns it.
    Call inside a transaction: the row stays locked until it commits."""
    if _update_returns_rows():
        return _bump_returning(trace_id, attempt)
    rows = _owned(trace_id, attempt) if attempt is not None else Trace.objects.filter(pk=trace_id)
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


def conversation_lock(conversation_id: int) -> None:
    # PostgreSQL: serialises the one-turn-in-flight decisions of a conversation. SQLite runs
    # every write transaction IMMEDIATE, which serialises them already (and ignores this).
    list(Conversation.objects.select_for_update().filter(pk=conversation_id).values_list("pk"))


def reason_sentence(reason: str) -> str:
    """A cancel reason ("Cancelled by alice", "interrupted by a new message") as the sentence
    shown as the trace's error."""
    text = (reason or "").strip() or "Cancelled"
    text = text[0].upper() + text[1:]
    return text if text[-1] in ".!?" else text + "."


def trace_for_live(trace_id: int) -> Trace:
    """The trace with what announcements render, so they need no query of their own."""
    return Trace.objects.select_related(*LIVE_RELATED).get(pk=trace_id)


def announce_sync(prepare: Callable[[Any], live.Announcement], obj: Any) -> None:
    """Announce from synchronous code (web requests, the reaper): render here, where queries
    are allowed, then send. Never raises."""
    try:
        groups, payload = prepare(obj)
        async_to_sync(live.publish)(groups, payload)
    except Exception:  # noqa: BLE001 - the database has the truth; clients re-sync
        logger.warning("could not announce %s", getattr(prepare, "__name__", prepare),
                       exc_info=True)


def _step_totals(trace_id: int) -> dict[str, Any]:
    return rollups.trace_totals_from_steps(trace_id)


def _duration_ms(started: datetime | None, now: datetime) -> int | None:
    return max(int((now - started).total_seconds() * 1000), 0) if started else None


# -- dispatch -----------------------------------------------------------------------------------
def turn_task_send(*, trace_id: int, hard_limit_s: int | None = None) -> None:
    """Send the turn task for ``trace_id`` to the ``turns`` queue now (use ``trace_enqueue``
    inside a transaction). Celery's time limits are set for pools that enforce them; the
    thread pool does not, and the worker enforces its own."""
    from agentsite.celery import app

    options: dict[str, Any] = {}
    if hard_limit_s:
        options = {"soft_time_limit": hard_limit_s,
                   "time_limit": hard_limit_s + CELERY_HARD_MARGIN_S}
    app.send_task(TURN_TASK, args=[trace_id], queue="turns", routing_key="turns", **options)


def trace_enqueue(*, trace: Trace, now: datetime | None = None) -> None:
    """Mark ``trace`` dispatched and send its task once the current transaction commits."""
    now = now or timezone.now()
    Trace.objects.filter(pk=trace.pk).update(enqueued_at=now)
    trace.enqueued_at = now
    hard = trace.agent.hard_time_limit_s if trace.agent_id and trace.agent else None
    trace_id = trace.pk
    transaction.on_commit(lambda: turn_task_send(trace_id=trace_id, hard_limit_s=hard))


def _dispatch_next(conversation_id: int, now: datetime) -> Trace | None:
    """Dispatch the conversation's oldest queued trace when nothing of it runs. Call inside a
    transaction that holds the conversation's lock."""
    if Trace.objects.filter(conversation_id=conversation_id, status=Status.RUNNING).exists():
        return None
    following = (Trace.objects.filter(conversation_id=conversation_id, status=Status.QUEUED)
                 .select_related("agent").order_by("created_at", "id").first())
    if following is not None:
        trace_enqueue(trace=following, now=now)
    return following


# -- the worker's side --------------------------------------------------------------------------
def trace_claim(*, trace_id: int, worker: str, now: datetime | None = None) -> Trace | None:
    """``queued -> running`` for one worker. None when there is nothing to claim: the trace is
    gone, already claimed (a second delivery), ended, or an earlier turn of its conversation
    is still queued or running."""
    now = now or timezone.now()
    with transaction.atomic():
        conversation_id = (Trace.objects.filter(pk=trace_id)
                           .values_list("conversation_id", flat=True).first())
        if conversation_id is None:
            return None
        conversation_lock(conversation_id)
        # Turns of a conversation run one at a time, in the order they were sent.
        ahead = Trace.objects.filter(
            Q(status=Status.RUNNING) | Q(status=Status.QUEUED, pk__lt=OuterRef("pk")),
            conversation_id=OuterRef("conversation_id"))
        claimed = (Trace.objects.filter(pk=trace_id, status=Status.QUEUED)
                   .filter(~Exists(ahead))
                   .update(status=Status.RUNNING, attempts=F("attempts") + 1, started_at=now,
                           heartbeat_at=now, worker=worker[:200], error="", error_kind="",
                           event_seq=F("event_seq") + 1))
        if not claimed:
            return None
    return Trace.objects.select_related(*LIVE_RELATED).get(pk=trace_id)


@dataclass(frozen=True)
class Heartbeat:
    owned: bool
    cancel_reason: str | None = None


def trace_heartbeat(*, trace_id: int, attempt: int, now: datetime | None = None) -> Heartbeat:
    """Renew the heartbeat; also reports a cancel request (the fallback to the Redis signal)."""
    if not _owned(trace_id, attempt).update(heartbeat_at=now or timezone.now()):
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
        _bump(trace_id, attempt)
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
        _bump(trace_id, attempt)
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
        event_seq = _bump(trace_id, attempt)
        stored: set[str] = set()
        before = rollups.step_share(step) if step is not None else None
        if step is None:
            step = Step(trace_id=trace_id, seq=seq, started_at=started_at or timezone.now(),
                        offset_ms=max(int(offset_ms), 0))
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
    return step


def state_record(*, trace_id: int, attempt: int, iteration: int, fields: dict[str, Any],
                 changed: list[str]) -> TrajectoryState | None:
    """Create or update the trajectory state of one iteration; idempotent like ``step_record``."""
    with transaction.atomic():
        state = TrajectoryState.objects.filter(trace_id=trace_id, iteration=iteration).first()
        if state is not None and state.fields == fields and state.changed == changed:
            return None
        event_seq = _bump(trace_id, attempt)
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


@dataclass
class NewMessage:
    role: str
    blocks: list[dict[str, Any]]
    text: str = ""
    usage: dict[str, Any] | None = None


@dataclass
class TurnOutcome:
    status: str
    error: str = ""
    error_kind: str = ""
    answer: str = ""
    iterations: int = 0
    messages: list[NewMessage] = field(default_factory=list)


@dataclass
class ClosedTurn:
    trace: Trace
    messages: list[Message]
    dispatched: Trace | None


def trace_close(*, trace_id: int, attempt: int, outcome: TurnOutcome,
                now: datetime | None = None) -> ClosedTurn | None:
    """End a running trace: totals from its steps, the turn's messages, the final state; then
    dispatch the conversation's next queued trace. None when the attempt no longer owns it."""
    now = now or timezone.now()
    with transaction.atomic():
        row = Trace.objects.filter(pk=trace_id).values("conversation_id", "started_at").first()
        if row is None:
            return None
        conversation_lock(row["conversation_id"])
        totals = _step_totals(trace_id)
        closed = _owned(trace_id, attempt).update(
            status=outcome.status, error=outcome.error, error_kind=outcome.error_kind[:32],
            answer=outcome.answer, iterations=outcome.iterations, finished_at=now,
            duration_ms=_duration_ms(row["started_at"], now), event_seq=F("event_seq") + 1,
            **totals)
        if not closed:
            return None
        messages = Message.objects.bulk_create([
            Message(conversation_id=row["conversation_id"], role=m.role, blocks=m.blocks,
                    text=m.text, usage=m.usage, trace_id=trace_id)
            for m in outcome.messages
        ])
        Conversation.objects.filter(pk=row["conversation_id"]).update(updated_at=now)
        dispatched = _dispatch_next(row["conversation_id"], now)
    trace = trace_for_live(trace_id)
    for message in messages:
        message.conversation = trace.conversation
        message.trace = trace
    return ClosedTurn(trace, messages, dispatched)


# -- the user's side ----------------------------------------------------------------------------
def trace_cancel_queued(*, trace: Trace, reason: str, now: datetime | None = None) -> bool:
    """End a trace that has not started as ``cancelled`` at once; False if it has started."""
    now = now or timezone.now()
    with transaction.atomic():
        conversation_lock(trace.conversation_id)
        ended = Trace.objects.filter(pk=trace.pk, status=Status.QUEUED).update(
            status=Status.CANCELLED, cancel_requested_at=now, cancel_reason=reason[:200],
            error=reason_sentence(reason), error_kind="cancelled", finished_at=now,
            event_seq=F("event_seq") + 1)
        if ended:
            _dispatch_next(trace.conversation_id, now)
            trace_id = trace.pk
            transaction.on_commit(
                lambda: announce_sync(live.trace_announcement, trace_for_live(trace_id)))
    return bool(ended)


def trace_request_cancel(*, trace: Trace, reason: str, now: datetime | None = None) -> bool:
    """Ask the worker running ``trace`` to stop: the database flag (seen on its heartbeat) and,
    after commit, the Redis signal (seen within a fraction of a second)."""
    from agents.turns.signals import cancel_signal_send

    updated = Trace.objects.filter(pk=trace.pk, status=Status.RUNNING).update(
        cancel_requested_at=now or timezone.now(), cancel_reason=reason[:200])
    if updated:
        uuid = trace.uuid
        transaction.on_commit(lambda: cancel_signal_send(trace_uuid=uuid, reason=reason))
    return bool(updated)


# -- the reaper ---------------------------------------------------------------------------------
@dataclass
class ReapReport:
    interrupted: list[int] = field(default_factory=list)
    timed_out: list[int] = field(default_factory=list)
    requeued: list[int] = field(default_factory=list)
    dispatched: list[int] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.interrupted or self.timed_out or self.requeued or self.dispatched)


def trace_reap(*, now: datetime | None = None, stale_after_s: float | None = None) -> ReapReport:
    """Settle traces nobody is running any more, so none stays ``running`` after its worker
    died: a stale heartbeat ends the trace ``interrupted`` (or re-queues it when it died before
    recording any step, up to ``MAX_ATTEMPTS``), a run past the agent's hard limit ends it
    ``timed_out``; and queued traces that should run but were never sent are sent."""
    now = now or timezone.now()
    stale_before = now - timedelta(seconds=stale_after_s if stale_after_s is not None
                                   else settings.TURN_STALE_AFTER_S)
    report = ReapReport()
    running = Trace.objects.filter(status=Status.RUNNING).select_related("agent").only(
        "id", "conversation_id", "attempts", "started_at", "heartbeat_at", "agent__turn_time_limit_s")
    for trace in running:
        hard = trace.agent.hard_time_limit_s if trace.agent else LONGEST_HARD_LIMIT_S
        if trace.started_at and trace.started_at < now - timedelta(seconds=hard):
            if _reap_one(trace, status=Status.TIMED_OUT, error_kind="hard_time_limit",
                         message=HARD_LIMIT_MESSAGE.format(seconds=hard), now=now):
                report.timed_out.append(trace.pk)
        elif trace.heartbeat_at is None or trace.heartbeat_at < stale_before:
            if (trace.attempts < MAX_ATTEMPTS
                    and not Step.objects.filter(trace_id=trace.pk).exists()):
                if _requeue(trace, stale_before=stale_before, now=now):
                    report.requeued.append(trace.pk)
            elif _reap_one(trace, status=Status.INTERRUPTED, error_kind="worker_lost",
                           message=INTERRUPTED_MESSAGE, now=now, stale_before=stale_before):
                report.interrupted.append(trace.pk)
    report.dispatched = _dispatch_waiting(now)
    if report:
        logger.info("reaper: %s", report)
    return report


def _reap_one(trace: Trace, *, status: str, error_kind: str, message: str, now: datetime,
              stale_before: datetime | None = None) -> bool:
    changed_steps: list[int] = []
    with transaction.atomic():
        conversation_lock(trace.conversation_id)
        rows = Trace.objects.filter(pk=trace.pk, status=Status.RUNNING, attempts=trace.attempts)
        if stale_before is not None:  # a heartbeat that arrived meanwhile wins
            rows = rows.filter(Q(heartbeat_at__isnull=True) | Q(heartbeat_at__lt=stale_before))
        if not rows.select_for_update().exists():
            return False
        for step in Step.objects.filter(trace_id=trace.pk,
                                        status__in=[Step.Status.RUNNING, Step.Status.WAITING]):
            before = rollups.step_share(step)
            step.status, step.success = Step.Status.ERROR, False
            step.error = step.error or STEP_INTERRUPTED
            step.event_seq = _bump(trace.pk)
            step.save(update_fields=["status", "success", "error", "event_seq"])
            # An interrupted model request still counts as a call in the ledger (at its cost).
            rollups.share_moved(trace_id=trace.pk, before=before, after=rollups.step_share(step),
                                bump=False)
            changed_steps.append(step.pk)
        _close_dangling_tool_uses(trace)
        rows.update(status=status, error=message, error_kind=error_kind, finished_at=now,
                    duration_ms=_duration_ms(trace.started_at, now),
                    event_seq=F("event_seq") + 1, **_step_totals(trace.pk))
        _dispatch_next(trace.conversation_id, now)
    fresh = trace_for_live(trace.pk)
    for step in Step.objects.filter(pk__in=changed_steps):
        step.trace = fresh
        announce_sync(live.step_announcement, step)
    announce_sync(live.trace_announcement, fresh)
    return True


def _requeue(trace: Trace, *, stale_before: datetime, now: datetime) -> bool:
    with transaction.atomic():
        conversation_lock(trace.conversation_id)
        requeued = (Trace.objects.filter(pk=trace.pk, status=Status.RUNNING, attempts=trace.attempts)
                    .filter(Q(heartbeat_at__isnull=True) | Q(heartbeat_at__lt=stale_before))
                    .update(status=Status.QUEUED, worker="", heartbeat_at=None,
                            event_seq=F("event_seq") + 1))
        if requeued:
            trace_enqueue(trace=Trace.objects.select_related("agent").get(pk=trace.pk), now=now)
    if requeued:
        announce_sync(live.trace_announcement, trace_for_live(trace.pk))
    return bool(requeued)


def _dispatch_waiting(now: datetime) -> list[int]:
    """Send the next queued trace of every conversation where nothing runs and that trace was
    never sent (its predecessor's worker died before dispatching it) or was sent long ago."""
    resend_before = now - timedelta(seconds=RESEND_AFTER_S)
    conversations = set(Trace.objects.filter(status=Status.QUEUED)
                        .values_list("conversation_id", flat=True).distinct())
    sent = []
    for conversation_id in sorted(conversations):
        with transaction.atomic():
            conversation_lock(conversation_id)
            if Trace.objects.filter(conversation_id=conversation_id, status=Status.RUNNING).exists():
                continue
            following = (Trace.objects.filter(conversation_id=conversation_id, status=Status.QUEUED)
                         .select_related("agent").order_by("created_at", "id").first())
            if following is None:
                continue
            if following.enqueued_at is None or following.enqueued_at < resend_before:
                trace_enqueue(trace=following, now=now)
                sent.append(following.pk)
    return sent


def _close_dangling_tool_uses(trace: Trace) -> int:
    """Answer every tool call in the trace's stored messages that has no result, so the
    conversation's history stays valid for the next turn."""
    rows = list(Message.objects.filter(trace_id=trace.pk).order_by("id"))
    added = 0
    for index, row in enumerate(rows):
        uses = _blocks_of(row, "tool_use") if row.role == Message.Role.ASSISTANT else []
        if not uses:
            continue
        following = rows[index + 1] if index + 1 < len(rows) else None
        answered_by = following if following is not None and following.role == Message.Role.TOOL else None
        answered = {b.get("tool_use_id") for b in _blocks_of(answered_by, "tool_result")} if answered_by else set()
        missing = [ToolResultBlock(str(u.get("id", "")), INTERRUPTED_OUTPUT, True,
                                   str(u.get("name", ""))).to_dict()
                   for u in uses if u.get("id") not in answered]
        if not missing:
            continue
        added += len(missing)
        if answered_by is not None:
            answered_by.blocks = [*answered_by.blocks, *missing]
            answered_by.save(update_fields=["blocks"])
        else:
            Message.objects.create(conversation_id=row.conversation_id, role=Message.Role.TOOL,
                                   blocks=missing, trace_id=trace.pk)
    return added


def _blocks_of(row: Message | None, kind: str) -> Iterable[dict[str, Any]]:
    if row is None or not isinstance(row.blocks, list):
        return []
    return [b for b in row.blocks if isinstance(b, dict) and b.get("type") == kind]
