"""Talking to an MCP server: list its tools, call one. Plain async code around the official
SDK (``mcp`` 2.x); nothing of Django here except the outbound policy the HTTP client goes
through (``transport``).

Protocol: the SDK's ``auto`` mode, i.e. the newest revision it speaks first (2026-07-28:
stateless, a ``server/discover`` probe, no session) and the ``initialize`` handshake of the
older revisions (2025-11-25 and before) when the server does not answer the probe as a modern
server does. One connection per operation: a discovery or a call opens its own connection
(or starts its own stdio process) and closes it, so no state is kept between turns.

Failure is always a ``ToolError`` whose message names the server and what happened: it could
not be reached or started, it was refused by the network policy, it did not answer within
``timeout_s`` (the whole operation, connecting included, is bounded; a stdio process is then
stopped by the SDK's shutdown, which closes its stdin and kills it if it lingers), it answered
something that is not MCP, or it answered with a protocol error.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import tempfile
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import IO, Any

import httpx2
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import Implementation
from pydantic import ValidationError

from agents.runtime.tools import ToolError

from .transport import GuardedBridge

CLIENT_INFO = Implementation(name="agentsite", version="1.0")
MAX_PAGES = 50
STDERR_TAIL = 400
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


# -- connecting -----------------------------------------------------------------------------------
@dataclass
class _Connection:
    client: Client
    bridge: GuardedBridge | None
    stderr: IO[str] | None

    @property
    def session_id(self) -> str | None:
        return self.bridge.session_id if self.bridge else None


@asynccontextmanager
async def _connect(endpoint: Endpoint, timeout_s: float) -> AsyncIterator[_Connection]:
    options: dict[str, Any] = {"mode": "auto", "read_timeout_seconds": timeout_s, "cache": None,
                               "client_info": CLIENT_INFO}
    if endpoint.transport == HTTP:
        bridge = GuardedBridge()
        http = httpx2.AsyncClient(transport=bridge, headers=dict(endpoint.headers),
                                  timeout=httpx2.Timeout(timeout_s), trust_env=False,
                                  follow_redirects=False)
        async with http:
            try:
                async with Client(streamable_http_client(endpoint.url, http_client=http),
                                  **options) as client:
                    yield _Connection(client, bridge, None)
            except BaseException as exc:
                _reraise(_explain(endpoint, exc, bridge=bridge), exc)
    elif endpoint.transport == STDIO:
        params = StdioServerParameters(command=endpoint.command, args=list(endpoint.args),
                                       env=dict(endpoint.env) or None)
        with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as stderr:
            try:
                async with Client(stdio_client(params, errlog=stderr), **options) as client:
                    yield _Connection(client, None, stderr)
            except BaseException as exc:
                _reraise(_explain(endpoint, exc, stderr=stderr), exc)
    else:
        raise ToolError(f"MCP server “{endpoint.name}” has an unknown transport "
                        f"“{endpoint.transport}”.")


async def _bounded(endpoint: Endpoint, timeout_s: float, what: str, work: Any) -> Any:
    try:
        async with asyncio.timeout(timeout_s):
            return await work
    except TimeoutError as exc:
        raise ToolError(f"MCP server “{endpoint.name}” did not answer {what} within "
                        f"{timeout_s:g} s.", retryable=True) from exc


# -- errors ---------------------------------------------------------------------------------------
def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _reraise(explained: BaseException, original: BaseException) -> None:
    if explained is original:
        raise original
    raise explained from original


def _stderr_tail(stderr: IO[str] | None) -> str:
    if stderr is None:
        return ""
    try:
        stderr.flush()
        stderr.seek(0)
        text = stderr.read()[-STDERR_TAIL:].strip()
    except (OSError, ValueError):
        return ""
    return f" Its error output ends with: {text}" if text else ""


def _explain(endpoint: Endpoint, exc: BaseException, *, bridge: GuardedBridge | None = None,
             stderr: IO[str] | None = None) -> BaseException:
    """``exc`` as a ``ToolError`` naming the server (cancellation and timeouts pass through:
    the caller's time limit reports those)."""
    name = f"MCP server “{endpoint.name}”"
    leaves = _leaves(exc)
    for leaf in leaves:
        if isinstance(leaf, ToolError | asyncio.CancelledError | TimeoutError | KeyboardInterrupt
                      | SystemExit):
            return leaf
    if bridge is not None and bridge.refused:
        return ToolError(f"{name} was not contacted: {bridge.refused}")
    leaf = next((e for e in leaves if not isinstance(e, GeneratorExit)), leaves[0])
    if isinstance(leaf, MCPError):
        return _protocol_error(name, leaf, bridge)
    if isinstance(leaf, ValidationError):
        return ToolError(f"{name} sent an answer that is not valid MCP ({_short(leaf)}).")
    if isinstance(leaf, httpx2.HTTPError | OSError) and endpoint.transport == HTTP:
        reason = (bridge.failure if bridge and bridge.failure else str(leaf)) or type(leaf).__name__
        return ToolError(f"{name} could not be reached at {endpoint.url}: {reason}.", retryable=True)
    if isinstance(leaf, OSError | ValueError) and endpoint.transport == STDIO:
        return ToolError(f"{name} could not be started ({leaf}).{_stderr_tail(stderr)}")
    return ToolError(f"{name} failed: {type(leaf).__name__}: {leaf}.{_stderr_tail(stderr)}")


def _protocol_error(name: str, exc: MCPError, bridge: GuardedBridge | None) -> ToolError:
    message = exc.message or "no message"
    if bridge is not None and bridge.failure:
        return ToolError(f"{name} could not be reached: {bridge.failure}.", retryable=True)
    if exc.code == -32700 or "parse" in message.lower():
        return ToolError(f"{name} answered with something that is not JSON-RPC ({_short(message)}).")
    return ToolError(f"{name} answered with an error: {_short(message)} (code {exc.code}).")


def _short(value: Any, limit: int = 300) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- discovery ------------------------------------------------------------------------------------
def _remote_tool(tool: Any) -> RemoteTool:
    annotations = tool.annotations.model_dump(mode="json", by_alias=True, exclude_none=True) \
        if tool.annotations is not None else {}
    title = tool.title or annotations.get("title") or ""
    return RemoteTool(name=tool.name, title=title, description=tool.description or "",
                      input_schema=dict(tool.input_schema or {"type": "object"}),
                      annotations=annotations)


async def _discover(endpoint: Endpoint, timeout_s: float) -> Discovery:
    async with _connect(endpoint, timeout_s) as connection:
        client = connection.client
        tools: list[RemoteTool] = []
        ttl_ms: float | None = None
        cursor: str | None = None
        try:
            for _page in range(MAX_PAGES):
                page = await client.list_tools(cursor=cursor, cache_mode="bypass")
                tools.extend(_remote_tool(t) for t in page.tools)
                page_ttl = getattr(page, "ttl_ms", None)
                if isinstance(page_ttl, int | float) and page_ttl > 0:
                    ttl_ms = page_ttl if ttl_ms is None else min(ttl_ms, page_ttl)
                cursor = page.next_cursor
                if not cursor:
                    break
        except MCPError as exc:
            raise _protocol_error(f"MCP server “{endpoint.name}”", exc, connection.bridge) from exc
        except ValidationError as exc:
            raise ToolError(f"MCP server “{endpoint.name}” sent a tool list that is not valid "
                            f"MCP ({_short(exc)}).") from exc
        info = client.server_info
        return Discovery(
            protocol_version=client.protocol_version,
            server_info=info.model_dump(mode="json", by_alias=True, exclude_none=True) if info else {},
            instructions=client.instructions or "",
            tools=sorted(tools, key=lambda t: t.name),
            ttl_s=ttl_ms / 1000 if ttl_ms else None,
        )


async def discover(endpoint: Endpoint, *, timeout_s: float = 30.0) -> Discovery:
    """The server's protocol revision, identity, instructions and tools (sorted by name)."""
    return await _bounded(endpoint, timeout_s, "with its tool list",
                          _discover(endpoint, timeout_s))


# -- calling --------------------------------------------------------------------------------------
def _describe_block(block: Any) -> str | None:
    """Text blocks as they are; anything else as a short placeholder."""
    kind = getattr(block, "type", "")
    if kind == "text":
        return str(block.text)
    if kind in ("image", "audio"):
        try:
            size = len(base64.b64decode(block.data, validate=False))
        except (binascii.Error, ValueError):
            size = len(block.data or "") * 3 // 4
        return f"[{kind}: {block.mime_type}, {size} bytes]"
    if kind == "resource_link":
        return f"[resource link: {block.uri}" + (f" ({block.name})" if block.name else "") + "]"
    if kind == "resource":
        resource = block.resource
        mime = getattr(resource, "mime_type", None) or "unknown type"
        return f"[resource: {resource.uri} ({mime})]"
    return f"[{kind or 'unknown'} content]"


def result_text(result: Any, max_bytes: int) -> str:
    """The text of a tool result: text blocks joined, other blocks as placeholders,
    ``structuredContent`` as JSON when there is no text; cut at ``max_bytes``."""
    parts = [p for p in (_describe_block(b) for b in result.content or []) if p is not None]
    has_text = any(getattr(b, "type", "") == "text" for b in result.content or [])
    if not has_text and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return truncate("\n".join(parts), max_bytes)


def truncate(text: str, max_bytes: int) -> str:
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    head = data[:max_bytes].decode("utf-8", errors="ignore")
    return (f"{head}\n[… cut: the result was {len(data)} bytes; only the first {max_bytes} "
            "are shown.]")


async def _call(endpoint: Endpoint, name: str, arguments: dict[str, Any], timeout_s: float,
                max_bytes: int, meta: dict[str, Any] | None) -> CallResult:
    started = time.perf_counter()
    async with _connect(endpoint, timeout_s) as connection:
        try:
            result = await connection.client.call_tool(name, arguments, meta=meta)
        except MCPError as exc:
            raise _protocol_error(f"MCP server “{endpoint.name}”", exc, connection.bridge) from exc
        except ValidationError as exc:
            raise ToolError(f"MCP server “{endpoint.name}” sent a result for “{name}” that is "
                            f"not valid MCP ({_short(exc)}).") from exc
        return CallResult(text=result_text(result, max_bytes), is_error=bool(result.is_error),
                          protocol_version=connection.client.protocol_version,
                          session_id=connection.session_id,
                          duration_ms=(time.perf_counter() - started) * 1000)


async def call_tool(endpoint: Endpoint, name: str, arguments: dict[str, Any], *,
                    timeout_s: float, max_bytes: int,
                    meta: dict[str, Any] | None = None) -> CallResult:
    """Call the server's tool ``name`` (its own name, not the prefixed one)."""
    return await _bounded(endpoint, timeout_s, f"the call of “{name}”",
                          _call(endpoint, name, arguments, timeout_s, max_bytes, meta))
