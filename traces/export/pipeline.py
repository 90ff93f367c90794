"""Sending a turn's spans, off the turn's path.

After a step commits finished (``step_finished``, from ``traces.record.services.step_record``) and
after a turn ends (``turn_ended``), a job goes on this process's queue: a dictionary append,
nothing more, on the turn's thread. One daemon thread per process reads the stored step
(``stored``), builds its span (``spans``) and hands it to its exporter's ``Sender`` (``sender``:
its own thread, batches every ``OTEL_EXPORT_DELAY_MS``, the OTLP exporter's retries), which
says what the receiver accepted. A turn's end sends what its receiver has not had yet with the
turn's own span, and the turn stays owed in the database until all of it was accepted
(``delivery``): a receiver that is down or slow, a full queue or a lost worker delay spans,
never lose them. A turn never waits for any of it.

A team's endpoint is reached through the outbound-network policy (``guarded_session``); the
operator's default endpoint (environment) is trusted.

Every span of an ended turn at once (the backfill command) is ``stored.turn_spans``; one span
sent to try an endpoint (the exporter page) is ``probe``.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import queue
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from django.conf import settings
from django.db import close_old_connections, transaction
from opentelemetry.sdk.trace import ReadableSpan

from ..models import PendingExport, TraceExporter
from . import delivery
from .config import CACHE_S, ExportConfig, config_for, site_config
from .sender import Sender
from .spans import Turn
from .stored import DONE, Record, cut_off, trace_for_export

logger = logging.getLogger(__name__)

DROP_LOG_S = 60.0
# The export thread keeps its database connection while steps keep coming.
IDLE_CLOSE_S = 5.0
# After a job arrives, the thread waits this long for the ones that come with it (the other
# steps of a turn), so that a turn is read once for them all.
GATHER_S = 0.05


# -- what each turn has had ----------------------------------------------------------------------
class Marks:
    """Per running turn, the steps handed to its sender and those its receiver accepted (this
    process's memory; a turn that ends settles with the database, ``delivery``). Bounded."""

    MAX = 10_000

    def __init__(self) -> None:
        self.queued: OrderedDict[int, set[int]] = OrderedDict()
        self.accepted: dict[int, set[int]] = {}
        self.lock = threading.Lock()

    def handed(self, trace_id: int, seqs: list[int]) -> None:
        with self.lock:
            self.queued.setdefault(trace_id, set()).update(seqs)
            self.queued.move_to_end(trace_id)
            while len(self.queued) > self.MAX:
                gone, _ = self.queued.popitem(last=False)
                self.accepted.pop(gone, None)

    def outcome(self, trace_id: int, seqs: list[int], ok: bool) -> None:
        with self.lock:
            if ok:
                self.accepted.setdefault(trace_id, set()).update(seqs)
            elif trace_id in self.queued:
                self.queued[trace_id].difference_update(seqs)

    def of(self, trace_id: int) -> tuple[set[int], set[int]]:
        with self.lock:
            return set(self.queued.get(trace_id, ())), set(self.accepted.get(trace_id, ()))

    def forget(self, trace_id: int) -> set[int]:
        with self.lock:
            self.queued.pop(trace_id, None)
            return self.accepted.pop(trace_id, set())


@dataclass(slots=True)
class _Job:
    kind: str  # "step" or "turn"
    trace_id: int
    seq: int = 0


class Pipeline:
    """This process's export queue, its thread and one sender per exporter."""

    def __init__(self) -> None:
        self.jobs: queue.Queue[_Job] = queue.Queue(maxsize=settings.OTEL_EXPORT_QUEUE_SIZE)
        self.senders: dict[tuple[str, str, str], Sender] = {}
        self.marks = Marks()
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.pid = 0
        self.dropped = 0
        self.dropped_logged = 0.0
        self.exported = 0
        # Seconds this process's export thread spent reading steps and building spans.
        self.build_s = 0.0

    def submit(self, job: _Job) -> None:
        with self.lock:
            if self.thread is None or self.pid != os.getpid() or not self.thread.is_alive():
                self._start()
        try:
            self.jobs.put_nowait(job)
        except queue.Full:
            self._dropped(1)

    def _start(self) -> None:
        if self.pid != os.getpid():  # a forked child starts afresh (the parent's threads are gone)
            self.jobs = queue.Queue(maxsize=settings.OTEL_EXPORT_QUEUE_SIZE)
            self.senders = {}
            self.marks = Marks()
        self.pid = os.getpid()
        self.thread = threading.Thread(target=self._run, name="otel-export", daemon=True)
        self.thread.start()

    def _dropped(self, count: int) -> None:
        self.dropped += count
        now = time.monotonic()
        if now - self.dropped_logged > DROP_LOG_S:
            self.dropped_logged = now
            logger.warning("OpenTelemetry export is behind: %s span job(s) dropped so far (ended "
                           "turns are sent from the database)", self.dropped)

    def sender(self, config: ExportConfig, team_id: int) -> Sender:
        sender = self.senders.get(config.key)
        if sender is None:
            for key in [k for k in self.senders if k[0] == config.source]:
                self.senders.pop(key).stop()  # the exporter changed: the old one goes
            sender = self.senders[config.key] = Sender(config, functools.partial(
                _report, team_id if config.source != "site" else None, config.endpoint))
        return sender

    def _run(self) -> None:
        while True:
            try:
                first = self.jobs.get(timeout=IDLE_CLOSE_S)
            except queue.Empty:
                try:
                    close_old_connections()  # idle: the database connection may go
                except Exception:  # noqa: BLE001 - a database that is gone is met on the next job
                    logger.debug("could not close the export thread's connection", exc_info=True)
                continue
            # The steps that come with it: one read of each turn for all its ended steps.
            time.sleep(GATHER_S)
            jobs = [first]
            while True:
                try:
                    jobs.append(self.jobs.get_nowait())
                except queue.Empty:
                    break
            started = time.perf_counter()
            try:
                self._export(jobs)
            except Exception:  # noqa: BLE001 - spans that cannot be built are sent from the database
                logger.warning("could not export %s job(s)", len(jobs), exc_info=True)
            finally:
                self.build_s += time.perf_counter() - started
                for _ in jobs:
                    self.jobs.task_done()

    def _export(self, jobs: list[_Job]) -> None:
        by_trace: dict[int, list[_Job]] = {}
        for job in jobs:
            by_trace.setdefault(job.trace_id, []).append(job)
        for trace_id, its_jobs in by_trace.items():
            trace = trace_for_export(trace_id)
            config = config_for(trace.team_id) if trace is not None else None
            if trace is None or config is None:
                continue
            record = Record(Turn(trace, config))
            sender = self.sender(config, trace.team_id)
            queued, _ = self.marks.of(trace_id)
            if any(j.kind == "turn" for j in its_jobs):
                self._turn_end(record, sender, queued)
                continue
            seqs = {j.seq for j in its_jobs} - queued
            spans: list[ReadableSpan] = []
            sent: list[int] = []
            for step in record.steps(seq__in=sorted(seqs), status__in=DONE) if seqs else []:
                if step.duration_ms is None and trace.finished_at is not None:
                    step = cut_off(step, trace)  # ended by the turn's end (steps_interrupt)
                spans.extend(record.spans_of(step))
                sent.append(step.seq)
            if spans:
                self.marks.handed(trace_id, sent)
                sender.send(spans, functools.partial(self.marks.outcome, trace_id, sent))
                self.exported += len(spans)

    def _turn_end(self, record: Record, sender: Sender, queued: set[int]) -> None:
        """The turn ended: what its receiver has not had, with the turn's own span; the turn
        stays owed (``delivery``) until all of it was accepted."""
        trace_id = record.trace.pk
        pending = delivery.claim(trace_id)
        if pending is None and PendingExport.objects.filter(trace_id=trace_id).exists():
            return  # the catch-up holds it
        owed = delivery.done_seqs(trace_id) | {delivery.TURN_SPAN}
        skip = queued | set(pending.sent_steps if pending is not None else ())
        spans = delivery.turn_spans_owed(record, skip, owed - {delivery.TURN_SPAN})
        sending = sorted(owed - skip)
        self.marks.handed(trace_id, sending)

        def done(ok: bool) -> None:
            self.marks.outcome(trace_id, sending, ok)
            accepted = self.marks.forget(trace_id)
            if pending is not None:
                delivery.settle(pending, accepted, owed)

        sender.send(spans, done)
        self.exported += len(spans)

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until every queued job is built and every span sent (tests, shutdown)."""
        deadline = time.monotonic() + timeout_s
        while self.jobs.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        return all(s.idle(max(deadline - time.monotonic(), 0.1)) for s in list(self.senders.values()))

    def discard(self) -> None:
        """Let go of every sender (tests)."""
        senders, self.senders = list(self.senders.values()), {}
        for sender in senders:
            sender.stop()
        self.marks = Marks()


def _report(team_id: int | None, endpoint: str, ok: bool, problem: str) -> None:
    """A sender's outcome, for its team's exporter page (the site's exporter serves many teams:
    the catch-up reports theirs)."""
    if team_id is not None:
        delivery.report(team_id, endpoint, ok, problem)


PIPELINE = Pipeline()
EXIT_FLUSH_S = 2.0


def _flush_at_exit() -> None:
    """Send what is queued as the process ends, waiting at most ``EXIT_FLUSH_S``: a worker that
    stops is not held up by a receiver that is down."""
    if PIPELINE.thread is None:
        return
    flushing = threading.Thread(target=PIPELINE.flush, args=(EXIT_FLUSH_S,), daemon=True)
    flushing.start()
    flushing.join(EXIT_FLUSH_S)


atexit.register(_flush_at_exit)

_configured: list[float | bool] = [0.0, False]


def exports_configured() -> bool:
    """Whether any exporter is set (the site's, or an enabled team's): when none is, a finished
    step costs no more than this check (kept ``CACHE_S`` seconds)."""
    now = time.monotonic()
    if now - float(_configured[0]) >= CACHE_S:
        _configured[:] = [now, site_config() is not None
                          or TraceExporter.objects.filter(enabled=True).exists()]
    return bool(_configured[1])


def step_finished(trace_id: int, seq: int) -> None:
    """A step of the trace committed finished: export it (after commit, on any thread)."""
    try:
        if exports_configured():
            PIPELINE.submit(_Job("step", trace_id, seq))
    except Exception:  # noqa: BLE001 - export never fails a turn
        logger.warning("could not queue the export of a step", exc_info=True)


def turn_ended(trace_id: int) -> None:
    """The trace ended: export the turn's span (and any step it left open)."""
    try:
        if exports_configured():
            PIPELINE.submit(_Job("turn", trace_id))
    except Exception:  # noqa: BLE001 - export never fails a turn
        logger.warning("could not queue the export of a turn", exc_info=True)


def turn_owed(trace_id: int, team_id: int) -> None:
    """Inside the transaction that ends a turn: owe its spans to the team's receiver until it
    accepted them (``delivery``), and export the turn once the transaction committed."""
    if exports_configured():
        delivery.turn_owed(trace_id, team_id)
    transaction.on_commit(functools.partial(turn_ended, trace_id))


def forget_configured() -> None:
    """Read again whether any exporter is set, and write the next outcome of every send down
    (after a change in this process; tests)."""
    _configured[:] = [0.0, False]
    delivery.forget_reported()


