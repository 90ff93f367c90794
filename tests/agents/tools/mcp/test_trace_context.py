"""MCP tools carry the tool call's W3C ``traceparent`` (and the caller's ``tracestate``) in the
``tools/call`` request's ``params._meta``: a real server written with the SDK (``meta_server``) answers with the
``_meta`` it received, over Streamable HTTP (the newest revision, and forced to 2025-11-25)
and over stdio. Also the MCP facts of the result: a session id only where the server hands one
out (Streamable HTTP on 2025-11-25)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace as otel_trace

from agents.runtime.events import RecordingObserver, ToolFinished
from agents.runtime.loop import TurnConfig, run_turn
from agents.runtime.tracecontext import traceparent_scope
from agents.tools.mcp.client import _trace_parent
from agents.tools.mcp.pool import close_connections
from agents.tools.mcp.tool import McpTool
from agents.tools.mcp.types import Endpoint
from tests.agents.runtime.scripted_provider import FakeScriptedProvider, answer, calls

from .meta_server import build_meta_server
from .servers import HandshakeOnly, running

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
META_SERVER = Path(__file__).with_name("meta_server.py")


@pytest.fixture(scope="module")
def meta_urls() -> Iterator[dict[str, str]]:
    with running(build_meta_server().streamable_http_app()) as modern, \
            running(HandshakeOnly(build_meta_server().streamable_http_app())) as legacy:
        yield {"modern": modern, "legacy": legacy}


def endpoint(kind: str, urls: dict[str, str]) -> Endpoint:
    if kind == "stdio":
        return Endpoint(name="meta", transport="stdio", command=sys.executable,
                        args=(str(META_SERVER),))
    return Endpoint(name="meta", transport="http", url=urls[kind])


def mcp_tool(kind: str, urls: dict[str, str]) -> McpTool:
    return McpTool(name="meta_request_meta", description="The request's _meta.",
                   parameters={"type": "object", "properties": {"label": {"type": "string"}}},
                   endpoint=endpoint(kind, urls), remote_name="request_meta", timeout_s=20,
                   max_bytes=10_000)


@pytest.mark.parametrize(("kind", "revision", "has_session"), [
    ("modern", "2026-07-28", False), ("legacy", "2025-11-25", True), ("stdio", "2026-07-28", False)])
async def test_the_call_sends_its_traceparent_in_meta(loopback, meta_urls, kind, revision,
                                                      has_session):
    tool = mcp_tool(kind, meta_urls)
    try:
        with traceparent_scope(TRACEPARENT):
            traced = await tool.execute({"label": "traced"})
        with traceparent_scope(TRACEPARENT, "vendor=opaque"):
            with_state = await tool.execute({"label": "with state"})
        plain = await tool.execute({"label": "plain"})
    finally:
        await close_connections()

    assert traced.success and with_state.success and plain.success
    assert json.loads(traced.output)["meta"]["traceparent"] == TRACEPARENT
    assert "tracestate" not in json.loads(traced.output)["meta"]
    meta = json.loads(with_state.output)["meta"]
    assert (meta["traceparent"], meta["tracestate"]) == (TRACEPARENT, "vendor=opaque")
    assert "traceparent" not in json.loads(plain.output)["meta"]
    mcp = traced.meta["mcp"]
    assert (mcp["transport"], mcp["protocol_version"]) == (endpoint(kind, meta_urls).transport,
                                                           revision)
    assert bool(mcp["session_id"]) is has_session


async def test_parallel_calls_on_one_connection_each_send_their_own(loopback, meta_urls):
    tool = mcp_tool("modern", meta_urls)
    provider = FakeScriptedProvider([
        calls((tool.name, {"label": "one"}, "call_1"), (tool.name, {"label": "two"}, "call_2")),
        answer("done")])
    observer = RecordingObserver()

    def traceparent_for(iteration: int, call_id: str) -> str:
        return f"00-0af7651916cd43dd8448eb211c80319c-{int(call_id[-1]):016x}-01"

    try:
        await run_turn(provider=provider, history=[], user_message="go", tools=[tool],
                       config=TurnConfig(model="m", traceparent_for=traceparent_for),
                       observer=observer)
    finally:
        await close_connections()

    received = {json.loads(e.output)["label"]: json.loads(e.output)["meta"]["traceparent"]
                for e in observer.of(ToolFinished)}
    assert received == {"one": "00-0af7651916cd43dd8448eb211c80319c-0000000000000001-01",
                        "two": "00-0af7651916cd43dd8448eb211c80319c-0000000000000002-01"}


def test_the_sdk_s_own_propagation_runs_under_the_calls_span():
    """The SDK writes the current OpenTelemetry span into ``_meta``: during a call that span
    is the tool call's (so with a tracer provider installed the SDK's span is its child)."""
    with _trace_parent({"traceparent": TRACEPARENT}):
        inside = otel_trace.get_current_span().get_span_context()
    with _trace_parent(None):
        untraced = otel_trace.get_current_span().get_span_context()

    assert (f"{inside.trace_id:032x}", f"{inside.span_id:016x}", inside.is_remote) == (
        "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", True)
    assert not untraced.is_valid
    assert not otel_trace.get_current_span().get_span_context().is_valid
