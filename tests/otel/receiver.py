"""An OTLP/HTTP trace receiver for tests: a threaded HTTP server on 127.0.0.1 (a free port) that
takes ``POST /v1/traces`` (``application/x-protobuf``, plain, gzip or deflate), decodes the
``ExportTraceServiceRequest`` into plain ``ReceivedSpan`` records and answers 200 with an empty
``ExportTraceServiceResponse``.

Knobs for fault tests: ``delay_s`` (a pause before every answer), ``fail_with(status, times=…,
retry_after=…)`` (the next requests answered with that status), ``requests`` (POSTs received,
failed ones included). ``wait_for(count or predicate, timeout_s)`` returns the spans once the
condition holds. A context manager, or ``start()`` / ``stop()`` from a fixture; ``endpoint`` is
the URL to export to.
"""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

PROTOBUF = "application/x-protobuf"


@dataclass(frozen=True)
class ReceivedEvent:
    name: str
    time_ns: int
    attributes: dict[str, Any]


@dataclass(frozen=True)
class ReceivedLink:
    trace_id: str
    span_id: str
    attributes: dict[str, Any]


@dataclass(frozen=True)
class ReceivedSpan:
    trace_id: str
    span_id: str
    parent_span_id: str | None  # None for a root span
    name: str
    kind: str  # the SDK's name: "INTERNAL", "CLIENT", ...
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[ReceivedEvent]
    links: list[ReceivedLink]
    status_code: str  # "UNSET", "OK" or "ERROR"
    status_message: str
    resource: dict[str, Any]
    scope_name: str
    scope_version: str
    headers: dict[str, str] = field(repr=False)  # of the POST it came in, names in lower case


def any_value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [any_value(item) for item in value.array_value.values]
    if which == "kvlist_value":
        return attributes(value.kvlist_value.values)
    return getattr(value, which)


def attributes(pairs: Iterable[KeyValue]) -> dict[str, Any]:
    return {pair.key: any_value(pair.value) for pair in pairs}


def decode(request: ExportTraceServiceRequest, headers: dict[str, str]) -> list[ReceivedSpan]:
    spans = []
    for resource_spans in request.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(ReceivedSpan(
                    trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                    parent_span_id=span.parent_span_id.hex() or None, name=span.name,
                    kind=Span.SpanKind.Name(span.kind).removeprefix("SPAN_KIND_"),
                    start_ns=span.start_time_unix_nano, end_ns=span.end_time_unix_nano,
                    attributes=attributes(span.attributes),
                    events=[ReceivedEvent(e.name, e.time_unix_nano, attributes(e.attributes))
                            for e in span.events],
                    links=[ReceivedLink(link.trace_id.hex(), link.span_id.hex(),
                                        attributes(link.attributes)) for link in span.links],
                    status_code=Status.StatusCode.Name(span.status.code).removeprefix("STATUS_CODE_"),
                    status_message=span.status.message, resource=resource,
                    scope_name=scope_spans.scope.name, scope_version=scope_spans.scope.version,
                    headers=headers))
    return spans


def inflate(body: bytes, encoding: str) -> bytes:
    if encoding == "gzip":
        return gzip.decompress(body)
    if encoding == "deflate":
        try:
            return zlib.decompress(body)
        except zlib.error:
            return zlib.decompress(body, -zlib.MAX_WBITS)  # raw deflate, without the zlib header
    if encoding in ("", "identity"):
        return body
    raise ValueError(f"unknown Content-Encoding {encoding!r}")


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        length = self.headers.get("Content-Length", "")
        body = self.rfile.read(int(length)) if length.isdigit() else b""
        headers = {name.lower(): value for name, value in self.headers.items()}
        status, extra, content = self.server.receiver.answer(self.path, headers, body)
        try:
            self.send_response(status)
            for name, value in extra.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the exporter gave up waiting (delay_s past its timeout)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # no access log in the test output


class _Server(ThreadingHTTPServer):  # handler threads are daemons
    def __init__(self, receiver: OTLPReceiver) -> None:
        self.receiver = receiver
        super().__init__(("127.0.0.1", 0), _Handler)


class OTLPReceiver:
    def __init__(self, *, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self._failures: list[tuple[int, dict[str, str]]] = []
        self._changed = threading.Condition()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        assert self._server is not None, "the receiver is not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"

    def start(self) -> OTLPReceiver:
        self._server = _Server(self)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="otlp-receiver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> OTLPReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def fail_with(self, status: int, *, times: int = 1, retry_after: str | None = None) -> None:
        """Answer the next ``times`` requests with ``status`` (and ``Retry-After``, when given)."""
        extra = {"Retry-After": retry_after} if retry_after is not None else {}
        with self._changed:
            self._failures.extend([(status, extra)] * times)

    def wait_for(self, condition: int | Callable[[list[ReceivedSpan]], bool] = 1,
                 timeout_s: float = 5.0) -> list[ReceivedSpan]:
        """The spans received, once there are ``condition`` of them or ``condition(spans)`` holds;
        ``AssertionError`` naming what did arrive when ``timeout_s`` passes first."""
        check = (lambda spans: len(spans) >= condition) if isinstance(condition, int) else condition
        with self._changed:
            if not self._changed.wait_for(lambda: check(list(self.spans)), timeout_s):
                raise AssertionError(f"after {timeout_s} s, {self.requests} requests brought "
                                     f"{[span.name for span in self.spans]}")
            return list(self.spans)

    def answer(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
        """Status, headers and body of the answer to one POST."""
        with self._changed:
            self.requests += 1
            failure = self._failures.pop(0) if self._failures else None
            self._changed.notify_all()
        if self.delay_s:
            time.sleep(self.delay_s)
        if failure is not None:
            return failure[0], failure[1], b""
        if path.split("?", 1)[0] != "/v1/traces":
            return 404, {}, b""
        if headers.get("content-type", "").split(";", 1)[0].strip() != PROTOBUF:
            return 415, {}, b""
        try:
            message = ExportTraceServiceRequest.FromString(
                inflate(body, headers.get("content-encoding", "").strip().lower()))
        except (ValueError, OSError, EOFError, zlib.error, DecodeError):
            return 400, {}, b""
        spans = decode(message, headers)
        with self._changed:
            self.spans.extend(spans)
            self._changed.notify_all()
        return 200, {"Content-Type": PROTOBUF}, ExportTraceServiceResponse().SerializeToString()
