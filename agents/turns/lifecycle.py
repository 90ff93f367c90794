"""A turn's life around its trace: dispatch (one turn per conversation at a time), the worker's
claim, the close that stores the turn's messages, and a person's cancel.

One turn runs per conversation at a time. A trace is *dispatched* (its task sent, ``enqueued_at``
set) only when nothing else of its conversation runs; closing a trace dispatches the oldest one
still queued. Every transaction that decides this locks the conversation row first.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import redis
from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, OuterRef, Q, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils import timezone
from kombu.exceptions import OperationalError

from agents.models import Conversation, Message
from agents.turns.announce import announcements
from agents.turns.quotas import turn_settle
from agents.turns.signals import cancel_signal_send, ended_signal_send
from agents.turns.turn_threads import CONNECTION_LOST_REASON
from agentsite.celery import SentTask, app
from agentsite.db import commit_durably
from agentsite.db.prepared import Prepared
from agentsite.db.returning import insert, update_returning
from agentsite.models import Membership
from traces.costs.rollups import TOTAL_FIELDS
from traces.export import pipeline as export_pipeline
from traces.models import Trace
from traces.record.live import announce_sync
from traces.record.services import (
    duration_ms,
    owned_where,
    reason_sentence,
    steps_interrupt,
    trace_for_live,
)

logger = logging.getLogger(__name__)
Status = Trace.Status

TURN_TASK = "agents.turns.tasks.turn_run"
# What a claimed trace is read with (its agent and provider come with the team's configuration,
# ``agents.team_config``).
CLAIM_RELATED = ("conversation", "user_message")
# Extra seconds Celery's own hard limit gives after ours, for pools that enforce it.
CELERY_HARD_MARGIN_S = 15


def _row_locks() -> bool:
    # PostgreSQL: SELECT ... FOR UPDATE serialises the one-turn-in-flight decisions of a
    # conversation. SQLite runs every write transaction IMMEDIATE, which serialises them already
    # (it has no row locks), so the query would only cost a round trip.
    return connection.features.has_select_for_update


def conversation_lock(conversation_id: int) -> None:
    if _row_locks():
        _in_transaction()
        _conversation_locked_read(conversation_id)


def trace_conversation_lock(trace_id: int) -> int | None:
    """Lock the conversation of trace ``trace_id`` (``conversation_lock``) and return its id;
    None when the trace is gone. Call inside a transaction. One query."""
    if _row_locks():
        _in_transaction()
        return _trace_conversation_locked_read.first(trace_id)
    return Trace.objects.filter(pk=trace_id).values_list("conversation_id", flat=True).first()


def _in_transaction() -> None:
    # The ORM says so when it compiles a locking read; a prepared one is compiled only once.
    if connection.get_autocommit():
        raise transaction.TransactionManagementError("select_for_update cannot be used outside of a transaction.")


def _conversation_locked(conversation_id: int) -> QuerySet:
    return Conversation.objects.select_for_update().filter(pk=conversation_id).values_list("pk")


def _trace_conversation_locked(trace_id: int) -> QuerySet:
    return (Conversation.objects.select_for_update(of=("self",)).filter(traces__id=trace_id)
            .values_list("pk", flat=True).order_by("pk"))


# Every claim and close takes them (PostgreSQL): compiled once per process.
_conversation_locked_read = Prepared(_conversation_locked)
_trace_conversation_locked_read = Prepared(_trace_conversation_locked)


def _claim(trace_id: int, *, worker: str, now: datetime) -> bool:
    """``queued -> running`` unless an earlier turn of the conversation is queued or running
    (turns of a conversation run one at a time, in the order they were sent). A resumed trace
    keeps its first start: time limits and offsets count from it. One statement, written out:
    the hottest write of a claim, which the ORM took a millisecond to build (its subquery)."""
    table = connection.ops.quote_name(Trace._meta.db_table)
    at = connection.ops.adapt_datetimefield_value(now)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET status = %s, attempts = attempts + 1, "  # noqa: S608 - the model's table, values as parameters
            f"started_at = COALESCE(started_at, %s), heartbeat_at = %s, worker = %s, error = '', "
            f"error_kind = '', event_seq = event_seq + 1 WHERE id = %s AND status = %s AND NOT EXISTS "
            f"(SELECT 1 FROM {table} ahead WHERE ahead.conversation_id = {table}.conversation_id "
            f"AND (ahead.status = %s OR (ahead.status = %s AND ahead.id < {table}.id)))",
            [Status.RUNNING.value, at, at, worker, trace_id, Status.QUEUED.value,
             Status.RUNNING.value, Status.QUEUED.value])
        return cursor.rowcount == 1


# -- dispatch -----------------------------------------------------------------------------------
# What a send to a broker that is down raises (kombu wraps most of them in OperationalError).
BROKER_ERRORS = (OperationalError, redis.RedisError, OSError)
# One attempt. A broker that is down then fails the send at once (a hung one after its socket
# timeout, BROKER_SOCKET_TIMEOUT_S) instead of after Celery's retries or kombu's reconnect loop
# (``retry=False`` still runs that loop: seconds); a pooled connection that a Redis restart left
# dead is reconnected by the attempt itself. The reaper sends what could not be sent.
SEND_RETRY_POLICY = {"max_retries": 0}


def turn_task_send(*, trace_id: int, hard_limit_s: int | None = None) -> bool:
    """Send the turn task for ``trace_id`` to the ``turns`` queue now (use ``trace_enqueue``
    inside a transaction); False, logged, when the broker cannot be reached. Celery's time
    limits are set for pools that enforce them; the thread pool does not, and the worker
    enforces its own."""
    options: dict[str, Any] = {}
    if hard_limit_s:
        options = {"soft_time_limit": hard_limit_s,
                   "time_limit": hard_limit_s + CELERY_HARD_MARGIN_S}
    try:
        # A turn's result is its trace: none kept, and none asked for (``SentTask``).
        app.send_task(TURN_TASK, args=[trace_id], queue="turns", routing_key="turns",
                      ignore_result=True, result_cls=SentTask, add_to_parent=False,
                      retry=True, retry_policy=SEND_RETRY_POLICY, **options)
    except BROKER_ERRORS as exc:
        logger.warning("could not send the turn task of trace %s, the broker is unreachable (%s); "
                       "it stays queued and the reaper sends it once the broker answers",
                       trace_id, exc)
        return False
    return True


def trace_task_send(*, trace_id: int, enqueued_at: datetime, hard_limit_s: int | None = None) -> bool:
    """``turn_task_send``, and when the broker cannot be reached, mark the trace as not sent
    (``enqueued_at`` None, unless a later dispatch marked it since), so that the reaper sends it
    on its next run that finds the broker back."""
    if turn_task_send(trace_id=trace_id, hard_limit_s=hard_limit_s):
        return True
    Trace.objects.filter(pk=trace_id, status=Status.QUEUED, enqueued_at=enqueued_at).update(
        enqueued_at=None)
    return False


def trace_enqueue(*, trace: Trace, now: datetime | None = None, marked: bool = False) -> None:
    """Mark ``trace`` dispatched and send its task once the current transaction commits. A
    broker that is down does not fail the transaction's caller: the trace stays queued, not
    dispatched, for the reaper to send. ``marked``: the trace was stored dispatched already
    (``enqueued_at`` is ``now``)."""
    now = now or timezone.now()
    if not marked:
        Trace.objects.filter(pk=trace.pk).update(enqueued_at=now)
    trace.enqueued_at = now
    hard = trace.agent.hard_time_limit_s if trace.agent_id and trace.agent else None
    trace_id = trace.pk
    transaction.on_commit(
        lambda: trace_task_send(trace_id=trace_id, enqueued_at=now, hard_limit_s=hard))


def next_queued(conversation_id: int) -> Trace | None:
    """The conversation's trace that runs next: its oldest queued one, when nothing of it runs.
    Call inside a transaction that holds the conversation's lock."""
    waiting = _active_of_conversation(conversation_id)
    queued = [pk for pk, status in waiting if status == Status.QUEUED]
    if not queued or len(queued) < len(waiting):  # none waits, or one runs
        return None
    return _with_agent.get(queued[0])


