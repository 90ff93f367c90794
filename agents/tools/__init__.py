"""Tools for agents: the registry of built-ins, HTTP tools, the SSRF-safe fetch and the memory
tools. ``runtime_tools`` turns an agent's Tool rows into the runtime tools of one turn."""

from __future__ import annotations

from .context import ToolContext
from .registry import (
    BUILTINS,
    ToolUnavailable,
    loop_tool_timeout,
    runtime_tool_for_row,
    runtime_tools,
)
from .services import tools_sync_builtins, tools_sync_builtins_for_teams

__all__ = [
    "BUILTINS",
    "ToolContext",
    "ToolUnavailable",
    "loop_tool_timeout",
    "runtime_tool_for_row",
    "runtime_tools",
    "tools_sync_builtins",
    "tools_sync_builtins_for_teams",
]
