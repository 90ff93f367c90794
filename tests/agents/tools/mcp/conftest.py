"""Fixtures of the MCP tests: real servers (``servers``), loopback allowed by the outbound
policy, and the operator's stdio ``time`` server (``mcp-server-time``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

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
