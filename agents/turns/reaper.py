"""The reaper: settles traces nobody runs any more, so none stays ``running`` after its worker
died, and sends queued traces nobody sent. Every worker process runs it every
``TURN_REAPER_INTERVAL_S`` (``agents.turns.workers``); beat runs it too, as a backstop."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from urllib.parse import urlsplit

import redis
from django.conf import settings
from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q, QuerySet, Subquery
from django.utils import timezone

from agents.models import Message, TurnWorker
from agents.runtime.loop import INTERRUPTED_OUTPUT, close_dangling_tool_uses
from agents.runtime.messages import Message as RuntimeMessage
from agents.turns.announce import announcements
from agents.turns.lifecycle import (
    conversation_lock,
    dispatch_next,
    may_resume,
    next_queued,
    trace_enqueue,
    trace_hand_back,
)
from agents.turns.resume import requests_end_cut_off
from agents.turns.signals import ended_signal_send
from agentsite.celery import app
from traces.export import pipeline as export_pipeline
from traces.models import Step, Trace
from traces.record.live import announce_sync
from traces.record.services import (
    STEP_INTERRUPTED,
    duration_ms,
    step_totals,
    steps_interrupt,
    trace_for_live,
)

logger = logging.getLogger(__name__)
Status = Trace.Status

# A queued trace whose task was sent this long ago without being claimed is sent again (the
# broker may have lost it: the embedded Redis keeps nothing across restarts). A duplicate
# delivery is harmless: only one claim succeeds.
RESEND_AFTER_S = 120
# A queued trace sent before the broker lost its tasks is sent again at once: one sent before
# Redis lost its data (``broker_look``: the embedded Redis keeps nothing across a restart), and,
# while the ``turns`` queue is empty, one sent more than LOST_AFTER_S ago (a task in the queue is
# taken within milliseconds, so one that is neither there nor claimed by then was lost).
LOST_AFTER_S = 5
# Set in the broker's Redis when a reaper finds it missing: the time since which Redis holds
# what was sent to it.
EPOCH_KEY = "agentsite:broker-epoch"
# The hard limit of a trace whose agent was deleted: the longest any agent may have; and the
# shortest any may have (``Agent.turn_time_limit_s`` is at least 5 s).
LONGEST_HARD_LIMIT_S = 3600 + 30
SHORTEST_HARD_LIMIT_S = 5 + 30

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



@dataclass
class ReapReport:
    interrupted: list[int] = field(default_factory=list)
    timed_out: list[int] = field(default_factory=list)
    requeued: list[int] = field(default_factory=list)
    dispatched: list[int] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.interrupted or self.timed_out or self.requeued or self.dispatched)


@dataclass(frozen=True)
class Silence:
    """When a running trace counts as lost, as of some moment: its worker stopped beating
    (``TurnWorker.beat_at`` before ``dead_before``), or its own heartbeat stopped (before
    ``stale_before``: a turn whose thread hangs in a live worker). A worker without a row (one
    of an earlier release during an upgrade, or one whose row could not be written) is judged
    by its turns' heartbeats alone, dead after about two missed (``unknown_before``)."""

    stale_before: datetime
    dead_before: datetime
    unknown_before: datetime

    @classmethod
    def at(cls, now: datetime, *, stale_after_s: float | None = None,
           dead_after_s: float | None = None) -> Silence:
        stale = stale_after_s if stale_after_s is not None else settings.TURN_STALE_AFTER_S
        dead = dead_after_s if dead_after_s is not None else settings.TURN_WORKER_DEAD_AFTER_S
        return cls(stale_before=now - timedelta(seconds=stale),
                   dead_before=now - timedelta(seconds=dead),
                   unknown_before=now - timedelta(seconds=dead + settings.TURN_HEARTBEAT_S))

    def lost(self) -> Q:
        """The running traces this silence covers, as a condition on ``Trace``: the reaper's
        query, and the guard of its hand-back (a worker that beats again meanwhile wins)."""
        workers = TurnWorker.objects.filter(name=OuterRef("worker"))
        return (Q(heartbeat_at__isnull=True) | Q(heartbeat_at__lt=self.stale_before)
                | Exists(workers.filter(beat_at__lt=self.dead_before))
                | (~Exists(workers) & Q(heartbeat_at__lt=self.unknown_before)))

    def last_seen(self, trace: Trace) -> datetime | None:
        """The last sign of life of a lost trace (``worker_beat``: its worker's, annotated by
        ``traces_lost``), or None when it is not lost."""
        beat, heartbeat = getattr(trace, "worker_beat", None), trace.heartbeat_at
        if beat is not None and beat < self.dead_before:
            return beat
        if heartbeat is None or heartbeat < self.stale_before:
            return heartbeat or trace.started_at
        if beat is None and heartbeat < self.unknown_before:
            return heartbeat
        return None


