"""The agents app's admin pages, registered from the rooms that own them: configuration
(providers, agents, routing rules and routes) and tools."""

from __future__ import annotations

from agents.config import admin as providers_admin
from agents.config import agent_admin, routing_admin
from agents.tools import admin as tools_admin

__all__ = ["agent_admin", "providers_admin", "routing_admin", "tools_admin"]
