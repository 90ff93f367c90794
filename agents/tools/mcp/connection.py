"""Connecting to an MCP server, and what a failure to connect or to get an answer means.

Protocol: the SDK's ``auto`` mode, i.e. the newest revision it speaks first (2026-07-28:
stateless, a ``server/discover`` probe, no session) and the ``initialize`` handshake of the
older revisions (2025-11-25 and before) when the server does not answer the probe as a modern
server does.

Failure is always a ``ToolError`` whose message names the server and what happened: it could
not be reached or started, it was refused by the network policy, it did not answer within
``timeout_s`` (the whole operation, connecting included, is bounded; a call that runs out of
time is cancelled on the server's side and leaves the connection open for the next call), it
answered something that is not MCP, or it answered with a protocol error. Closing a stdio
connection is the SDK's shutdown: it closes the process's stdin and kills it if it lingers.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import IO, Any

import httpx2
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import Implementation
from pydantic import ValidationError

from agents.runtime.tools import ToolError

from . import oauth
from .transport import GuardedBridge
from .types import HTTP, STDIO, Endpoint

CLIENT_INFO = Implementation(name="agentsite", version="1.0")
STDERR_TAIL = 400


# -- connecting -----------------------------------------------------------------------------------
@dataclass
class Connection:
    client: Client
    bridge: GuardedBridge | None
    stderr: IO[str] | None

    @property
    def session_id(self) -> str | None:
        return self.bridge.session_id if self.bridge else None


@asynccontextmanager
async def connect(endpoint: Endpoint, timeout_s: float, *, auth: httpx2.Auth | None = None,
                  message_handler: Any = None) -> AsyncIterator[Connection]:
    """A connection to ``endpoint``; over HTTP with ``auth`` (by default, for a server that
    needs sign-in, the stored sign-in's: ``oauth.auth_for``); ``message_handler`` gets what
    the server sends on its own (the SDK's, e.g. a 2025 server's change notifications)."""
    options: dict[str, Any] = {"mode": "auto", "read_timeout_seconds": timeout_s, "cache": None,
                               "client_info": CLIENT_INFO}
    if message_handler is not None:
        options["message_handler"] = message_handler
    if endpoint.transport == HTTP:
        bridge = GuardedBridge()
        # No read timeout in the HTTP client: a response that never comes would end the whole
        # session there (the SDK takes a transport error as the connection's end), so a slow
        # call would break the kept connection for the calls after it. Each request is bounded
        # by the SDK's ``read_timeout_seconds`` and the caller's own limit instead, and what is
        # still waiting is cancelled when the connection closes.
        if auth is None and endpoint.sign_in is not None:
            auth = oauth.auth_for(endpoint)
        http = httpx2.AsyncClient(transport=bridge, headers=dict(endpoint.headers), auth=auth,
                                  timeout=httpx2.Timeout(timeout_s, read=None), trust_env=False,
                                  follow_redirects=False)
        async with http:
            try:
                async with Client(streamable_http_client(endpoint.url, http_client=http),
                                  **options) as client:
                    yield Connection(client, bridge, None)
            except BaseException as exc:
                _reraise(explain(endpoint, exc, bridge=bridge), exc)
    elif endpoint.transport == STDIO:
        params = StdioServerParameters(command=endpoint.command, args=list(endpoint.args),
                                       env=dict(endpoint.env) or None)
        with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as stderr:
            try:
                async with Client(stdio_client(params, errlog=stderr), **options) as client:
                    yield Connection(client, None, stderr)
            except BaseException as exc:
                _reraise(explain(endpoint, exc, stderr=stderr), exc)
    else:
        raise ToolError(f"MCP server “{endpoint.name}” has an unknown transport "
                        f"“{endpoint.transport}”.")


async def bounded(endpoint: Endpoint, timeout_s: float, what: str, work: Any) -> Any:
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


def explain(endpoint: Endpoint, exc: BaseException, *, bridge: GuardedBridge | None = None,
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
        return protocol_error(name, leaf, bridge)
    if isinstance(leaf, ValidationError):
        return ToolError(f"{name} sent an answer that is not valid MCP ({short(leaf)}).")
    if isinstance(leaf, httpx2.HTTPError | OSError) and endpoint.transport == HTTP:
        reason = (bridge.failure if bridge and bridge.failure else str(leaf)) or type(leaf).__name__
        return ToolError(f"{name} could not be reached at {endpoint.url}: {reason}.", retryable=True)
    if isinstance(leaf, OSError | ValueError) and endpoint.transport == STDIO:
        return ToolError(f"{name} could not be started ({leaf}).{_stderr_tail(stderr)}")
    return ToolError(f"{name} failed: {type(leaf).__name__}: {leaf}.{_stderr_tail(stderr)}")


def protocol_error(name: str, exc: MCPError, bridge: GuardedBridge | None) -> ToolError:
    message = exc.message or "no message"
    if bridge is not None and bridge.failure:
        return ToolError(f"{name} could not be reached: {bridge.failure}.", retryable=True)
    if exc.code == -32700 or "parse" in message.lower():
        return ToolError(f"{name} answered with something that is not JSON-RPC ({short(message)}).")
    return ToolError(f"{name} answered with an error: {short(message)} (code {exc.code}).")


def short(value: Any, limit: int = 300) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
