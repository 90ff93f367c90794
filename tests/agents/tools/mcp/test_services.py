"""Discovery and the sync of an MCP server's Tool rows, the runtime tool, the stdio operator
setting, and the URL policy on save."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Annotated

import pytest
from asgiref.sync import async_to_sync
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone
from mcp.server.mcpserver import MCPServer
from pydantic import Field

from agents.models import McpServer, Tool
from agents.runtime.tools import ToolError
from agents.tools import ToolContext, ToolUnavailable, runtime_tool_for_row
from agents.tools.mcp.admin import McpServerForm
from agents.tools.mcp.endpoints import endpoint_for
from agents.tools.mcp.services import (
    DESCRIPTION_MAX_CHARS,
    SCHEMA_MAX_CHARS,
    mcp_refresh_if_stale,
    mcp_server_discover,
    mcp_server_refresh,
    tool_name,
)
from agents.tools.mcp.types import StdioLimits
from agents.tools.services import tools_sync_builtins
from agentsite.config import _mcp_stdio_servers
from agentsite.models import AuditEvent
from tests.agents.tools.mcp.servers import running

pytestmark = pytest.mark.django_db


def http_server(team, url, name="srv", **fields) -> McpServer:
    return McpServer.objects.create(team=team, name=name, transport="http", url=url, **fields)


def test_discover_returns_the_tools_without_saving(team_a, loopback, modern_url) -> None:
    server = http_server(team_a, modern_url)
    found = mcp_server_discover(server)
    assert [t.name for t in found.tools] == ["broken", "calculator", "echo", "huge", "slow"]
    assert not Tool.objects.filter(mcp_server=server).exists()
    server.refresh_from_db()
    assert server.last_refreshed_at is None and server.protocol_version == ""


def test_refresh_syncs_prefixed_rows_and_leaves_builtins_alone(team_a, alice, loopback,
                                                               modern_url) -> None:
    tools_sync_builtins(team_a)
    builtin = Tool.objects.get(team=team_a, name="calculator")
    server = http_server(team_a, modern_url, default_policy="deny")

    result = mcp_server_refresh(server, actor=alice)

    assert result.ok and sorted(result.created) == [
        "srv_broken", "srv_calculator", "srv_echo", "srv_huge", "srv_slow"]
    rows = {r.remote_name: r for r in Tool.objects.filter(mcp_server=server)}
    calc = rows["calculator"]
    assert (calc.name, calc.kind, calc.enabled, calc.policy) == ("srv_calculator", "mcp", True, "deny")
    assert calc.parameters["properties"]["expression"]["type"] == "string"
    assert Tool.objects.get(pk=builtin.pk).kind == "builtin"  # untouched
    server.refresh_from_db()
    assert server.protocol_version == "2026-07-28" and server.server_info["name"] == "test-server"
    assert server.instructions.startswith("Use echo") and server.last_refreshed_at and not server.last_error
    assert AuditEvent.objects.filter(object_type="agents.Tool", action="create").count() == 5

    # Again: nothing changes; a row edited by hand is put back; a team's choices are kept.
    Tool.objects.filter(pk=calc.pk).update(description="changed", policy="allow", enabled=False)
    again = mcp_server_refresh(server, actor=alice)
    assert again.created == [] and again.updated == ["srv_calculator"] and again.deleted == []
    calc.refresh_from_db()
    assert calc.description.startswith("Adds numbers") and (calc.policy, calc.enabled) == ("allow", False)


def test_a_tool_no_longer_offered_is_removed(team_a, loopback, modern_url) -> None:
    server = http_server(team_a, modern_url)
    gone = Tool.objects.create(team=team_a, name="srv_old", kind="mcp", mcp_server=server,
                               remote_name="old")
    result = mcp_server_refresh(server)
    assert result.deleted == ["srv_old"] and not Tool.objects.filter(pk=gone.pk).exists()


def test_names_never_collide_with_builtins_or_each_other(team_a) -> None:
    assert tool_name("srv", "calculator") == "srv_calculator"
    # a server "http" offering "fetch" would otherwise shadow the built-in http_fetch
    clash = tool_name("http", "fetch")
    assert clash != "http_fetch" and clash.startswith("http_fetch_")
    assert tool_name("srv", "a.b c/d") == "srv_a_b_c_d"
    long = tool_name("srv", "x" * 100)
    assert len(long) == 64 and long == tool_name("srv", "x" * 100)  # deterministic
    assert tool_name("srv", "a.b", taken={"srv_a_b"}) != "srv_a_b"


def test_a_failing_refresh_keeps_the_rows_and_records_the_error(team_a, loopback, modern_url,
                                                                garbage_url) -> None:
    server = http_server(team_a, modern_url)
    assert mcp_server_refresh(server).ok
    before = set(Tool.objects.filter(mcp_server=server).values_list("name", flat=True))
    server.url = garbage_url
    server.save()

    result = mcp_server_refresh(server)

    assert not result.ok and "not JSON-RPC" in result.error
    assert set(Tool.objects.filter(mcp_server=server).values_list("name", flat=True)) == before
    server.refresh_from_db()
    assert "MCP server “srv” answered with something that is not JSON-RPC" in server.last_error
    assert server.protocol_version == "2026-07-28"  # what the last good discovery found


def test_refresh_if_stale_refreshes_only_old_lists(team_a, loopback, modern_url) -> None:
    fresh = http_server(team_a, modern_url, name="fresh", ttl_s=3600,
                        last_refreshed_at=timezone.now())
    old = http_server(team_a, modern_url, name="old", ttl_s=60,
                      last_refreshed_at=timezone.now() - timedelta(seconds=61))
    never = http_server(team_a, modern_url, name="off", enabled=False)
    results = mcp_refresh_if_stale([fresh, old, never])
    assert len(results) == 1 and results[0].ok
    assert Tool.objects.filter(mcp_server=old).count() == 5
    assert not Tool.objects.filter(mcp_server__in=[fresh, never]).exists()


def test_the_runtime_tool_calls_the_server_and_reports_meta(team_a, loopback, legacy_url) -> None:
    server = http_server(team_a, legacy_url, timeout_s=7)
    mcp_server_refresh(server)
    row = Tool.objects.get(mcp_server=server, remote_name="echo")
    tool = runtime_tool_for_row(row, ToolContext(team_id=team_a.pk))
    assert tool.timeout_s == 7 and tool.name == "srv_echo"

    result = async_to_sync(tool.execute)({"text": "hello"})

    assert result.success and result.output == "echo: hello"
    mcp = result.meta["mcp"]
    assert (mcp["server"], mcp["tool"], mcp["transport"], mcp["protocol_version"], mcp["method"]) == (
        "srv", "echo", "http", "2025-11-25", "tools/call")
    assert mcp["session_id"]

    broken = runtime_tool_for_row(Tool.objects.get(mcp_server=server, remote_name="broken"),
                                  ToolContext(team_id=team_a.pk))
    outcome = async_to_sync(broken.execute)({})
    assert not outcome.success and "broken" in (outcome.error or "")


def test_a_disabled_server_makes_its_tools_unavailable(team_a) -> None:
    server = http_server(team_a, "https://mcp.example.com/mcp", enabled=False)
    row = Tool.objects.create(team=team_a, name="srv_x", kind="mcp", mcp_server=server,
                              remote_name="x")
    with pytest.raises(ToolUnavailable, match="disabled"):
        runtime_tool_for_row(row, ToolContext(team_id=team_a.pk))


@pytest.mark.slow
def test_the_operators_stdio_server_is_used_by_key(team_a, stdio_time) -> None:
    server = McpServer.objects.create(team=team_a, name="clock", transport="stdio",
                                      operator_key="time")
    assert mcp_server_refresh(server).ok
    row = Tool.objects.get(team=team_a, name="clock_get_current_time")
    assert row.idempotent is True and row.annotations["readOnlyHint"] is True
    tool = runtime_tool_for_row(row, ToolContext(team_id=team_a.pk))
    assert tool.idempotent is True
    result = async_to_sync(tool.execute)({"timezone": "Europe/Paris"})
    assert json.loads(result.output)["timezone"] == "Europe/Paris"
    assert result.meta["mcp"]["transport"] == "stdio"


def test_an_unknown_operator_key_is_a_clear_error(team_a, stdio_time) -> None:
    server = McpServer.objects.create(team=team_a, name="x", transport="stdio",
                                      operator_key="rm-rf")
    with pytest.raises(ToolError, match="“rm-rf” is not a stdio server the site operator set up"):
        endpoint_for(server)
    form = McpServerForm(data={"team": team_a.pk, "name": "y", "transport": "stdio",
                               "operator_key": "rm-rf", "enabled": "on", "default_policy": "ask",
                               "timeout_s": 30, "max_result_bytes": 1000, "ttl_s": 60})
    assert not form.is_valid() and "operator_key" in form.errors


def test_a_stdio_endpoint_is_its_teams_with_the_operators_limits(team_a, team_b, settings) -> None:
    settings.MCP_STDIO_SERVERS = {"time": {"command": "python", "max_processes": 2, "idle_s": 30},
                                  "other": {"command": "/bin/server"}}
    kept = endpoint_for(McpServer(team=team_a, name="a", transport="stdio", operator_key="time"))
    assert (kept.team_id, kept.limits) == (team_a.pk, StdioLimits(max_processes=2, max_calls=8,
                                                                  idle_s=30.0))
    default = endpoint_for(McpServer(team=team_b, name="b", transport="stdio", operator_key="other"))
    assert (default.team_id, default.limits) == (team_b.pk, StdioLimits())


@pytest.mark.parametrize("limits", [{"max_calls": 0}, {"idle_s": "long"}, {"max_processes": True}])
def test_the_operators_limits_must_be_numbers_of_at_least_one(limits) -> None:
    entry = json.dumps({"time": {"command": "python", **limits}})
    with pytest.raises(ImproperlyConfigured, match="max_processes"):
        _mcp_stdio_servers(entry)


def test_a_private_url_is_refused_on_save_unless_allowlisted(team_a, settings) -> None:
    settings.OUTBOUND_ALLOWED_NETWORKS = []
    data = {"team": team_a.pk, "name": "inside", "transport": "http",
            "url": "http://10.0.0.5/mcp", "enabled": "on", "default_policy": "ask",
            "timeout_s": 30, "max_result_bytes": 1000, "ttl_s": 60}
    form = McpServerForm(data=data)
    assert not form.is_valid() and "private address" in str(form.errors["url"])
    settings.OUTBOUND_ALLOWED_NETWORKS = ["10.0.0.0/8"]
    assert McpServerForm(data=data).is_valid()


# -- a server whose words are too long (issue 30, F7) ---------------------------------------------
def test_a_huge_description_and_schema_are_cut_with_a_note(team_a, loopback):
    wordy = MCPServer("wordy", instructions="Read all of this. " * 1_000)
    huge_description = "Counts things. " + "Really. " * 12_500  # about 100 KB

    @wordy.tool(description=huge_description)
    def count(things: str) -> str:
        return str(len(things))

    @wordy.tool(description="Takes options.")
    def configure(option: Annotated[str, Field(description="An option. " * 3_000)]) -> str:
        return option

    with running(wordy.streamable_http_app()) as url:
        server = http_server(team_a, url, name="wordy")
        result = mcp_server_refresh(server)
    assert result.ok, result.error
    count_row = Tool.objects.get(mcp_server=server, remote_name="count")
    assert len(count_row.description) < DESCRIPTION_MAX_CHARS + 100
    assert count_row.description.endswith(f"[cut by agentsite: the server sent {len(huge_description):,} characters]")
    configure_row = Tool.objects.get(mcp_server=server, remote_name="configure")
    assert len(json.dumps(configure_row.parameters)) <= SCHEMA_MAX_CHARS
    assert "option" in configure_row.parameters["properties"]  # the parameter is kept, its words cut
    server.refresh_from_db()
    assert len(server.instructions) < 4_100
    said = " ".join(result.warnings)
    assert "“count”: its description was cut" in said and "tokens a request saved" in said
    assert "“configure”: its parameters' descriptions were cut" in said
    assert "instructions were cut" in said
