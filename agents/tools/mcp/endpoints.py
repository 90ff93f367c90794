"""A ``McpServer`` row as an ``Endpoint`` to connect to.

stdio commands come only from the operator: ``settings.MCP_STDIO_SERVERS`` maps a key to
``{"command": ..., "args": [...], "env": {...}}`` and a team's row names a key. Nothing a team
admin types ever becomes a command, an argument or an environment variable. ``"python"`` as
the command is this interpreter (``sys.executable``), so a server installed in the same
virtualenv runs.
"""

from __future__ import annotations

import sys
from typing import Any

from django.conf import settings
from django.urls import reverse

from agents.models import McpServer
from agents.runtime.tools import ToolError
from agentsite.crypto import SecretUnreadable

from .types import HTTP, STDIO, Endpoint, SignInRef, StdioLimits


class McpServerUnusable(ToolError):
    """The row cannot be connected to as it is (unknown operator key, unreadable headers)."""


def stdio_servers() -> dict[str, dict[str, Any]]:
    value = getattr(settings, "MCP_STDIO_SERVERS", None) or {}
    return value if isinstance(value, dict) else {}


def operator_key_problem(key: str) -> str | None:
    if not key:
        return "Choose one of the stdio servers the site operator set up."
    if key not in stdio_servers():
        known = ", ".join(sorted(stdio_servers())) or "none are set up"
        return (f"“{key}” is not a stdio server the site operator set up (MCP_STDIO_SERVERS; "
                f"known: {known}).")
    return None


def sign_in_ref(server: McpServer, user_id: int | None) -> SignInRef | None:
    """Whose sign-in a connection to ``server`` for person ``user_id`` uses (None: it needs
    none): the team's, or with per-person sign-in that person's own."""
    if server.sign_in not in (McpServer.SignIn.TEAM, McpServer.SignIn.PERSON):
        return None
    personal = server.sign_in == McpServer.SignIn.PERSON
    return SignInRef(server_id=server.pk, personal=personal, user_id=user_id if personal else None,
                     url=reverse("mcp_sign_in", args=[server.uuid]))


def endpoint_for(server: McpServer, *, user_id: int | None = None) -> Endpoint:
    """How to reach ``server``; for a server that needs sign-in, with the sign-in of
    ``user_id``'s turn (the team's, or theirs with per-person sign-in)."""
    if server.transport == McpServer.Transport.STDIO:
        problem = operator_key_problem(server.operator_key)
        if problem:
            raise McpServerUnusable(f"MCP server “{server.name}” cannot be started: {problem}")
        spec = stdio_servers()[server.operator_key]
        command = str(spec.get("command") or "")
        if command == "python":
            command = sys.executable
        return Endpoint(name=server.name, transport=STDIO, command=command,
                        args=tuple(str(a) for a in spec.get("args") or ()),
                        env={str(k): str(v) for k, v in (spec.get("env") or {}).items()},
                        team_id=server.team_id, limits=stdio_limits(spec))
    try:
        headers = server.headers()
    except (SecretUnreadable, ValueError) as exc:
        raise McpServerUnusable(f"MCP server “{server.name}”: its stored headers cannot be read "
                                f"({exc}); enter them again.") from exc
    return Endpoint(name=server.name, transport=HTTP, url=server.url, headers=headers,
                    team_id=server.team_id, sign_in=sign_in_ref(server, user_id))


def stdio_limits(spec: dict[str, Any]) -> StdioLimits:
    """An operator's entry's limits (``max_processes``, ``max_calls``, ``idle_s``; the
    configuration has checked them), the defaults for those it leaves out."""
    defaults = StdioLimits()
    return StdioLimits(max_processes=int(spec.get("max_processes", defaults.max_processes)),
                       max_calls=int(spec.get("max_calls", defaults.max_calls)),
                       idle_s=float(spec.get("idle_s", defaults.idle_s)))