_active_of_conversation = Prepared(
    lambda conversation_id: Trace.objects.filter(conversation_id=conversation_id, status__in=Trace.ACTIVE)
    .values_list("pk", "status").order_by("created_at", "id"))
_with_agent = Prepared(lambda trace_id: Trace.objects.select_related("agent").filter(pk=trace_id))


def dispatch_next(conversation_id: int, now: datetime) -> Trace | None:
    """Dispatch the conversation's next trace (``next_queued``), if any."""
    following = next_queued(conversation_id)
    if following is not None:
        trace_enqueue(trace=following, now=now)
    return following


def trace_claim(*, trace_id: int, worker: str, now: datetime | None = None) -> Trace | None:
    """``queued -> running`` for one worker. None when there is nothing to claim: the trace is
    gone, already claimed (a second delivery), ended, or an earlier turn of its conversation
    is still queued or running."""
    now = now or timezone.now()
    with transaction.atomic():
        if _row_locks() and trace_conversation_lock(trace_id) is None:
            return None
        if not _claim(trace_id, worker=worker[:200], now=now):
            return None
    # What the turn runs with, in one query: its conversation and message, and its person's
    # role in the team (its setup and its announcements need no query of their own for them).
    return _claimed.get(trace_id)


def claimed_rows() -> QuerySet[Trace]:
    """Traces as a claimed turn reads its own: with its conversation and message, and
    ``member_role``, its person's role in the team (None when they have none)."""
    role = Membership.objects.filter(team_id=OuterRef("team_id"), user_id=OuterRef("user_id")).values("role")
    return Trace.objects.select_related(*CLAIM_RELATED).annotate(member_role=Subquery(role[:1]))


