"""The in-test OTLP/HTTP receiver, driven by the SDK's own ``OTLPSpanExporter``: what spans the
SDK sends arrive decoded (ids, nesting, kinds, attributes of every type, events, links, status,
resource and scope), compressed or not, and the fault knobs make the exporter retry."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import requests
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from tests.otel.receiver import PROTOBUF, OTLPReceiver

EVERY_TYPE = {
    "gen_ai.operation.name": "chat",
    "gen_ai.request.stream": True,
    "gen_ai.usage.input_tokens": 1234,
    "gen_ai.request.temperature": 0.25,
    "gen_ai.response.finish_reasons": ("stop", "length"),
    "flags": (True, False),
    "sizes": (1, -2, 2**40),
    "weights": (0.5, 1.5),
    "raw": b"\x00\xffbytes",
    "nested": {"model": "m", "n": 2, "ok": False, "list": ["a"]},
}


@pytest.fixture
def receiver() -> Iterator[OTLPReceiver]:
    with OTLPReceiver() as running:
        yield running


def finished_spans() -> tuple[ReadableSpan, ...]:
    """An agent turn: a root INTERNAL span, a CLIENT chat span under it with attributes of every
    type, an event, a link and an error status, and a tool span under the root."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "agentsite", "deployment": 3}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("agentsite.traces", "1.2.3")
    with tracer.start_as_current_span("invoke_agent helper") as root:
        linked = root.get_span_context()
        with tracer.start_as_current_span("chat m", kind=SpanKind.CLIENT, attributes=EVERY_TYPE,
                                          links=[Link(linked, {"why": "retry"})]) as chat:
            chat.add_event("gen_ai.choice", {"index": 0, "finish_reason": "stop"}, timestamp=1_000)
            chat.set_status(Status(StatusCode.ERROR, "rate limited"))
        with tracer.start_as_current_span("execute_tool clock"):
            pass
    provider.shutdown()
    return memory.get_finished_spans()


def exporter_for(receiver: OTLPReceiver, **kwargs) -> OTLPSpanExporter:
    return OTLPSpanExporter(endpoint=receiver.endpoint, **kwargs)


def test_spans_arrive_decoded_with_their_nesting_and_every_attribute_type(receiver):
    sent = finished_spans()
    assert exporter_for(receiver).export(sent) is SpanExportResult.SUCCESS
    spans = {span.name: span for span in receiver.wait_for(3)}
    root, chat, tool = spans["invoke_agent helper"], spans["chat m"], spans["execute_tool clock"]
    context = {span.name: span.get_span_context() for span in sent}
    assert root.trace_id == f"{context['chat m'].trace_id:032x}" == chat.trace_id == tool.trace_id
    assert chat.span_id == f"{context['chat m'].span_id:016x}" and len(chat.span_id) == 16
    assert root.parent_span_id is None and chat.parent_span_id == tool.parent_span_id == root.span_id
    assert (root.kind, chat.kind, tool.kind) == ("INTERNAL", "CLIENT", "INTERNAL")
    assert chat.attributes == {**EVERY_TYPE, "gen_ai.response.finish_reasons": ["stop", "length"],
                               "flags": [True, False], "sizes": [1, -2, 2**40], "weights": [0.5, 1.5]}
    assert [(e.name, e.time_ns, e.attributes) for e in chat.events] == [
        ("gen_ai.choice", 1_000, {"index": 0, "finish_reason": "stop"})]
    assert [(link.trace_id, link.span_id, link.attributes) for link in chat.links] == [
        (root.trace_id, root.span_id, {"why": "retry"})]
    assert (chat.status_code, chat.status_message, root.status_code) == ("ERROR", "rate limited", "UNSET")
    assert 0 < root.start_ns <= chat.start_ns <= chat.end_ns <= tool.start_ns <= tool.end_ns <= root.end_ns
    assert chat.resource["service.name"] == "agentsite" and chat.resource["deployment"] == 3
    assert (chat.scope_name, chat.scope_version) == ("agentsite.traces", "1.2.3")
    assert chat.headers["content-type"] == PROTOBUF and "content-encoding" not in chat.headers
    assert receiver.requests == 1


@pytest.mark.parametrize("compression", [Compression.Gzip, Compression.Deflate])
def test_compressed_requests_are_inflated(receiver, compression):
    exporter = exporter_for(receiver, compression=compression, headers={"Authorization": "Bearer t"})
    assert exporter.export(finished_spans()) is SpanExportResult.SUCCESS
    spans = receiver.wait_for(3)
    assert {span.headers["content-encoding"] for span in spans} == {compression.value}
    assert spans[0].headers["authorization"] == "Bearer t"
    assert {span.name for span in spans} == {"invoke_agent helper", "chat m", "execute_tool clock"}


@pytest.mark.parametrize("status", [503, 429])
def test_an_unavailable_receiver_is_retried_by_the_exporter(receiver, status):
    receiver.fail_with(status, retry_after="0")
    assert exporter_for(receiver).export(finished_spans()) is SpanExportResult.SUCCESS
    assert receiver.requests == 2 and len(receiver.wait_for(3)) == 3


def test_a_receiver_failing_past_the_timeout_makes_the_export_fail(receiver):
    receiver.fail_with(503, times=10, retry_after="0.2")
    assert exporter_for(receiver, timeout=0.5).export(finished_spans()) is SpanExportResult.FAILURE
    assert receiver.spans == [] and 2 <= receiver.requests <= 4


def test_a_slow_receiver_delays_the_export_and_a_short_timeout_gives_up():
    with OTLPReceiver(delay_s=0.3) as slow:
        began = time.monotonic()
        assert exporter_for(slow).export(finished_spans()) is SpanExportResult.SUCCESS
        assert time.monotonic() - began >= 0.3
        assert exporter_for(slow, timeout=0.1).export(finished_spans()) is SpanExportResult.FAILURE


def test_wait_for_takes_a_predicate_and_names_what_arrived_when_it_times_out(receiver):
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter_for(receiver), schedule_delay_millis=50))
    tracer = provider.get_tracer("agentsite.traces")
    with tracer.start_as_current_span("first"):
        pass
    with tracer.start_as_current_span("second"):
        pass
    spans = receiver.wait_for(lambda spans: {"first", "second"} <= {s.name for s in spans})
    assert len(spans) == 2
    with pytest.raises(AssertionError, match=r"requests brought \['(first|second)', '(first|second)'\]"):
        receiver.wait_for(3, timeout_s=0.2)
    provider.shutdown()


def test_only_protobuf_posts_to_the_traces_path_are_taken(receiver):
    assert requests.post(receiver.endpoint, data=b"{}", headers={"Content-Type": "application/json"},
                         timeout=5).status_code == 415
    assert requests.post(receiver.endpoint.replace("/v1/traces", "/v1/logs"), data=b"",
                         headers={"Content-Type": PROTOBUF}, timeout=5).status_code == 404
    assert requests.post(receiver.endpoint, data=b"\xff\xff", timeout=5,
                         headers={"Content-Type": PROTOBUF}).status_code == 400
    answer = requests.post(receiver.endpoint, data=b"", headers={"Content-Type": PROTOBUF}, timeout=5)
    assert (answer.status_code, answer.headers["content-type"], answer.content) == (200, PROTOBUF, b"")
    assert receiver.requests == 4 and receiver.spans == []


def test_the_receiver_stops_and_frees_its_port():
    receiver = OTLPReceiver().start()
    endpoint = receiver.endpoint
    receiver.stop()
    with pytest.raises(requests.ConnectionError):
        requests.post(endpoint, data=b"", headers={"Content-Type": PROTOBUF}, timeout=2)
