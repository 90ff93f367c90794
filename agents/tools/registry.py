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
from agents.runtime.tools import Tool
from agentsite.crypto import SecretUnreadable

from .context import ToolContext
from .http import HttpFetchTool, HttpTool, TemplateError, headers_decrypt
from .memory import MemoryForgetTool, MemoryRecallTool, MemoryStoreTool
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


def runtime_tool_for_row(row: ToolRow, context: ToolContext) -> Tool:
    """The runtime tool for one Tool row, validated and with the row's approval setting;
    ``ToolUnavailable`` when it cannot be built."""
    if row.team_id != context.team_id:
        raise ToolUnavailable(f"{_label(row)} belongs to another team.")
    if row.kind == ToolRow.Kind.HTTP:
        tool: Tool = http_tool(row, context)
    else:
        builtin = BUILTINS.get(row.name) if row.kind == ToolRow.Kind.BUILTIN else None
        if builtin is None:
            raise ToolUnavailable(f"{_label(row)} is not available in this version and was "
                                  "left out of the turn.")
        if builtin.needs_agent and context.agent_id is None:
            raise ToolUnavailable(f"{_label(row)} needs an agent whose memory it uses.")
        tool = builtin.build(row, context)
    return CheckedTool(tool, requires_approval=row.requires_approval)


def loop_tool_timeout(tools: list[Tool], default: float | None) -> float | None:
    """The loop's time limit per tool call: ``default``, raised so that no tool's own limit
    (an HTTP tool may allow up to 300 s) is cut short by it."""
    if default is None:
        return None
    own = [t.timeout_s for t in tools if isinstance(getattr(t, "timeout_s", None), int | float)]
    return max([default, *(limit + TOOL_TIMEOUT_GRACE_S for limit in own)])


def runtime_tools(agent: Agent, *, context: ToolContext) -> tuple[list[Tool], list[str]]:
    """The agent's enabled tools (rows of its own team only) as runtime tools, and a warning
    for each one left out. Disabled tools are not offered."""
    tools: list[Tool] = []
    warnings: list[str] = []
    for row in agent.tools.filter(team_id=agent.team_id, enabled=True).order_by("name"):
        try:
            tools.append(runtime_tool_for_row(row, context))
        except ToolUnavailable as exc:
            message = str(exc)
            if "left out" not in message:
                message += " It was left out of the turn."
            warnings.append(message)
    return tools, warnings