_claimed = Prepared(lambda trace_id: claimed_rows().filter(pk=trace_id))


# Why a turn may be handed back without it counting against ``TURN_MAX_RESUMES``: its worker
# shut down (SIGTERM), its database connection was dropped. Only a worker that died under it
# (``worker_lost``) may be the turn's own doing.
EXCUSED_HAND_BACKS = frozenset({"handoff", CONNECTION_LOST_REASON})


def may_resume(*, attempts: int, meta: dict[str, Any] | None) -> bool:
    """Whether a turn on its ``attempts``-th attempt may be resumed once more: fewer than
    ``TURN_MAX_RESUMES`` resumptions after a lost worker, and ``TURN_MAX_ATTEMPTS`` in all."""
    excused = int((meta or {}).get("excused_resumes") or 0)
    return (attempts - excused <= settings.TURN_MAX_RESUMES
            and attempts < settings.TURN_MAX_ATTEMPTS)


def trace_hand_back(*, trace_id: int, attempt: int, reason: str, last_seen: datetime | None = None,
                    only: Q | None = None, now: datetime | None = None) -> bool:
    """``running -> queued`` for a trace whose worker died (``reason`` "worker_lost") or is
    shutting down ("handoff"), so that whichever worker claims it next continues it from its
    last recorded step (``agents.turns.resume``). Only while attempt ``attempt`` holds it (and
    ``only`` matches, e.g. a heartbeat that is still stale). ``last_seen``: the last sign of
    life of the worker that ran it, for the resumption's step ("resumed after N s")."""
    now = now or timezone.now()
    with transaction.atomic():
        commit_durably()
        if trace_conversation_lock(trace_id) is None:
            return False
        rows = Trace.objects.filter(pk=trace_id, status=Status.RUNNING, attempts=attempt)
        if only is not None:
            rows = rows.filter(only)
        trace = rows.select_for_update(of=("self",)).select_related("agent").first()
        if trace is None:
            return False
        meta = dict(trace.meta or {})
        meta["resume"] = {"reason": reason, "from_worker": trace.worker,
                          "last_seen": (last_seen or now).isoformat(), "handed_back_at": now.isoformat()}
        if reason in EXCUSED_HAND_BACKS:
            meta["excused_resumes"] = int(meta.get("excused_resumes") or 0) + 1
        rows.update(status=Status.QUEUED, worker="", heartbeat_at=None, meta=meta,
                    event_seq=F("event_seq") + 1)
        trace_enqueue(trace=trace, now=now)
        transaction.on_commit(lambda: announce_sync(announcements().trace, trace_for_live(trace_id)))
    return True


@dataclass
class NewMessage:
    role: str
    blocks: list[dict[str, Any]]
    text: str = ""
    usage: dict[str, Any] | None = None
    outcome: str = ""  # Message.Outcome: how an assistant answer ended, when not whole


@dataclass
class TurnOutcome:
    status: str
    error: str = ""
    error_kind: str = ""
    answer: str = ""
    iterations: int = 0
    messages: list[NewMessage] = field(default_factory=list)
    # When the stop that ended the turn fell due, if nobody asked for it (a time limit): stored
    # as the trace's ``cancel_requested_at`` unless a person's cancel came first.
    stop_requested_at: datetime | None = None


@dataclass
class ClosedTurn:
    trace: Trace
    messages: list[Message]
    dispatched: Trace | None


# What closing a trace changes of it (with its totals), for a caller that holds the trace.
CLOSED_FIELDS = ("status", "error", "error_kind", "answer", "iterations", "finished_at",
                 "duration_ms", "event_seq", "cancel_requested_at", *TOTAL_FIELDS)


