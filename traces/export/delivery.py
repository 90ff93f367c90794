"""No span lost: an ended turn stays owed to its team's receiver until the receiver accepted
every span of it.

The transaction that ends a turn writes a ``PendingExport`` row when the team's turns are
exported (``turn_owed``). The worker's export thread then sends what the receiver has not had
yet (its steps went live as they ended) with the turn's own span, and removes the row once all
was accepted (``settle``); if anything was not, the row keeps which steps were (``sent_steps``,
never sent again) and is left to the catch-up. The catch-up (``catch_up``, a beat task every
15 s: ``CELERY_BEAT_SCHEDULE``) takes the rows nobody holds that ended more than ``GRACE_S`` ago, oldest
first, builds their spans from the database and sends them, pausing a team's tries while its
receiver fails (``ExportState.next_try_at``, doubling to ``MAX_BACKOFF_S``). So a receiver that
was down, a worker that was lost or restarted, a queue that overflowed, all end with the turn
delivered once the receiver answers again; a receiver that does not dedupe gets each span once
(only the steps of a turn whose worker was lost while it ran may come twice: what that worker
had sent died with it). A sender holds a row by ``claimed_until`` (a lease), so two never send
the same turn. A team's backlog is bounded (``OTEL_EXPORT_BACKLOG_MAX`` turns): beyond, the
oldest are given up, counted on the exporter's page and logged.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone
from opentelemetry.sdk.trace import ReadableSpan

from ..models import ExportState, PendingExport, Step
from .config import ExportConfig, config_for
from .sender import Answers, send_once, span_exporter
from .spans import Turn
from .stored import DONE, Record, cut_off, trace_for_export

logger = logging.getLogger(__name__)

TURN_SPAN = -1  # in ``sent_steps``: the turn's own span (and those of steps it left open)
GRACE_S = 30.0  # the worker that ended a turn sends it first
CATCH_UP_TURNS = 200  # per run
SEND_SPANS = 512  # per request
FIRST_BACKOFF_S = 15.0
MAX_BACKOFF_S = 600.0
REPORT_S = 30.0  # a sender's successes are written down at most this often per team


def lease_s() -> float:
    """How long a sender holds a turn: its send with every retry, and then some."""
    return settings.OTEL_EXPORT_TIMEOUT_S * 2 + 30.0


# -- owed ----------------------------------------------------------------------------------------
def turn_owed(trace_id: int, team_id: int, now: datetime | None = None) -> None:
    """Inside the transaction that ends a turn: the turn is owed to the team's receiver, if its
    turns are exported."""
    if config_for(team_id) is None:
        return
    PendingExport.objects.bulk_create([PendingExport(trace_id=trace_id, ended_at=now or timezone.now())],
                                      ignore_conflicts=True)


def claim(trace_id: int, now: datetime | None = None) -> PendingExport | None:
    """Hold the owed turn for a send (None: nothing is owed, or another sender holds it)."""
    now = now or timezone.now()
    free = Q(claimed_until__isnull=True) | Q(claimed_until__lt=now)
    if not PendingExport.objects.filter(free, trace_id=trace_id).update(
            claimed_until=now + timedelta(seconds=lease_s())):
        return None
    return PendingExport.objects.filter(trace_id=trace_id).first()


def settle(pending: PendingExport, accepted: Iterable[int], owed: Iterable[int]) -> bool:
    """After a send: the turn is delivered when every span it owes was accepted (the row goes);
    otherwise the row keeps what was and is let go for the catch-up. True when delivered."""
    have = set(pending.sent_steps) | set(accepted)
    missing = set(owed) - have
    rows = PendingExport.objects.filter(trace_id=pending.trace_id)
    if not missing:
        rows.delete()
        return True
    rows.update(sent_steps=sorted(have), claimed_until=None, tries=pending.tries + 1)
    return False


def release(pending: PendingExport) -> None:
    """A send failed: let the turn go, as owed as it was, for the next try."""
    PendingExport.objects.filter(trace_id=pending.trace_id).update(claimed_until=None,
                                                                   tries=pending.tries + 1)


def done_seqs(trace_id: int) -> set[int]:
    return set(Step.objects.filter(trace_id=trace_id, status__in=DONE).values_list("seq", flat=True))


def turn_spans_owed(record: Record, skip: set[int], seqs: set[int] | None = None) -> list[ReadableSpan]:
    """The spans of an ended turn but those of ``skip`` (step seqs, ``TURN_SPAN``); of the
    steps ``seqs`` only, when given."""
    wanted = (seqs if seqs is not None else done_seqs(record.trace.pk)) - skip
    spans: list[ReadableSpan] = []
    for step in record.steps(seq__in=sorted(wanted), status__in=DONE) if wanted else []:
        if step.duration_ms is None and record.trace.finished_at is not None:
            step = cut_off(step, record.trace)  # ended by the turn's end (steps_interrupt)
        spans.extend(record.spans_of(step))
    if TURN_SPAN not in skip:
        spans.extend(record.end_spans())
    return spans


# -- how it goes, per team -----------------------------------------------------------------------
_reported: dict[int, tuple[float, bool]] = {}
_reported_lock = threading.Lock()


def report(team_id: int, endpoint: str, ok: bool, problem: str = "", *, force: bool = False) -> None:
    """Write down a send's outcome for the exporter's page: a failure always, and a success
    when it follows one or ``REPORT_S`` after the last written."""
    now_s = time.monotonic()
    with _reported_lock:
        last = _reported.get(team_id)
        if ok and not force and last is not None and last[1] and now_s - last[0] < REPORT_S:
            return
        _reported[team_id] = (now_s, ok)
    now = timezone.now()
    with transaction.atomic():
        state, _ = ExportState.objects.select_for_update().get_or_create(team_id=team_id)
        state.endpoint = endpoint[:500]
        if ok:
            state.last_success_at, state.failures, state.next_try_at = now, 0, None
        else:
            state.failures += 1
            state.last_error_at, state.last_error = now, problem[:500]
            backoff = min(FIRST_BACKOFF_S * 2 ** min(state.failures - 1, 10), MAX_BACKOFF_S)
            state.next_try_at = now + timedelta(seconds=backoff)
        state.save()


def forget_reported() -> None:
    with _reported_lock:
        _reported.clear()


def backlog_of(team_id: int) -> tuple[int, datetime | None]:
    """How many ended turns the team's receiver still owes, and when the oldest ended."""
    rows = PendingExport.objects.filter(trace__team_id=team_id)
    oldest = rows.order_by("ended_at").values_list("ended_at", flat=True).first()
    return rows.count(), oldest


