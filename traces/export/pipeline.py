"""Sending a turn's spans, off the turn's path.

After a step commits finished (``step_finished``, from ``traces.record.services.step_record``) and
after a turn ends (``turn_ended``), a job goes on this process's queue: a dictionary append,
nothing more, on the turn's thread. One daemon thread per process reads the stored step, builds
its span (``spans``) and hands it to the exporter's ``BatchSpanProcessor`` (the OpenTelemetry
SDK's: a bounded queue, batches every ``OTEL_EXPORT_DELAY_MS``, its own thread), whose
``OTLPSpanExporter`` posts protobuf over HTTP and retries 429/502/503/504 with exponential
backoff within ``OTEL_EXPORT_TIMEOUT_S``. A receiver that is down or slow fills these queues
and spans are dropped (counted, logged once a minute); a turn never waits for any of it.

A team's endpoint is reached through the outbound-network policy (``guarded_session``); the
operator's default endpoint (environment) is trusted.

``turn_spans`` builds every span of an ended turn at once (the backfill command), and
``send_test_span`` sends one span and reports the receiver's answer (the exporter page).
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
from typing import Any

import requests
from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

from agents.runtime.scrub import scrubbed_line
from agentsite.outbound import reached_by_allowlist
from agentsite.outbound.session import guarded_session

from ..models import Step, StepPayload, Trace, TraceExporter, TrajectoryState
from ..record.request_history import conversation_of
from .config import CACHE_S, ExportConfig, config_for, site_config
from .spans import (
    SCOPE,
    Turn,
    payload_value,
    resource_for,
    retry_request_seq,
    root_span,
    step_spans,
)

logger = logging.getLogger(__name__)

OPEN = (Step.Status.RUNNING, Step.Status.WAITING)
DONE = (Step.Status.OK, Step.Status.ERROR)
EVENT_KINDS = (Step.Kind.RESUME, Step.Kind.ERROR)
DROP_LOG_S = 60.0
# The export thread keeps its database connection while steps keep coming.
IDLE_CLOSE_S = 5.0
# After a job arrives, the thread waits this long for the ones that come with it (the other
# steps of a turn), so that a turn is read once for them all.
GATHER_S = 0.05


# -- reading a turn's record -----------------------------------------------------------------------
def trace_for_export(trace_id: int) -> Trace | None:
    return (Trace.objects.select_related("agent", "conversation", "team", "api_key")
            .filter(pk=trace_id).first())


def _payloads(step: Step) -> dict[str, Any]:
    return {p.kind: payload_value(p) for p in step.payloads.all()
            if p.kind != StepPayload.Kind.PARTIAL}


def _end(step: Step) -> Any:
    return step.started_at + timezone.timedelta(milliseconds=step.duration_ms or 0)


def _is_event_of(retry: Step, request: Step | None) -> bool:
    """A retry recorded while its model request was open is an event of that request's span;
    one recorded after it ended is a span of its own (same rule for live and backfill)."""
    return request is not None and (request.status in OPEN or retry.started_at <= _end(request))


def _request_payloads(trace: Trace, up_to_seq: int) -> list[dict[str, Any]]:
    rows = (StepPayload.objects.filter(step__trace=trace, step__kind=Step.Kind.LLM_REQUEST,
                                       step__seq__lte=up_to_seq, kind=StepPayload.Kind.REQUEST)
            .order_by("step__seq"))
    return [v for v in (payload_value(r) for r in rows) if isinstance(v, dict)]


class Record:
    """The stored record of one turn, read for its spans: what several steps of the turn need
    (its retries) is read once."""

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.trace = turn.trace
        self._retries: list[Step] | None = None

    def retries(self) -> list[Step]:
        if self._retries is None:
            self._retries = list(Step.objects.filter(trace=self.trace, kind=Step.Kind.RETRY))
        return self._retries

    def steps(self, **filters: Any) -> list[Step]:
        return list(Step.objects.filter(trace=self.trace, **filters).select_related("price")
                    .prefetch_related("payloads").order_by("seq"))

    def spans_of(self, step: Step) -> list[ReadableSpan]:
        """The spans of one finished step."""
        turn = self.turn
        payloads = _payloads(step)
        if step.kind == Step.Kind.LLM_REQUEST:
            retries = [r for r in self.retries()
                       if retry_request_seq(r) == step.seq and _is_event_of(r, step)]
            history = specs = None
            if turn.policy.on:
                request = payloads.get(StepPayload.Kind.REQUEST) or {}
                names = request.get("tools") if isinstance(request, dict) else None
                history, specs = conversation_of(_request_payloads(self.trace, step.seq), names)
            return step_spans(turn, step, payloads=payloads, retries=retries, history=history,
                              tool_specs=specs)
        if step.kind == Step.Kind.RETRY:
            request_seq = retry_request_seq(step)
            request = (Step.objects.filter(trace=self.trace, seq=request_seq).first()
                       if request_seq else None)
            if _is_event_of(step, request):
                return []
            key = (request.meta or {}).get("key") if request is not None else None
            return step_spans(turn, step, payloads=payloads, request_key=key)
        return step_spans(turn, step, payloads=payloads)

    def end_spans(self) -> list[ReadableSpan]:
        """The turn's own span, and the spans of steps it left open."""
        trace = self.trace
        spans: list[ReadableSpan] = []
        for step in self.steps(status__in=OPEN):
            spans.extend(self.spans_of(_cut_off(step, trace)))
        states = TrajectoryState.objects.filter(trace=trace).order_by("iteration")
        events = Step.objects.filter(trace=trace, kind__in=EVENT_KINDS).order_by("seq")
        spans.append(root_span(self.turn, states=states, steps=events))
        return spans


