"""Listening to MCP servers that announce their changes (``subscriptions/listen``): a server
written with the SDK adds a resource while the site listens, and the site's list of its
resources (the chat's "+") follows without anyone refreshing it; only the oldest worker alive
listens; and the SDK is still loaded only by the first MCP call or discovery of a process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone
from mcp.server.mcpserver import Context, MCPServer

from agents.models import McpServer, TurnWorker
from agents.tools.mcp import sdk_client
from agents.tools.mcp.endpoints import endpoint_for
from agents.tools.mcp.services import mcp_server_refresh
from agents.tools.mcp.watch import Watcher, watched
from tests.helpers import wait_for

from .servers import running


def changing_server() -> MCPServer:
    """A server whose ``add_note`` tool adds a resource and announces that its list changed."""
    server = MCPServer("changing")

    @server.resource("notes://first", name="first")
    def first() -> str:
        return "The first note."

    @server.tool(description="Adds a note.")
    async def add_note(name: str, ctx: Context) -> str:
        server.resource(f"notes://{name}", name=name)(lambda: f"The note {name}.")
        await ctx.notify_resources_changed()
        return "added"

    return server


@pytest.fixture
def changing_url() -> Iterator[str]:
    with running(changing_server().streamable_http_app()) as url:
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
    assert server.protocol_version == "2026-07-28" and [r["uri"] for r in server.resources] == ["notes://first"]
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
        assert watcher.refreshed == 1
    finally:
        watcher.stop()


@pytest.mark.django_db
def test_only_the_oldest_worker_alive_listens(team_a, loopback):
    McpServer.objects.create(team=team_a, name="modern", transport="http", url="http://127.0.0.1:9/mcp",
                             protocol_version="2026-07-28")
    McpServer.objects.create(team=team_a, name="old", transport="http", url="http://127.0.0.1:9/old",
                             protocol_version="2025-11-25")
    McpServer.objects.create(team=team_a, name="mine", transport="http", url="http://127.0.0.1:9/own",
                             protocol_version="2026-07-28", sign_in="person")
    alive("older", ago_s=60)
    alive("newer")
    assert watched("newer") == {}
    listened = watched("older")
    assert [endpoint.name for _, endpoint in listened.values()] == ["modern"]
    TurnWorker.objects.filter(name="older").update(beat_at=timezone.now() - timedelta(hours=1))
    assert [endpoint.name for _, endpoint in watched("newer").values()] == ["modern"]  # took over


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