def _bound(team_id: int) -> int:
    """Give up the oldest owed turns beyond the bound; how many."""
    limit = settings.OTEL_EXPORT_BACKLOG_MAX
    rows = PendingExport.objects.filter(trace__team_id=team_id)
    over = rows.count() - limit
    if over <= 0:
        return 0
    oldest = list(rows.order_by("ended_at").values_list("trace_id", flat=True)[:over])
    PendingExport.objects.filter(trace_id__in=oldest).delete()
    ExportState.objects.get_or_create(team_id=team_id)
    ExportState.objects.filter(team_id=team_id).update(given_up=F("given_up") + len(oldest))
    logger.warning("OpenTelemetry export: team %s owed more than %s turns; the %s oldest were "
                   "given up", team_id, limit, len(oldest))
    return len(oldest)


# -- the catch-up --------------------------------------------------------------------------------
def catch_up(now: datetime | None = None) -> dict[str, int]:
    """Send the owed turns nobody holds (see the module): how many were delivered, still owed,
    not owed any more (export turned off) and given up."""
    now = now or timezone.now()
    report_counts = {"delivered": 0, "owed": 0, "dropped": 0, "given_up": 0}
    free = Q(claimed_until__isnull=True) | Q(claimed_until__lt=now)
    rows = list(PendingExport.objects.filter(free, ended_at__lte=now - timedelta(seconds=GRACE_S))
                .order_by("ended_at").values_list("trace_id", "trace__team_id")[:CATCH_UP_TURNS])
    by_team: dict[int, list[int]] = {}
    for trace_id, team_id in rows:
        by_team.setdefault(team_id, []).append(trace_id)
    for team_id, trace_ids in by_team.items():
        report_counts["given_up"] += _bound(team_id)
        config = config_for(team_id)
        if config is None:  # export turned off: nothing is owed any more
            report_counts["dropped"] += PendingExport.objects.filter(trace_id__in=trace_ids).delete()[0]
            continue
        state = ExportState.objects.filter(team_id=team_id).first()
        if state is not None and state.next_try_at is not None and state.next_try_at > now:
            report_counts["owed"] += len(trace_ids)
            continue
        delivered, owed = _send_team(team_id, config, trace_ids, now)
        report_counts["delivered"] += delivered
        report_counts["owed"] += owed
    return report_counts


def _send_team(team_id: int, config: ExportConfig, trace_ids: list[int], now: datetime) -> tuple[int, int]:
    answers = Answers()
    exporter = span_exporter(config, answers=answers)
    delivered = 0
    try:
        for index, trace_id in enumerate(trace_ids):
            pending = claim(trace_id, now)
            trace = trace_for_export(trace_id) if pending is not None else None
            if pending is None or trace is None:
                continue
            skip = set(pending.sent_steps)
            spans = turn_spans_owed(Record(Turn(trace, config)), skip)
            problem = ""
            for start in range(0, len(spans), SEND_SPANS):
                problem = send_once(exporter, answers, spans[start:start + SEND_SPANS], config.endpoint)
                if problem:
                    break
            if problem:  # the receiver fails: the rest waits for the next try
                release(pending)
                report(team_id, config.endpoint, False, problem)
                return delivered, len(trace_ids) - index
            PendingExport.objects.filter(trace_id=trace_id).delete()
            delivered += 1
    finally:
        exporter.shutdown()
    if delivered:
        report(team_id, config.endpoint, True, force=True)
    return delivered, 0
