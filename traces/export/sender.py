"""Sending one exporter's spans, and knowing what its receiver accepted: ``Sender``.

A sender posts batches of spans on a thread of its own, in the order they came (several at once
when they queue up), through the OTLP exporter, which retries 429/502/503/504 with backoff
within ``OTEL_EXPORT_TIMEOUT_S``; then it tells each batch's ``done`` whether the receiver
accepted it. That is what lets the export keep a turn owed until every span of it arrived
(``traces.export.delivery``). While the receiver fails, the sender does not try again before a
growing pause (1 s doubling to ``MAX_PAUSE_S``): what comes meanwhile is answered "not
accepted" at once, and is sent later from the database, so a receiver that is down costs the
export thread nothing and the turns nothing.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import requests
from django.conf import settings
from django.db import close_old_connections
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from agentsite.db import connection_release
from agentsite.outbound.session import guarded_session

from .config import ExportConfig

logger = logging.getLogger(__name__)

MAX_BATCH_SPANS = 512
MAX_PAUSE_S = 60.0
QUEUED_BATCHES = 1024
IDLE_CLOSE_S = 5.0
PROBLEM_CHARS = 300

Done = Callable[[bool], None]


def plain_session() -> requests.Session:
    session = requests.Session()
    session.trust_env = False  # the operator's endpoint, not a proxy from the environment
    return session


class Answers:
    """What the receiver last answered (a ``requests`` response hook), to say why a send failed."""

    def __init__(self) -> None:
        self.status: int | None = None

    def __call__(self, response: requests.Response, *args: object, **kwargs: object) -> None:
        self.status = response.status_code


def span_exporter(config: ExportConfig, *, timeout_s: float | None = None,
                  answers: Answers | None = None) -> OTLPSpanExporter:
    session = guarded_session() if config.guarded else plain_session()
    if answers is not None:
        session.hooks["response"].append(answers)
    return OTLPSpanExporter(
        endpoint=config.endpoint, headers=dict(config.headers),
        timeout=timeout_s if timeout_s is not None else settings.OTEL_EXPORT_TIMEOUT_S,
        session=session)


def send_once(exporter: OTLPSpanExporter, answers: Answers, spans: Sequence[ReadableSpan],
              endpoint: str) -> str:
    """Post ``spans``; "" when the receiver accepted them, else why not (for people to read)."""
    answers.status = None
    try:
        result = exporter.export(spans)
    except Exception as exc:  # noqa: BLE001 - a send that raises is a send that failed
        return f"The spans could not be sent to {endpoint}: {type(exc).__name__}."[:PROBLEM_CHARS]
    if result == SpanExportResult.SUCCESS:
        return ""
    if answers.status is None:
        return f"The receiver at {endpoint} could not be reached."[:PROBLEM_CHARS]
    return (f"The receiver at {endpoint} did not accept the spans: it answered HTTP "
            f"{answers.status}.")[:PROBLEM_CHARS]


@dataclass(slots=True)
class Batch:
    spans: list[ReadableSpan]
    done: Done


class Sender:
    """One exporter's sending thread (see the module). ``report(ok, problem)`` hears of every
    send, on the sender's thread."""

    def __init__(self, config: ExportConfig, report: Callable[[bool, str], None]) -> None:
        self.config = config
        self.report = report
        self.answers = Answers()
        self.exporter = span_exporter(config, answers=self.answers)
        self.batches: queue.Queue[Batch | None] = queue.Queue(maxsize=QUEUED_BATCHES)
        self.pause_s = 0.0
        self.paused_until = 0.0
        self.failed = 0
        self.logged = 0.0
        self.thread = threading.Thread(target=self._run, name="otel-send", daemon=True)
        self.thread.start()

    def send(self, spans: list[ReadableSpan], done: Done) -> None:
        try:
            self.batches.put_nowait(Batch(spans, done))
        except queue.Full:
            _tell(done, False)

    def _run(self) -> None:
        while True:
            try:
                first = self.batches.get(timeout=IDLE_CLOSE_S)
            except queue.Empty:
                _close_connection()
                continue
            if first is None:
                self.batches.task_done()
                return
            time.sleep(settings.OTEL_EXPORT_DELAY_MS / 1000)  # let what comes with it join
            batches = [first]
            size = len(first.spans)
            while size < MAX_BATCH_SPANS:
                try:
                    more = self.batches.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self.batches.put_nowait(None)  # stop after this send
                    self.batches.task_done()
                    break
                batches.append(more)
                size += len(more.spans)
            try:
                self._send(batches)
            finally:
                connection_release()  # its bookkeeping's connection, back to the pool
                for _ in batches:
                    self.batches.task_done()

    def _send(self, batches: list[Batch]) -> None:
        spans = [span for batch in batches for span in batch.spans]
        now = time.monotonic()
        if now < self.paused_until:
            ok, problem = False, ""
        else:
            problem = send_once(self.exporter, self.answers, spans, self.config.endpoint) if spans else ""
            ok = not problem
            self.pause_s = 0.0 if ok else min(max(self.pause_s * 2, 1.0), MAX_PAUSE_S)
            self.paused_until = 0.0 if ok else time.monotonic() + self.pause_s
            if not ok:
                self._log(len(spans), problem)
            try:
                self.report(ok, problem)
            except Exception:  # noqa: BLE001 - the state shown is not worth the thread
                logger.warning("could not record how the export went", exc_info=True)
        for batch in batches:
            _tell(batch.done, ok)

    def _log(self, count: int, problem: str) -> None:
        self.failed += count
        now = time.monotonic()
        if now - self.logged > MAX_PAUSE_S:
            self.logged = now
            logger.warning("OpenTelemetry export: %s (%s span(s) not accepted so far; ended turns "
                           "are sent again from the database)", problem, self.failed)

    def idle(self, timeout_s: float) -> bool:
        """Wait until every batch handed over was sent or given up (tests, shutdown)."""
        deadline = time.monotonic() + timeout_s
        while self.batches.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        return not self.batches.unfinished_tasks

    def stop(self) -> None:
        try:
            self.batches.put_nowait(None)
        except queue.Full:
            pass
        self.exporter.shutdown()


def _tell(done: Done, ok: bool) -> None:
    try:
        done(ok)
    except Exception:  # noqa: BLE001 - one batch's bookkeeping never stops the sender
        logger.warning("could not record what the receiver accepted", exc_info=True)


def _close_connection() -> None:
    try:
        close_old_connections()  # idle: the database connection may go
    except Exception:  # noqa: BLE001 - a database that is gone is met on the next batch
        logger.debug("could not close the sender's connection", exc_info=True)