def traces_lost(silence: Silence) -> QuerySet[Trace]:
    """Running traces that ``silence`` covers, each with its worker's last beat (``worker_beat``,
    None when the worker has no row)."""
    return (Trace.objects.filter(status=Status.RUNNING).filter(silence.lost())
            .annotate(worker_beat=_worker_beat()))


def _worker_beat() -> Subquery:
    return Subquery(TurnWorker.objects.filter(name=OuterRef("worker")).values("beat_at")[:1])


def trace_reap(*, now: datetime | None = None, stale_after_s: float | None = None,
               dead_after_s: float | None = None) -> ReapReport:
    """Settle traces nobody is running any more, so none stays ``running`` after its worker
    died: a trace whose worker stopped beating (or whose own heartbeat went stale) is handed
    back to be resumed from its last recorded step (up to ``TURN_MAX_RESUMES`` times, then it
    ends ``interrupted``), a run past the agent's hard limit ends ``timed_out``; and queued
    traces that should run but were never sent are sent. One query finds the running traces
    when none needs settling."""
    now = now or timezone.now()
    silence = Silence.at(now, stale_after_s=stale_after_s, dead_after_s=dead_after_s)
    report = ReapReport()
    # The hard limit is per agent: the query takes every trace past the shortest one, and the
    # exact limit is checked here.
    candidates = (Trace.objects.filter(status=Status.RUNNING)
                  .filter(silence.lost() | Q(started_at__lt=now - timedelta(seconds=SHORTEST_HARD_LIMIT_S)))
                  .annotate(worker_beat=_worker_beat()).select_related("agent")
                  .only("id", "conversation_id", "attempts", "meta", "worker", "started_at",
                        "heartbeat_at", "agent__turn_time_limit_s"))
    for trace in candidates:
        hard = trace.agent.hard_time_limit_s if trace.agent else LONGEST_HARD_LIMIT_S
        last_seen = silence.last_seen(trace)
        if trace.started_at and trace.started_at < now - timedelta(seconds=hard):
            if _reap_one(trace, status=Status.TIMED_OUT, error_kind="hard_time_limit",
                         message=HARD_LIMIT_MESSAGE.format(seconds=hard), now=now):
                report.timed_out.append(trace.pk)
        elif last_seen is None:
            continue  # a long turn, alive
        elif may_resume(attempts=trace.attempts, meta=trace.meta):
            # Continued from its last recorded step by whichever worker claims it.
            if trace_hand_back(trace_id=trace.pk, attempt=trace.attempts, reason="worker_lost",
                               last_seen=last_seen, now=now, only=silence.lost()):
                report.requeued.append(trace.pk)
        elif _reap_one(trace, status=Status.INTERRUPTED, error_kind="worker_lost",
                       message=INTERRUPTED_MESSAGE, now=now, only=silence.lost()):
            report.interrupted.append(trace.pk)
    report.dispatched = _dispatch_waiting(now)
    if report:
        logger.info("reaper: %s", report)
    return report


def _reap_one(trace: Trace, *, status: str, error_kind: str, message: str, now: datetime,
              only: Q | None = None) -> bool:
    with transaction.atomic():
        conversation_lock(trace.conversation_id)
        rows = Trace.objects.filter(pk=trace.pk, status=Status.RUNNING, attempts=trace.attempts)
        if only is not None:  # a heartbeat or a worker's beat that arrived meanwhile wins
            rows = rows.filter(only)
        if not rows.select_for_update().exists():
            return False
        # The request in flight keeps an estimate of what it cost; the other steps just end.
        cut = requests_end_cut_off(trace=trace, attempt=trace.attempts, error=STEP_INTERRUPTED,
                                   resumed=False)
        changed_steps = [s.pk for s in cut] + steps_interrupt(trace_id=trace.pk)
        _close_dangling_tool_uses(trace)
        rows.update(status=status, error=message, error_kind=error_kind, finished_at=now,
                    duration_ms=duration_ms(trace.started_at, now),
                    event_seq=F("event_seq") + 1, **step_totals(trace.pk))
        dispatch_next(trace.conversation_id, now)
        export_pipeline.turn_owed(trace.pk, trace.team_id)
    fresh = trace_for_live(trace.pk)
    if fresh.api_key_id:  # a request through the API may be waiting for this answer
        ended_signal_send(trace_uuid=fresh.uuid)
    for step in Step.objects.filter(pk__in=changed_steps):
        step.trace = fresh
        announce_sync(announcements().step, step)
    announce_sync(announcements().trace, fresh)
    return True


