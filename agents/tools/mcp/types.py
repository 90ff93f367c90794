"""What the MCP client takes and gives, as plain data: no SDK here, so that the code that only
builds endpoints or reads results (the registry, the admin, the turn builder) does not pay for
importing the SDK (over a second) in every process."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

HTTP, STDIO = "http", "stdio"


@dataclass(frozen=True)
class Endpoint:
    """Where a server is: ``url`` and ``headers`` (http), or the operator's ``command``,
    ``args`` and ``env`` (stdio). ``name`` is for messages."""

    name: str
    transport: str
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    command: str = ""
    args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RemoteTool:
    name: str
    title: str
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, Any]


@dataclass(frozen=True)
class Discovery:
    protocol_version: str
    server_info: dict[str, Any]
    instructions: str
    tools: list[RemoteTool]
    # How long the server says its tool list may be cached (None: it did not say).
    ttl_s: float | None = None


@dataclass(frozen=True)
class CallResult:
    text: str
    is_error: bool
    protocol_version: str
    session_id: str | None
    duration_ms: float
