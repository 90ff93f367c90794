"""Listening to MCP servers that announce their changes: a server written with the SDK (of the
2026-07-28 revision, ``subscriptions/listen``, or of 2025-11-25, ``list_changed`` notifications)
adds a resource while the site listens, and the site's list of its resources (the chat's "+")
follows without anyone refreshing it; only the oldest worker alive
listens; and the SDK is still loaded only by the first MCP call or discovery of a process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.mcpserver import Context, MCPServer

from agents.models import McpServer, TurnWorker
from agents.tools.mcp import sdk_client
from agents.tools.mcp.endpoints import endpoint_for
from agents.tools.mcp.services import mcp_server_refresh
from agents.tools.mcp.watch import Watcher, watched
from tests.helpers import wait_for

from .servers import HandshakeOnly, running


class Announcing(MCPServer):
    """Keeps the sessions that asked for its tools (2025 revisions: a change is announced on
    each session, so a server tells those it knows of)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.sessions: list[Any] = []

    async def _handle_list_tools(self, ctx: Any, params: Any) -> Any:
        if getattr(ctx, "session", None) is not None:
            self.sessions.append(ctx.session)
        return await super()._handle_list_tools(ctx, params)

    async def announce(self) -> None:
        for session in list(self.sessions):
            try:
                await session.send_resource_list_changed()
            except Exception:  # noqa: BLE001 - a session that ended
                self.sessions.remove(session)


def changing_server() -> MCPServer:
    """A server whose ``add_note`` tool adds a resource and announces that its list changed."""
    server = Announcing("changing")

    @server.resource("notes://first", name="first")
    def first() -> str:
        return "The first note."

    @server.tool(description="Adds a note.")
    async def add_note(name: str, ctx: Context) -> str:
        server.resource(f"notes://{name}", name=name)(lambda: f"The note {name}.")
        await ctx.notify_resources_changed()  # to subscriptions/listen streams (2026-07-28)
        await server.announce()  # on the sessions it knows of (2025 revisions)
        return "added"

    # Advertise the 2025 revisions' listChanged (the SDK's server leaves them off unless told).
    lowlevel = server._lowlevel_server
    capabilities = lowlevel.get_capabilities
    lowlevel.get_capabilities = lambda _options=None, *args, **kwargs: capabilities(  # type: ignore[method-assign]
        NotificationOptions(prompts_changed=True, resources_changed=True, tools_changed=True), *args, **kwargs)
    return server


@pytest.fixture(params=["2026-07-28", "2025-11-25"])
def changing_url(request) -> Iterator[str]:
    app = changing_server().streamable_http_app()
    with running(HandshakeOnly(app) if request.param.startswith("2025") else app) as url:
        yield url


def alive(name: str, *, ago_s: float = 0) -> TurnWorker:
    return TurnWorker.objects.create(name=name, beat_at=timezone.now(),
                                     started_at=timezone.now() - timedelta(seconds=ago_s))


@pytest.mark.django_db(transaction=True)
def test_a_resource_the_server_adds_is_listed_without_a_refresh(team_a, loopback, changing_url):
    server = McpServer.objects.create(team=team_a, name="changing", transport="http", url=changing_url,
                                      default_policy="allow")
    assert mcp_server_refresh(server).ok
    server.refresh_from_db()
    assert [r["uri"] for r in server.resources] == ["notes://first"]
    alive("w-1")
    watcher = Watcher("w-1", sync_s=0.2)
    watcher.start()
    try:
        wait_for(lambda: watched("w-1") != {}, what="the server to be listened to")
        wait_for(lambda: watcher.listening, what="the server to acknowledge the listening")
        async_to_sync(sdk_client().call_tool)(endpoint_for(server), "add_note", {"name": "second"},
                                              timeout_s=10, max_bytes=1000)
        wait_for(lambda: "notes://second" in [r["uri"] for r in McpServer.objects.get(pk=server.pk).resources],
                 timeout=15, what="the list to follow the server's announcement")
        wait_for(lambda: watcher.refreshed == 1, what="the refresh to be counted")
        assert watcher.listening == 1
    finally:
        watcher.stop()


@pytest.mark.django_db
def test_only_the_oldest_worker_alive_listens(team_a, loopback):
    McpServer.objects.create(team=team_a, name="modern", transport="http", url="http://127.0.0.1:9/mcp",
                             protocol_version="2026-07-28")
    McpServer.objects.create(team=team_a, name="old", transport="http", url="http://127.0.0.1:9/old",
                             protocol_version="2025-11-25")
    McpServer.objects.create(team=team_a, name="new", transport="http", url="http://127.0.0.1:9/new")
    McpServer.objects.create(team=team_a, name="off", transport="http", url="http://127.0.0.1:9/off",
                             protocol_version="2026-07-28", enabled=False)
    McpServer.objects.create(team=team_a, name="mine", transport="http", url="http://127.0.0.1:9/own",
                             protocol_version="2026-07-28", sign_in="person")
    alive("older", ago_s=60)
    alive("newer")
    assert watched("newer") == {}
    # Discovered, enabled, over HTTP, without per-person sign-in.
    assert sorted(endpoint.name for _, endpoint in watched("older").values()) == ["modern", "old"]
    TurnWorker.objects.filter(name="older").update(beat_at=timezone.now() - timedelta(hours=1))
    assert sorted(endpoint.name for _, endpoint in watched("newer").values()) == ["modern", "old"]  # took over


def test_the_sdk_is_loaded_by_the_first_mcp_call_not_by_a_process_start():
    code = ("import os, sys; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'agentsite.settings');"
            "import django; django.setup();"
            "from django.urls import resolve; resolve('/');"
            "import agents.turns.workers, agents.chat.views, agents.tools.mcp.admin, agents.tools.mcp.views,"
            " agents.turns.builder, agents.tools.registry;"
            "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.'))[:3])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "DEBUG": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
