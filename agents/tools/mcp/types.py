"""What the MCP client takes and gives, as plain data: no SDK here, so that the code that only
builds endpoints or reads results (the registry, the admin, the turn builder) does not pay for
importing the SDK (over a second) in every process."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

HTTP, STDIO = "http", "stdio"
# The remote name of the tool that reads a server's resources (one per server that lists any):
# no tool of a server can be called so, as tool names have no "/".
READ_RESOURCE = "resources/read"


@dataclass(frozen=True)
class Endpoint:
    """Where a server is: ``url`` and ``headers`` (http), or the operator's ``command``,
    ``args`` and ``env`` (stdio). ``name`` is for messages; ``team_id``, whose server it is (a
    connection is never shared across teams, nor across people when it carries a person's
    ``sign_in``). ``limits``: how a process keeps a stdio server
    (``StdioLimits``)."""

    name: str
    transport: str
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    command: str = ""
    args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    team_id: int | None = None
    limits: StdioLimits | None = None
    # For a server that needs sign-in: whose (``oauth``).
    sign_in: SignInRef | None = None


@dataclass(frozen=True)
class SignInRef:
    """Whose OAuth sign-in a connection to a server uses: server ``server_id``'s team sign-in,
    or (``personal``) person ``user_id``'s (None: no person, so none). ``url`` is where it is
    made (for the message that asks for it)."""

    server_id: int
    personal: bool
    user_id: int | None
    url: str


@dataclass(frozen=True)
class StdioLimits:
    """How a process keeps a stdio server (``host``), from its entry in the operator's
    ``MCP_STDIO_SERVERS``: at most ``max_processes`` of it at once (one per team using it),
    ``max_calls`` calls in flight on each (others wait their turn), each stopped after
    ``idle_s`` without a call."""

    max_processes: int = 4
    max_calls: int = 8
    idle_s: float = 300.0


@dataclass(frozen=True)
class RemoteTool:
    name: str
    title: str
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, Any]


@dataclass(frozen=True)
class RemoteResource:
    """A resource the server lists (``uri``), or a template of resources (``uri`` is then its
    RFC 6570 ``uriTemplate``, ``template`` true)."""

    uri: str
    name: str
    title: str = ""
    description: str = ""
    mime_type: str = ""
    template: bool = False


@dataclass(frozen=True)
class RemotePrompt:
    """A prompt the server lists (``prompts/list``): ``arguments`` as the server describes them
    (``name``, ``description``, ``required``)."""

    name: str
    title: str = ""
    description: str = ""
    arguments: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Discovery:
    protocol_version: str
    server_info: dict[str, Any]
    instructions: str
    tools: list[RemoteTool]
    # How long the server says its tool list may be cached (None: it did not say).
    ttl_s: float | None = None
    # Its resources and resource templates, when it offers resources (``resources/list``).
    resources: list[RemoteResource] = field(default_factory=list)
    # Its prompts, when it offers prompts (``prompts/list``).
    prompts: list[RemotePrompt] = field(default_factory=list)


@dataclass(frozen=True)
class CallResult:
    text: str
    is_error: bool
    protocol_version: str
    session_id: str | None
    duration_ms: float
