"""Built-in tools by name, and the runtime tools of an agent's turn.

A built-in is registered here in code: its name, the description and JSON schema the model
sees (also copied to the team's Tool row by ``tools_sync_builtins``), and how to build it for a
turn from its Tool row and the turn's ``ToolContext``. HTTP tools are built from their row.
Every tool is wrapped in ``CheckedTool``, so its arguments are validated against its schema
before each call, and takes ``requires_approval`` from its row. Whether a call may run again
when a turn resumes (``idempotent``) is the code's say for a built-in; an HTTP tool is when it
reads (GET), else when its row says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agents.models import Agent
from agents.models import Tool as ToolRow
from agents.runtime.builtin import CalculatorTool, CurrentTimeTool
from agents.runtime.tools import ASK, DENY, POLICIES, Tool
from agents.team_config import kept
from agentsite.crypto import SecretUnreadable
from agentsite.models import Membership

from .context import ToolContext
from .http import HttpFetchTool, HttpTool, TemplateError, headers_decrypt
from .mcp.endpoints import McpServerUnusable, endpoint_for
from .mcp.tool import McpTool
from .memory import MemoryForgetTool, MemoryRecallTool, MemoryStoreTool
from .names import BUILTIN_NAMES
from .validation import CheckedTool, schema_problem

TOOL_TIMEOUT_GRACE_S = 5.0


class ToolUnavailable(Exception):
    """A tool row that cannot be used in this turn; the message says why."""


@dataclass(frozen=True)
class Builtin:
    name: str
    description: str
    parameters: dict[str, Any]
    build: Callable[[ToolRow, ToolContext], Tool]
    needs_agent: bool = False
    # Whether a team's new row of this tool asks a person first (a destructive tool does);
    # the team can change it in the admin.
    approval_by_default: bool = False
    idempotent: bool = False


BUILTINS: dict[str, Builtin] = {}


def register(cls: type[Tool], build: Callable[[ToolRow, ToolContext], Tool], *,
             needs_agent: bool = False, approval_by_default: bool = False) -> None:
    BUILTIN_NAMES.add(cls.name)
    BUILTINS[cls.name] = Builtin(cls.name, cls.description, dict(cls.parameters), build,
                                 needs_agent, approval_by_default, cls.idempotent)


register(CalculatorTool, lambda row, ctx: CalculatorTool())
register(CurrentTimeTool, lambda row, ctx: CurrentTimeTool(default_timezone=ctx.timezone))
register(MemoryStoreTool, lambda row, ctx: MemoryStoreTool(ctx), needs_agent=True)
register(MemoryRecallTool, lambda row, ctx: MemoryRecallTool(ctx), needs_agent=True)
register(MemoryForgetTool, lambda row, ctx: MemoryForgetTool(ctx), needs_agent=True,
         approval_by_default=True)
register(HttpFetchTool, lambda row, ctx: HttpFetchTool(ctx, timeout_s=row.timeout_s,
                                                       max_bytes=row.max_response_bytes))


def _label(row: ToolRow) -> str:
    return f"Tool “{row.name}” ({row.get_kind_display()})"


def http_tool(row: ToolRow, context: ToolContext) -> HttpTool:
    problem = schema_problem(row.parameters or {"type": "object", "properties": {}})
    if problem:
        raise ToolUnavailable(f"{_label(row)} cannot be used: {problem}")
    try:
        headers = headers_decrypt(row.headers_encrypted)
    except SecretUnreadable as exc:
        raise ToolUnavailable(f"{_label(row)} cannot be used: {exc}") from exc
    try:
        return HttpTool(name=row.name, description=row.description,
                        parameters=row.parameters or {"type": "object", "properties": {}},
                        method=row.http_method or "GET", url_template=row.url_template,
                        headers=headers, timeout_s=row.timeout_s,
                        max_bytes=row.max_response_bytes, context=context,
                        idempotent=row.idempotent)
    except TemplateError as exc:
        raise ToolUnavailable(f"{_label(row)} cannot be used: {exc}") from exc


def mcp_tool(row: ToolRow, context: ToolContext) -> McpTool:
    server = row.mcp_server
    if server is None or server.team_id != row.team_id:
        raise ToolUnavailable(f"{_label(row)} has no MCP server; it was left out of the turn.")
    if not server.enabled:
        raise ToolUnavailable(f"{_label(row)} cannot be used: its MCP server “{server.name}” "
                              "is disabled.")
    schema = row.parameters or {"type": "object", "properties": {}}
    problem = schema_problem(schema)
    if problem:
        raise ToolUnavailable(f"{_label(row)} cannot be used: {problem}")
    try:
        endpoint = endpoint_for(server, user_id=context.user_id)
    except McpServerUnusable as exc:
        raise ToolUnavailable(f"{_label(row)} cannot be used: {exc}") from exc
    return McpTool(name=row.name, description=row.description, parameters=schema,
                   endpoint=endpoint, remote_name=row.remote_name or row.name,
                   timeout_s=float(server.timeout_s), max_bytes=int(server.max_result_bytes),
                   idempotent=bool((row.annotations or {}).get("readOnlyHint")))


def runtime_tool_for_row(row: ToolRow, context: ToolContext) -> Tool:
    """The runtime tool for one Tool row, validated and with the row's approval setting;
    ``ToolUnavailable`` when it cannot be built."""
    if row.team_id != context.team_id:
        raise ToolUnavailable(f"{_label(row)} belongs to another team.")
    if row.kind == ToolRow.Kind.HTTP:
        tool: Tool = http_tool(row, context)
    elif row.kind == ToolRow.Kind.MCP:
        tool = mcp_tool(row, context)
    else:
        builtin = BUILTINS.get(row.name) if row.kind == ToolRow.Kind.BUILTIN else None
        if builtin is None:
            raise ToolUnavailable(f"{_label(row)} is not available in this version and was "
                                  "left out of the turn.")
        if builtin.needs_agent and context.agent_id is None:
            raise ToolUnavailable(f"{_label(row)} needs an agent whose memory it uses.")
        tool = builtin.build(row, context)
    return CheckedTool(tool, policy=row.policy)


def loop_tool_timeout(tools: list[Tool], default: float | None) -> float | None:
    """The loop's time limit per tool call: ``default``, raised so that no tool's own limit
    (an HTTP tool may allow up to 300 s) is cut short by it."""
    if default is None:
        return None
    own = [t.timeout_s for t in tools if isinstance(getattr(t, "timeout_s", None), int | float)]
    return max([default, *(limit + TOOL_TIMEOUT_GRACE_S for limit in own)])


@dataclass(frozen=True)
class Permission:
    """A tool's effective policy in one turn, where it came from, and why (for a denial, the
    sentence the model reads after ``Permission denied:``)."""

    policy: str
    source: str
    reason: str = ""


def _rank(role: str) -> int:
    return Membership.RANKS.get(role, 0)  # type: ignore[call-overload]


def tool_permission(row: ToolRow, agent: Agent, role: str | None) -> Permission:
    """The policy of ``row`` for ``agent``'s turn of a person with ``role``: the agent's own
    setting over the team's, then the role floor (the tool's least role; "ask" tools never run
    for a viewer). No ``role`` (a tool tried outside a person's turn): no floor."""
    override = (agent.tool_policies or {}).get(row.name)
    if override in POLICIES:
        policy, source = override, "agent"
    else:
        policy, source = row.policy, "team"
    if policy == DENY:
        return Permission(DENY, source, f"the {source}'s policy for {row.name} is deny")
    if not role:
        return Permission(policy, source)
    if _rank(role) < _rank(row.min_role):
        return Permission(DENY, "role floor",
                          f"{row.name} runs only in turns of a team {row.min_role} or above; "
                          f"this turn's person is a {role}")
    if policy == ASK and _rank(role) < _rank(Membership.Role.MEMBER):
        return Permission(DENY, "role floor",
                          f"{row.name} needs a person's approval, which a {role}'s turn "
                          "cannot ask for")
    return Permission(policy, source)


def runtime_tools(agent: Agent, *, context: ToolContext,
                  names: list[str] | None = None) -> tuple[list[Tool], list[str]]:
    """The agent's enabled tools (rows of its own team only) as runtime tools, each with its
    effective policy for the turn's person (``tool_permission``), and a warning for each one
    left out. Disabled tools are not offered; denied ones are, and answer "Permission denied".
    ``names``: the team's tools of these names instead of the agent's own (an agent version's
    tools, which a fork may run with although the agent has dropped them since)."""
    tools: list[Tool] = []
    warnings: list[str] = []
    def read() -> list[ToolRow]:
        rows = (agent.tools.all() if names is None else ToolRow.objects.filter(name__in=names))
        return list(rows.filter(team_id=agent.team_id, enabled=True).select_related("mcp_server")
                    .order_by("name"))

    key = ("tool rows", agent.pk, tuple(names) if names is not None else None)
    for row in kept(agent.team_id, key, read):
        try:
            tool = runtime_tool_for_row(row, context)
            permission = tool_permission(row, agent, context.role)
            tool.policy, tool.policy_source = permission.policy, permission.source
            tool.policy_reason = permission.reason
            tools.append(tool)
        except ToolUnavailable as exc:
            message = str(exc)
            if "left out" not in message:
                message += " It was left out of the turn."
            warnings.append(message)
    return tools, warnings
