"""Trying an exporter from its page: one span sent now to its endpoint, the way turns are sent
(same encoding, headers, session and outbound policy), and what the receiver answered, shown
without revealing what an internal endpoint says."""

from __future__ import annotations

import time
from dataclasses import dataclass

import requests
from django.conf import settings
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

from agents.runtime.scrub import scrubbed_line
from agentsite.outbound import reached_by_allowlist
from agentsite.outbound.session import guarded_session

from .config import ExportConfig
from .sender import plain_session
from .spans import SCOPE, resource_for


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
