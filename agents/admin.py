"""The agents app's admin pages, registered from the rooms that own them: configuration
(providers, agents, routing rules and routes), tools and hooks."""

from __future__ import annotations

from agents.config import admin as providers_admin
from agents.config import agent_admin, routing_admin
from agents.tools import admin as tools_admin
from agents.tools.hooks import admin as hooks_admin
from agents.tools.mcp import admin as mcp_admin

__all__ = ["agent_admin", "hooks_admin", "mcp_admin", "providers_admin", "routing_admin", "tools_admin"]
