"""A server's resources, for the agent: discovery lists them (and its templates), the refresh
adds one tool per server that lists any, ``<server>_resources_read``, under the server's policy,
whose call reads a resource by its URI (``resources/read``) on the turn's kept connection. A
real server written with the SDK, over Streamable HTTP."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync

from agents.models import McpServer, Tool
from agents.runtime.tools import ToolError, ToolResult
from agents.tools import ToolContext, runtime_tool_for_row
from agents.tools.mcp import connection
from agents.tools.mcp.pool import close_connections
from agents.tools.mcp.services import mcp_server_discover, mcp_server_refresh
from agents.tools.mcp.transport import GuardedBridge

pytestmark = pytest.mark.django_db


def test_discovery_lists_the_resources_and_templates(team_a, loopback, notes_url, modern_url):
    found = mcp_server_discover(McpServer(team=team_a, name="notes", transport="http", url=notes_url))
    assert sorted((r.uri, r.name, r.template) for r in found.resources) == [
        ("notes://deploy", "deploy", False), ("notes://logo", "logo", False),
        ("notes://welcome", "welcome", False),
        ("notes://{name}", "note", True)]
    assert mcp_server_discover(McpServer(team=team_a, name="plain", transport="http",
                                         url=modern_url)).resources == []


def test_the_refresh_adds_a_tool_that_reads_them_under_the_servers_policy(team_a, loopback,
                                                                          notes_url, modern_url):
    server = McpServer.objects.create(team=team_a, name="notes", transport="http", url=notes_url,
                                      default_policy="ask")
    result = mcp_server_refresh(server)
    assert result.ok and "notes_resources_read" in result.created
    row = Tool.objects.get(team=team_a, name="notes_resources_read")
    assert (row.remote_name, row.policy, row.idempotent) == ("resources/read", "ask", True)
    assert "notes://welcome: welcome — The welcome note. [text/plain]" in row.description
    assert "notes://{name} (a template: fill in the {placeholders}): note — A note by its name." in row.description
    assert row.parameters["required"] == ["uri"]
    plain = McpServer.objects.create(team=team_a, name="plain", transport="http", url=modern_url)
    assert mcp_server_refresh(plain).ok
    assert not Tool.objects.filter(team=team_a, name="plain_resources_read").exists()


def test_the_tool_reads_resources_and_an_unknown_one_keeps_the_connection(team_a, loopback, notes_url,
                                                                          monkeypatch):
    bridges = []

    class Counting(GuardedBridge):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            bridges.append(self)

    monkeypatch.setattr(connection, "GuardedBridge", Counting)
    server = McpServer.objects.create(team=team_a, name="notes", transport="http", url=notes_url,
                                      default_policy="allow")
    assert mcp_server_refresh(server).ok
    tool = runtime_tool_for_row(Tool.objects.get(team=team_a, name="notes_resources_read"),
                                ToolContext(team_id=team_a.pk))
    bridges.clear()

    async def read(uri: str) -> ToolResult | ToolError:
        try:
            return await tool.execute({"uri": uri})
        except ToolError as exc:  # what the loop turns into the failed result the model reads
            return exc

    async def reads() -> list:
        try:
            return [await read(uri) for uri in (
                "notes://welcome", "notes://shopping", "notes://logo", "notes://../nowhere/x", "",
                "notes://welcome")]
        finally:
            await close_connections()

    welcome, shopping, logo, unknown, empty, again = async_to_sync(reads)()
    assert (welcome.success, welcome.output) == (True, "Welcome to the test server.")
    assert (shopping.success, shopping.output) == (True, "Note shopping")
    assert logo.success and logo.output == "[binary: notes://logo (image/png), 100 bytes]"
    assert isinstance(unknown, ToolError) and str(unknown).startswith(
        "MCP server “notes” answered with an error: Unknown resource: notes://../nowhere/x")
    assert again.success and again.output == welcome.output
    assert not empty.success and "uri" in empty.output
    assert welcome.meta["mcp"]["method"] == "resources/read"
    assert json.dumps(welcome.meta)  # plain JSON for the step
    assert len(bridges) == 1  # one connection for every read, the unknown resource's included
