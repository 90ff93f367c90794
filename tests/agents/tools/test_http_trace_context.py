"""HTTP tools and webhook hooks carry the tool call's W3C ``traceparent`` (and the caller's
``tracestate``) to a real server on 127.0.0.1 (allowed by the outbound policy): the one
``traceparent_for`` gives the call in a turn, replacing a header of the same name the admin set;
none outside a traced call, and ``http_fetch`` never sends one."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from agents.runtime.events import RecordingObserver, ToolFinished
from agents.runtime.hooks import ToolHooks
from agents.runtime.loop import TurnConfig, run_turn
from agents.runtime.tracecontext import traceparent_scope
from agents.tools.context import ToolContext
from agents.tools.hooks.webhook import WebhookHook
from agents.tools.http import HttpFetchTool, HttpTool
from tests.agents.runtime.scripted_provider import FakeScriptedProvider, answer, calls

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class Server:
    """A real HTTP server that answers every GET with the headers it received, and every POST
    (a webhook hook's) with an "allow" decision, keeping its headers too."""

    def __init__(self) -> None:
        self.received: list[dict[str, str]] = []
        self.hooked: list[dict[str, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                headers = {name.lower(): value for name, value in self.headers.items()}
                server.received.append(headers)
                body = json.dumps(headers).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                server.hooked.append({name.lower(): value for name, value in self.headers.items()})
                body = json.dumps({"decision": "allow"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"


@pytest.fixture
def server(settings) -> Iterator[Server]:
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    running = Server()
    thread = threading.Thread(target=running.httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield running
    finally:
        running.httpd.shutdown()
        running.httpd.server_close()


def http_tool(server: Server, headers: tuple[tuple[str, str], ...] = ()) -> HttpTool:
    return HttpTool(name="status", description="The service's status.",
                    parameters={"type": "object", "properties": {}}, method="GET",
                    url_template=f"{server.url}/status", headers=list(headers), timeout_s=5,
                    max_bytes=10_000, context=ToolContext(team_id=1))


async def test_in_a_traced_turn_the_call_sends_its_traceparent(server):
    tool = http_tool(server)
    provider = FakeScriptedProvider([calls(("status", {}, "call_1")), answer("up")])
    observer = RecordingObserver()
    made: list[tuple[int, str]] = []

    def traceparent_for(iteration: int, call_id: str) -> str:
        made.append((iteration, call_id))
        return TRACEPARENT

    await run_turn(provider=provider, config=TurnConfig(model="m", traceparent_for=traceparent_for),
                   history=[], user_message="Is it up?", tools=[tool], observer=observer)

    assert observer.of(ToolFinished)[0].success
    assert made == [(1, "call_1")]
    assert [r.get("traceparent") for r in server.received] == [TRACEPARENT]


async def test_the_callers_tracestate_goes_with_it_to_the_tool_and_its_webhook_hook(server):
    tool = http_tool(server, (("tracestate", "admin=stale"),))
    hook = WebhookHook(name="audit", url=f"{server.url}/hook", secret="s3cret")
    provider = FakeScriptedProvider([calls(("status", {}, "call_1")), answer("up")])
    config = TurnConfig(model="m", traceparent_for=lambda iteration, call_id: TRACEPARENT,
                        tracestate="vendor=opaque,other=1")

    await run_turn(provider=provider, config=config, history=[], user_message="Is it up?",
                   tools=[tool], tool_hooks=ToolHooks(pre=[hook], post=[hook]))

    sent = [(r["traceparent"], r["tracestate"]) for r in [*server.hooked, *server.received]]
    assert sent == [(TRACEPARENT, "vendor=opaque,other=1")] * 3  # the two hooks and the call
    # Outside the call, the hook sends none.
    await hook.run("PreToolUse", {"tool_name": "status"})
    assert "traceparent" not in server.hooked[-1] and "tracestate" not in server.hooked[-1]


async def test_the_calls_traceparent_replaces_the_admins_header(server):
    tool = http_tool(server, (("TraceParent", "00-11111111111111111111111111111111-2222222222222222-01"),
                              ("X-Api-Key", "key-0123456789")))

    with traceparent_scope(TRACEPARENT):
        result = await tool.execute({})

    assert result.success
    assert server.received[0]["traceparent"] == TRACEPARENT
    assert server.received[0]["x-api-key"] == "key-0123456789"
    assert tool.headers["TraceParent"].startswith("00-1111")  # the tool's own headers are kept


async def test_outside_a_traced_call_no_traceparent_is_added(server):
    plain = http_tool(server)
    admins = http_tool(server, (("traceparent", "00-11111111111111111111111111111111-2222222222222222-01"),))

    await plain.execute({})
    await admins.execute({})

    assert "traceparent" not in server.received[0]
    assert server.received[1]["traceparent"].startswith("00-1111")


async def test_http_fetch_never_sends_one(server):
    with traceparent_scope(TRACEPARENT):
        result = await HttpFetchTool(ToolContext(team_id=1), timeout_s=5).execute(
            {"url": f"{server.url}/page"})

    assert result.success
    assert "traceparent" not in server.received[0]