def _cut_off(step: Step, trace: Trace) -> Step:
    """A step the turn left open (stopped, timed out, its worker gone), or closed by the turn's
    end without a duration (``steps_interrupt``): it ends with the turn."""
    end = trace.finished_at or timezone.now()
    step.duration_ms = max((end - step.started_at).total_seconds() * 1000, 0)
    step.status = Step.Status.ERROR
    step.error = step.error or f"The turn ended ({trace.status}) before this step finished."
    return step


def turn_spans(trace: Trace, config: ExportConfig) -> list[ReadableSpan]:
    """Every span of an ended turn (the backfill)."""
    record = Record(Turn(trace, config))
    spans: list[ReadableSpan] = []
    for step in record.steps(status__in=DONE):
        spans.extend(record.spans_of(step))
    return spans + record.end_spans()


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
                    step = _cut_off(step, trace)  # ended by the turn's end (steps_interrupt)
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


# -- a test span -------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TestResult:
    ok: bool
    status: int | None
    answer: str
    ms: float


def send_test_span(config: ExportConfig, *, team_uuid: str = "") -> TestResult:
    """Send one span to ``config``'s endpoint now, the way turns are sent (same encoding,
    headers, session and policy), and report what the receiver answered."""
    ids = RandomIdGenerator()
    now = time.time_ns()
    span = ReadableSpan(
        name="agentsite test span", kind=SpanKind.INTERNAL, start_time=now - 1_000_000,
        end_time=now, resource=resource_for(config, team_uuid), instrumentation_scope=SCOPE,
        context=SpanContext(ids.generate_trace_id(), ids.generate_span_id(), is_remote=False,
                            trace_flags=TraceFlags(TraceFlags.SAMPLED)),
        attributes={"agentsite.test": True, "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": "agentsite exporter test"})
    return post_spans([span], config, timeout_s=min(settings.OTEL_EXPORT_TIMEOUT_S, 10.0))


def post_spans(spans: list[ReadableSpan], config: ExportConfig, *, timeout_s: float) -> TestResult:
    """POST ``spans`` once (no retry) and keep the receiver's answer."""
    body = encode_spans(spans).SerializePartialToString()
    headers = {"Content-Type": "application/x-protobuf", **dict(config.headers)}
    session = guarded_session() if config.guarded else plain_session()
    started = time.perf_counter()
    try:
        with session:
            response = session.post(config.endpoint, data=body, headers=headers, timeout=timeout_s)
    except requests.RequestException as exc:
        return TestResult(False, None, _reason(exc), (time.perf_counter() - started) * 1000)
    ms = (time.perf_counter() - started) * 1000
    answer = _answer_excerpt(response, config)
    return TestResult(response.ok, response.status_code,
                      f"{response.status_code} {response.reason}" + (f": {answer}" if answer else ""), ms)


ANSWER_EXCERPT_CHARS = 200


def _answer_excerpt(response: requests.Response, config: ExportConfig) -> str:
    """What of the receiver's answer the page may show: for a team's endpoint on an internal
    network (reached only through the operator's allowlist) nothing but its size, so the test
    cannot be used to read internal services; otherwise the start of a text answer on one
    line, scrubbed of secrets before it is cut."""
    size = f"{len(response.content)} bytes"
    content_type = response.headers.get("content-type", "")
    if not response.content or not ("text" in content_type or "json" in content_type):
        return size if response.content else ""
    if config.guarded and reached_by_allowlist(config.endpoint):
        return f"{size} (not shown: the endpoint is on an internal network)"
    # The exporter's own header values (its credentials) are redacted too, should they echo.
    return scrubbed_line(response.text[:4000], ANSWER_EXCERPT_CHARS,
                         secrets=[value for _, value in config.headers])


def _reason(exc: requests.RequestException) -> str:
    """One sentence for a failed request (the policy's refusal is already one)."""
    text = str(exc.args[0]) if exc.args else str(exc)
    if isinstance(exc, requests.Timeout):
        return "The receiver did not answer in time."
    if isinstance(exc, requests.ConnectionError) and text.startswith("Refused"):
        return text
    return f"The request failed: {text[:300]}"
