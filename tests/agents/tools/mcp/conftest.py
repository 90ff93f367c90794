"""Fixtures of the MCP tests: real servers (``servers``), loopback allowed by the outbound
policy, the operator's stdio ``time`` server (``mcp-server-time``) and an agent using it, and
the chat of an agent using a "notes" server with resources and prompts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agents.models import McpServer, Tool
from agents.tools.mcp.services import mcp_server_refresh
from agents.turns.services import conversation_create
from tests.members import member_of

from .servers import garbage_http_server, mcp_http_server

TIME_SERVERS = {"time": {"command": "python",
                         "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"], "env": {}}}


@pytest.fixture(scope="module")
def modern_url() -> Iterator[str]:
    with mcp_http_server() as url:
        yield url


@pytest.fixture(scope="module")
def legacy_url() -> Iterator[str]:
    with mcp_http_server(handshake_only=True) as url:
        yield url


@pytest.fixture(scope="module")
def garbage_url() -> Iterator[str]:
    with garbage_http_server() as url:
        yield url


@pytest.fixture
def loopback(settings) -> None:
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.1/32"]


@pytest.fixture
def stdio_time(settings) -> None:
    settings.MCP_STDIO_SERVERS = TIME_SERVERS


@pytest.fixture
def timekeeper(make_agent, team_a, stdio_time):
    """Team A's agent "Timekeeper" whose only tool is the operator's MCP time server's
    ``clock_get_current_time`` (the reference ``mcp-server-time``, over stdio)."""
    server = McpServer.objects.create(team=team_a, name="clock", transport="stdio",
                                      operator_key="time", default_policy="allow")
    assert mcp_server_refresh(server).ok
    agent = make_agent(name="Timekeeper", tools=())
    agent.tools.add(Tool.objects.get(team=team_a, name="clock_get_current_time"))
    return agent


@pytest.fixture(scope="module")
def notes_url() -> Iterator[str]:
    """A server with resources and prompts (``servers.build_server``)."""
    with mcp_http_server(resources=True, prompts=True) as url:
        yield url


@pytest.fixture
def notes(team_a, loopback, notes_url) -> McpServer:
    """Team A's server "notes" (``notes_url``), its tools, resources and prompts discovered."""
    server = McpServer.objects.create(team=team_a, name="notes", transport="http", url=notes_url,
                                      default_policy="allow")
    assert mcp_server_refresh(server).ok
    server.refresh_from_db()
    return server


@pytest.fixture
def writer(make_agent, team_a, notes):
    """An agent that uses one of the notes server's tools, so its prompts and resources are
    offered in its chat."""
    agent = make_agent(name="Writer", tools=())
    agent.tools.add(Tool.objects.get(team=team_a, name="notes_echo"))
    return agent


@pytest.fixture
def writing(writer, alice):
    """alice's conversation with ``writer``."""
    return conversation_create(agent=writer, membership=member_of(alice, writer.team))