def trace_close(*, trace_id: int, attempt: int, outcome: TurnOutcome,
                now: datetime | None = None, trace: Trace | None = None,
                open_steps: bool | None = None) -> ClosedTurn | None:
    """End a running trace: the turn's messages, the final state, and any step still running
    or waiting ended as interrupted (a finished trace holds no running step); then dispatch
    the conversation's next queued trace. None when the attempt no longer owns it. ``trace``:
    the caller's copy of the trace (with what announcements read), brought up to date; read
    here otherwise. ``open_steps``: whether the caller knows of steps left open (False spares
    looking for them; None: they are looked for)."""
    now = now or timezone.now()
    with transaction.atomic():
        commit_durably()  # what the turn answered, and every step before it, is on disk first
        if trace is not None:
            row = {"conversation_id": trace.conversation_id, "started_at": trace.started_at, "team_id": trace.team_id,
                   "ephemeral": (trace.conversation.ephemeral
                                 if Trace.conversation.is_cached(trace) else False)}
        else:
            row = Trace.objects.filter(pk=trace_id).values(
                "conversation_id", "started_at", "team_id", ephemeral=F("conversation__ephemeral")).first()
            if row is None:
                return None
        conversation_lock(row["conversation_id"])
        # The totals are the trace's own: every step's write moved them with the ledger.
        extra: dict[str, Any] = {}
        if outcome.stop_requested_at is not None:
            extra["cancel_requested_at"] = Coalesce(F("cancel_requested_at"),
                                                    Value(outcome.stop_requested_at))
        # What the trace is once closed comes back from the same statement.
        closed = update_returning(Trace, owned_where(trace_id, attempt), {
            "status": outcome.status, "error": outcome.error, "error_kind": outcome.error_kind[:32],
            "answer": outcome.answer, "iterations": outcome.iterations, "finished_at": now,
            "duration_ms": duration_ms(row["started_at"], now), "event_seq": F("event_seq") + 1,
            **extra}, CLOSED_FIELDS)
        if closed is None:
            return None
        if (open_steps is None or open_steps) and steps_interrupt(trace_id=trace_id):
            closed = None  # their ends moved the trace's event number and totals: read it again
        export_pipeline.turn_owed(trace_id, row["team_id"])
        messages = [Message(conversation_id=row["conversation_id"], role=m.role, blocks=m.blocks,
                            text=m.text, usage=m.usage, outcome=m.outcome, trace_id=trace_id)
                    for m in outcome.messages]
        if len(messages) == 1:  # a plain answer: the insert compiled once
            insert(messages[0])
        elif messages:
            Message.objects.bulk_create(messages)
        if not row["ephemeral"]:  # a stateless request's conversation is listed nowhere
            Conversation.objects.filter(pk=row["conversation_id"]).update(updated_at=now)
        dispatched = dispatch_next(row["conversation_id"], now)
        if trace is not None:
            if closed is None:
                closed = Trace.objects.filter(pk=trace_id).values(*CLOSED_FIELDS).get()
            for name, value in closed.items():
                setattr(trace, name, value)
    if trace is None:
        trace = trace_for_live(trace_id)
    if trace.api_key_id:  # a request through the API may be waiting for this answer
        ended_signal_send(trace_uuid=trace.uuid)
    if trace.quota_keys:
        turn_settle(scopes=trace.quota_keys, request_id=trace.uuid.hex, tokens=trace.total_tokens)
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
            dispatch_next(trace.conversation_id, now)
            if trace.api_key_id:
                transaction.on_commit(functools.partial(ended_signal_send, trace_uuid=trace.uuid))
            export_pipeline.turn_owed(trace.pk, trace.team_id)
            if trace.quota_keys:
                turn_settle(scopes=trace.quota_keys, request_id=trace.uuid.hex, tokens=0)
            trace_id = trace.pk
            transaction.on_commit(
                lambda: announce_sync(announcements().trace, trace_for_live(trace_id)))
    return bool(ended)


def trace_request_cancel(*, trace: Trace, reason: str, now: datetime | None = None) -> bool:
    """Ask the worker running ``trace`` to stop: the database flag (seen on its heartbeat) and,
    after commit, the Redis signal (seen within a fraction of a second)."""
    updated = Trace.objects.filter(pk=trace.pk, status=Status.RUNNING).update(
        cancel_requested_at=now or timezone.now(), cancel_reason=reason[:200])
    if updated:
        uuid = trace.uuid
        transaction.on_commit(lambda: cancel_signal_send(trace_uuid=uuid, reason=reason))
    return bool(updated)
