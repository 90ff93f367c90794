"""The MCP client against real servers: mcp-server-time over stdio, an SDK server over
Streamable HTTP on the newest revision and forced to 2025-11-25, and hostile ones."""

from __future__ import annotations

import json
import sys

import pytest

from agents.runtime.tools import ToolError
from agents.tools.mcp.client import Endpoint, call_tool, discover

from .servers import free_port

TIME = Endpoint(name="time", transport="stdio", command=sys.executable,
                args=("-m", "mcp_server_time", "--local-timezone", "UTC"))


def http(url: str, name: str = "srv") -> Endpoint:
    return Endpoint(name=name, transport="http", url=url)


@pytest.mark.slow
async def test_it_lists_and_calls_the_time_server_over_stdio() -> None:
    found = await discover(TIME, timeout_s=20)
    assert [t.name for t in found.tools] == ["convert_time", "get_current_time"]
    assert found.protocol_version == "2026-07-28"
    assert found.tools[1].input_schema["properties"]["timezone"]["type"] == "string"

    result = await call_tool(TIME, "get_current_time", {"timezone": "Europe/Paris"},
                             timeout_s=20, max_bytes=10_000)
    answer = json.loads(result.text)
    assert answer["timezone"] == "Europe/Paris" and answer["datetime"][-6:] in ("+01:00", "+02:00")
    assert result.is_error is False and result.session_id is None


@pytest.mark.parametrize(("fixture", "revision", "has_session"), [
    ("modern_url", "2026-07-28", False), ("legacy_url", "2025-11-25", True)])
async def test_it_speaks_the_newest_revision_and_falls_back(request, loopback, fixture, revision,
                                                             has_session) -> None:
    url = request.getfixturevalue(fixture)
    found = await discover(http(url), timeout_s=10)
    assert found.protocol_version == revision
    assert found.server_info["name"] == "test-server" and found.instructions.startswith("Use echo")
    assert [t.name for t in found.tools] == ["broken", "calculator", "echo", "huge", "slow"]

    result = await call_tool(http(url), "echo", {"text": "hi"}, timeout_s=10, max_bytes=1000)
    assert (result.text, result.is_error, result.protocol_version) == ("echo: hi", False, revision)
    assert bool(result.session_id) is has_session


async def test_a_huge_result_is_cut_at_the_limit(loopback, modern_url) -> None:
    result = await call_tool(http(modern_url), "huge", {"size": 50_000}, timeout_s=10,
                             max_bytes=1000)
    head, note = result.text.split("\n", 1)
    assert head == "x" * 1000 and "50000 bytes" in note and "first 1000" in note


async def test_a_tool_error_is_a_failed_result(loopback, modern_url) -> None:
    result = await call_tool(http(modern_url), "broken", {}, timeout_s=10, max_bytes=1000)
    assert result.is_error is True and "broken" in result.text


async def test_a_slow_tool_times_out_within_the_limit(loopback, modern_url) -> None:
    with pytest.raises(ToolError, match="did not answer the call of “slow” within 1.5 s") as caught:
        await call_tool(http(modern_url), "slow", {}, timeout_s=1.5, max_bytes=1000)
    assert caught.value.retryable is True


async def test_malformed_json_rpc_is_a_clear_error(loopback, garbage_url) -> None:
    with pytest.raises(ToolError, match="MCP server “junk” answered with something that is not "
                                        "JSON-RPC"):
        await discover(http(garbage_url, "junk"), timeout_s=5)


async def test_a_private_address_is_refused_before_connecting(settings) -> None:
    settings.OUTBOUND_ALLOWED_NETWORKS = []
    with pytest.raises(ToolError, match="“inside” was not contacted: Refused: 10.1.2.3 is a "
                                        "private address"):
        await discover(http("http://10.1.2.3/mcp", "inside"), timeout_s=5)


async def test_a_server_that_is_down_is_a_clear_error(loopback) -> None:
    with pytest.raises(ToolError, match="MCP server “gone” could not be reached") as caught:
        await discover(http(f"http://127.0.0.1:{free_port()}/mcp", "gone"), timeout_s=5)
    assert caught.value.retryable is True


async def test_a_stdio_command_that_does_not_exist_is_a_clear_error() -> None:
    endpoint = Endpoint(name="nope", transport="stdio", command="/nonexistent/mcp-server")
    with pytest.raises(ToolError, match="MCP server “nope” could not be started"):
        await discover(endpoint, timeout_s=5)
