"""Sending a turn's spans, off the turn's path.

After a step commits finished (``step_finished``, from ``traces.record.services.step_record``) and
after a turn ends (``turn_ended``), a job goes on this process's queue: a dictionary append,
nothing more, on the turn's thread. One daemon thread per process reads the stored step
(``stored``), builds its span (``spans``) and hands it to the exporter's ``BatchSpanProcessor`` (the OpenTelemetry
SDK's: a bounded queue, batches every ``OTEL_EXPORT_DELAY_MS``, its own thread), whose
``OTLPSpanExporter`` posts protobuf over HTTP and retries 429/502/503/504 with exponential
backoff within ``OTEL_EXPORT_TIMEOUT_S``. A receiver that is down or slow fills these queues
and spans are dropped (counted, logged once a minute); a turn never waits for any of it.

A team's endpoint is reached through the outbound-network policy (``guarded_session``); the
operator's default endpoint (environment) is trusted.

Every span of an ended turn at once (the backfill command) is ``stored.turn_spans``; one span
sent to try an endpoint (the exporter page) is ``probe``.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import requests
from django.conf import settings
from django.db import close_old_connections
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from agentsite.outbound.session import guarded_session

from ..models import TraceExporter
from .config import CACHE_S, ExportConfig, config_for, site_config
from .spans import Turn
from .stored import DONE, Record, cut_off, trace_for_export

logger = logging.getLogger(__name__)

DROP_LOG_S = 60.0
# The export thread keeps its database connection while steps keep coming.
IDLE_CLOSE_S = 5.0
# After a job arrives, the thread waits this long for the ones that come with it (the other
# steps of a turn), so that a turn is read once for them all.
GATHER_S = 0.05


# -- the exporters -------------------------------------------------------------------------------------
def plain_session() -> requests.Session:
    session = requests.Session()
    session.trust_env = False  # the operator's endpoint, not a proxy from the environment
    return session


def span_exporter(config: ExportConfig, *, timeout_s: float | None = None) -> OTLPSpanExporter:
    return OTLPSpanExporter(
        endpoint=config.endpoint, headers=dict(config.headers),
        timeout=timeout_s if timeout_s is not None else settings.OTEL_EXPORT_TIMEOUT_S,
        session=guarded_session() if config.guarded else plain_session())


class ReportingExporter(SpanExporter):
    """The OTLP exporter, saying once a minute per endpoint that batches are lost (the SDK's
    own logger, quietened in settings, would warn on every retry of every batch)."""

    def __init__(self, inner: OTLPSpanExporter, endpoint: str) -> None:
        self.inner = inner
        self.endpoint = endpoint
        self.failed = 0
        self.logged = 0.0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self.inner.export(spans)
        if result != SpanExportResult.SUCCESS:
            self.failed += len(spans)
            now = time.monotonic()
            if now - self.logged > DROP_LOG_S:
                self.logged = now
                logger.warning("OpenTelemetry export to %s failed after its retries: %s span(s) "
                               "lost so far", self.endpoint, self.failed)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


@dataclass(slots=True)
class _Job:
    kind: str  # "step" or "turn"
    trace_id: int
    seq: int = 0


class Pipeline:
    """This process's export queue, its thread and one batch processor per exporter."""

    def __init__(self) -> None:
        self.jobs: queue.Queue[_Job] = queue.Queue(maxsize=settings.OTEL_EXPORT_QUEUE_SIZE)
        self.processors: dict[tuple[str, str, str], BatchSpanProcessor] = {}
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
            self.processors = {}
        self.pid = os.getpid()
        self.thread = threading.Thread(target=self._run, name="otel-export", daemon=True)
        self.thread.start()

    def _dropped(self, count: int) -> None:
        self.dropped += count
        now = time.monotonic()
        if now - self.dropped_logged > DROP_LOG_S:
            self.dropped_logged = now
            logger.warning("OpenTelemetry export is behind: %s span job(s) dropped so far",
                           self.dropped)

    def processor(self, config: ExportConfig) -> BatchSpanProcessor:
        processor = self.processors.get(config.key)
        if processor is None:
            for key in [k for k in self.processors if k[0] == config.source]:
                self.processors.pop(key).shutdown()  # the exporter changed: the old one goes
            processor = self.processors[config.key] = BatchSpanProcessor(
                ReportingExporter(span_exporter(config), config.endpoint), max_queue_size=settings.OTEL_EXPORT_QUEUE_SIZE,
                schedule_delay_millis=settings.OTEL_EXPORT_DELAY_MS,
                export_timeout_millis=settings.OTEL_EXPORT_TIMEOUT_S * 1000)
        return processor

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
            except Exception:  # noqa: BLE001 - spans that cannot be built are lost, not the thread
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
            spans: list[ReadableSpan] = []
            seqs = sorted({j.seq for j in its_jobs if j.kind == "step"})
            for step in record.steps(seq__in=seqs, status__in=DONE) if seqs else []:
                if step.duration_ms is None and trace.finished_at is not None:
                    step = cut_off(step, trace)  # ended by the turn's end (steps_interrupt)
                spans.extend(record.spans_of(step))
            if any(j.kind == "turn" for j in its_jobs):
                spans.extend(record.end_spans())
            processor = self.processor(config)
            for span in spans:
                processor.on_end(span)
            self.exported += len(spans)

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until every queued job is built and every span sent (tests, shutdown)."""
        deadline = time.monotonic() + timeout_s
        while self.jobs.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        remaining = max(deadline - time.monotonic(), 0.1)
        return all(p.force_flush(int(remaining * 1000)) for p in list(self.processors.values()))


    def discard(self) -> None:
        """Let go of every exporter (tests): each is shut down on a thread of its own, so that
        one whose receiver is gone does not hold the caller up."""
        processors, self.processors = list(self.processors.values()), {}
        for processor in processors:
            threading.Thread(target=processor.shutdown, name="otel-shutdown", daemon=True).start()


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


def forget_configured() -> None:
    _configured[:] = [0.0, False]