def _dispatch_waiting(now: datetime) -> list[int]:
    """Send the next queued trace of every conversation where nothing runs and that trace was
    never sent (its predecessor's worker died before dispatching it, or the broker was down), was
    sent before the broker lost it (``_lost_before``), or was sent long ago. A send that fails
    (the broker is down) ends this run's sending; the next run tries again."""
    resend_before = max(now - timedelta(seconds=RESEND_AFTER_S), _lost_before(now))
    conversations = set(Trace.objects.filter(status=Status.QUEUED)
                        .values_list("conversation_id", flat=True).distinct())
    sent = []
    for conversation_id in sorted(conversations):
        with transaction.atomic():
            conversation_lock(conversation_id)
            following = next_queued(conversation_id)
            if following is None:
                continue
            if following.enqueued_at is not None and following.enqueued_at >= resend_before:
                continue
            trace_enqueue(trace=following, now=now)
        # The task went out as the transaction committed; a send that failed unmarked it.
        if Trace.objects.filter(pk=following.pk, enqueued_at__isnull=True).exists():
            break
        sent.append(following.pk)
    return sent


@dataclass(frozen=True)
class BrokerLook:
    holds_since: datetime  # Redis holds every task sent since then
    turns_waiting: int  # tasks in the ``turns`` queue


def _lost_before(now: datetime) -> datetime:
    """Queued traces sent before this time were lost by the broker; the distant past when it
    lost nothing, or cannot be asked."""
    look = broker_look(app.conf.broker_url, now=now)
    if look is None:
        return datetime.min.replace(tzinfo=now.tzinfo)
    if look.turns_waiting == 0:
        return max(look.holds_since, now - timedelta(seconds=LOST_AFTER_S))
    return look.holds_since


def broker_look(url: str, *, now: datetime) -> BrokerLook | None:
    """Since when the broker's Redis holds what was sent to it, and how many tasks wait in
    ``turns``, in one round trip. The first look at a Redis without ``EPOCH_KEY`` (restarted
    without persistence, flushed, or new) sets it to ``now``: every task sent before is lost.
    None when the broker is not a plain Redis or does not answer."""
    if urlsplit(url or "").scheme not in {"redis", "rediss", "unix"}:
        return None
    try:
        with _broker_client(url).pipeline(transaction=False) as pipe:
            _, epoch, waiting = (pipe.setnx(EPOCH_KEY, now.isoformat()).get(EPOCH_KEY)
                                 .llen("turns").execute())
        return BrokerLook(holds_since=datetime.fromisoformat(epoch.decode()),
                          turns_waiting=int(waiting))
    except (redis.RedisError, OSError, AttributeError, ValueError):
        return None


@functools.lru_cache(maxsize=4)
def _broker_client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)


def _close_dangling_tool_uses(trace: Trace) -> int:
    """Answer every tool call in the trace's stored messages that has no result (with the
    runtime's own repair), so the conversation's history stays valid for the next turn."""
    rows = list(Message.objects.filter(trace_id=trace.pk).order_by("id"))
    added = 0
    for index, row in enumerate(rows):
        if row.role != Message.Role.ASSISTANT:
            continue
        following = rows[index + 1] if index + 1 < len(rows) else None
        answered_by = following if following is not None and following.role == Message.Role.TOOL else None
        pair = [_runtime(row), *([_runtime(answered_by)] if answered_by is not None else [])]
        count = close_dangling_tool_uses(pair, INTERRUPTED_OUTPUT)
        if not count:
            continue
        added += count
        blocks = pair[1].to_dict()["blocks"]
        if answered_by is not None:
            answered_by.blocks = blocks
            answered_by.save(update_fields=["blocks"])
        else:
            Message.objects.create(conversation_id=row.conversation_id, role=Message.Role.TOOL,
                                   blocks=blocks, trace_id=trace.pk)
    return added


def _runtime(row: Message) -> RuntimeMessage:
    blocks = [b for b in row.blocks if isinstance(b, dict)] if isinstance(row.blocks, list) else []
    return RuntimeMessage.from_dict({"role": row.role, "blocks": blocks})
