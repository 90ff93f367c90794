"""Talking to an MCP server: list its tools, call one. Plain async code around the official
SDK (``mcp`` 2.x); nothing of Django here except the outbound policy the HTTP client goes
through (``transport``).

The connection and its errors are ``connection``'s; the connections calls share, ``pool``'s.

Trace context. A call's ``meta`` (``params._meta``) may carry the W3C ``traceparent`` of the
tool call (``tool``), and a ``tracestate``. The SDK runs OpenTelemetry's propagation on every request it sends: it
opens a client span in the current OpenTelemetry context and writes that span's
``traceparent`` into ``_meta``, over ours. So the call runs in an OpenTelemetry context whose
parent is our ``traceparent``: without a tracer provider installed (the default) the SDK writes
ours back unchanged; with one, its span is a child of the tool call's span, in the turn's trace,
and the server's spans are children of it.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from opentelemetry import context as otel_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from pydantic import ValidationError

from agents.runtime.tools import ToolError

from .connection import Connection, bounded, connect, protocol_error, short
from .host import on_process_connection
from .pool import on_kept_connection
from .types import STDIO, CallResult, Discovery, Endpoint, RemotePrompt, RemoteResource, RemoteTool

MAX_PAGES = 50
MAX_RESOURCES = 200  # listed per server (and as many templates): the model reads their list
MAX_PROMPTS = 100  # listed per server: people pick them as commands

W3C_TRACE_CONTEXT = TraceContextTextMapPropagator()


# -- discovery ------------------------------------------------------------------------------------
def _remote_tool(tool: Any) -> RemoteTool:
    annotations = tool.annotations.model_dump(mode="json", by_alias=True, exclude_none=True) \
        if tool.annotations is not None else {}
    title = tool.title or annotations.get("title") or ""
    return RemoteTool(name=tool.name, title=title, description=tool.description or "",
                      input_schema=dict(tool.input_schema or {"type": "object"}),
                      annotations=annotations)


async def _discover(endpoint: Endpoint, timeout_s: float) -> Discovery:
    async with connect(endpoint, timeout_s) as connection:
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
            raise protocol_error(f"MCP server “{endpoint.name}”", exc, connection.bridge) from exc
        except ValidationError as exc:
            raise ToolError(f"MCP server “{endpoint.name}” sent a tool list that is not valid "
                            f"MCP ({short(exc)}).") from exc
        info = client.server_info
        return Discovery(
            protocol_version=client.protocol_version,
            server_info=info.model_dump(mode="json", by_alias=True, exclude_none=True) if info else {},
            instructions=client.instructions or "",
            tools=sorted(tools, key=lambda t: t.name),
            ttl_s=ttl_ms / 1000 if ttl_ms else None,
            resources=await _resources(endpoint, connection),
            prompts=await _prompts(connection),
        )


async def _prompts(connection: Connection) -> list[RemotePrompt]:
    """The server's prompts (up to ``MAX_PROMPTS``), when its capabilities say it has prompts;
    a server that fails to list them has none."""
    client = connection.client
    capabilities = getattr(client, "server_capabilities", None)
    if capabilities is None or getattr(capabilities, "prompts", None) is None:
        return []
    found: list[RemotePrompt] = []
    cursor = None
    try:
        for _page in range(MAX_PAGES):
            page = await client.list_prompts(cursor=cursor)
            for item in page.prompts[:MAX_PROMPTS - len(found)]:
                found.append(RemotePrompt(
                    name=item.name, title=item.title or "", description=item.description or "",
                    arguments=tuple({"name": a.name, "description": a.description or "",
                                     "required": bool(a.required)} for a in item.arguments or [])))
            cursor = page.next_cursor
            if not cursor or len(found) >= MAX_PROMPTS:
                break
    except (MCPError, ValidationError):  # its tools still work; it offers no prompts then
        return []
    return sorted(found, key=lambda p: p.name)


async def _resources(endpoint: Endpoint, connection: Connection) -> list[RemoteResource]:
    """The server's resources and templates (up to ``MAX_RESOURCES`` of each), when its
    capabilities say it has resources; a server that fails to list them has none."""
    client = connection.client
    capabilities = getattr(client, "server_capabilities", None)
    if capabilities is None or getattr(capabilities, "resources", None) is None:
        return []
    found: list[RemoteResource] = []
    try:
        for templates in (False, True):
            cursor, listed = None, 0
            for _page in range(MAX_PAGES):
                page = await (client.list_resource_templates if templates else client.list_resources)(
                    cursor=cursor, cache_mode="bypass")
                for item in (page.resource_templates if templates else page.resources):
                    if listed < MAX_RESOURCES:
                        found.append(RemoteResource(
                            uri=str(item.uri_template if templates else item.uri), name=item.name,
                            title=item.title or "", description=item.description or "",
                            mime_type=item.mime_type or "", template=templates))
                        listed += 1
                cursor = page.next_cursor
                if not cursor or listed >= MAX_RESOURCES:
                    break
    except (MCPError, ValidationError):  # its tools still work; it offers no resources then
        return []
    return found


async def discover(endpoint: Endpoint, *, timeout_s: float = 30.0) -> Discovery:
    """The server's protocol revision, identity, instructions and tools (sorted by name)."""
    return await bounded(endpoint, timeout_s, "with its tool list",
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


def _answered(connection: Connection, text: str, started: float, *, is_error: bool = False) -> CallResult:
    """What a request answered, with the connection's protocol and session and the time since
    ``started`` (``time.perf_counter``)."""
    return CallResult(text=text, is_error=is_error, protocol_version=connection.client.protocol_version,
                      session_id=connection.session_id, duration_ms=(time.perf_counter() - started) * 1000)


@contextmanager
def _trace_parent(meta: dict[str, Any] | None) -> Iterator[None]:
    """The OpenTelemetry context of a request whose ``_meta`` names its ``traceparent`` (see
    the module docstring); nothing changes without one."""
    traceparent = (meta or {}).get("traceparent")
    if not isinstance(traceparent, str) or not traceparent:
        yield
        return
    carrier = {"traceparent": traceparent}
    tracestate = (meta or {}).get("tracestate")
    if isinstance(tracestate, str) and tracestate:
        carrier["tracestate"] = tracestate
    token = otel_context.attach(W3C_TRACE_CONTEXT.extract(carrier))
    try:
        yield
    finally:
        otel_context.detach(token)


async def _call(endpoint: Endpoint, name: str, arguments: dict[str, Any], timeout_s: float,
                max_bytes: int, meta: dict[str, Any] | None) -> CallResult:
    started = time.perf_counter()

    async def work(connection: Connection) -> CallResult:
        try:
            with _trace_parent(meta):
                result = await connection.client.call_tool(name, arguments, meta=meta)
        except ValidationError as exc:
            raise ToolError(f"MCP server “{endpoint.name}” sent a result for “{name}” that is "
                            f"not valid MCP ({short(exc)}).") from exc
        return _answered(connection, result_text(result, max_bytes), started, is_error=bool(result.is_error))

    if endpoint.transport == STDIO:  # kept by the process across turns
        return await on_process_connection(endpoint, timeout_s, work)
    return await on_kept_connection(endpoint, timeout_s, work)


async def call_tool(endpoint: Endpoint, name: str, arguments: dict[str, Any], *,
                    timeout_s: float, max_bytes: int,
                    meta: dict[str, Any] | None = None) -> CallResult:
    """Call the server's tool ``name`` (its own name, not the prefixed one), on this event
    loop's kept connection to an HTTP server, or this process's to a stdio server (``host``)."""
    return await bounded(endpoint, timeout_s, f"the call of “{name}”",
                          _call(endpoint, name, arguments, timeout_s, max_bytes, meta))


def resource_text(result: Any, max_bytes: int) -> str:
    """The contents of a ``resources/read`` answer: text as it is, binary contents as a short
    placeholder (the model gets no base64); cut at ``max_bytes``."""
    parts = []
    for item in result.contents or []:
        text = getattr(item, "text", None)
        if isinstance(text, str):
            parts.append(text)
            continue
        blob = getattr(item, "blob", "") or ""
        try:
            size = len(base64.b64decode(blob, validate=False))
        except (binascii.Error, ValueError):
            size = len(blob) * 3 // 4
        parts.append(f"[binary: {item.uri} ({getattr(item, 'mime_type', None) or 'unknown type'}), "
                     f"{size} bytes]")
    return truncate("\n".join(parts), max_bytes)


async def _read(endpoint: Endpoint, uri: str, timeout_s: float, max_bytes: int,
                meta: dict[str, Any] | None, kept: bool) -> CallResult:
    started = time.perf_counter()

    async def work(connection: Connection) -> CallResult:
        try:
            with _trace_parent(meta):
                result = await connection.client.read_resource(uri, meta=meta, cache_mode="bypass")
        except ValidationError as exc:
            raise ToolError(f"MCP server “{endpoint.name}” sent a resource for “{uri}” that is "
                            f"not valid MCP ({short(exc)}).") from exc
        return _answered(connection, resource_text(result, max_bytes), started)

    return await _on_a_connection(endpoint, timeout_s, work, kept=kept)


async def _on_a_connection(endpoint: Endpoint, timeout_s: float, work: Any, *, kept: bool) -> Any:
    """``work(connection)`` on this process's stdio server, or on this event loop's kept
    connection to an HTTP server (``kept``), or on one of its own (outside any turn's loop)."""
    if endpoint.transport == STDIO:
        return await on_process_connection(endpoint, timeout_s, work)
    if kept:
        return await on_kept_connection(endpoint, timeout_s, work)
    async with connect(endpoint, timeout_s) as connection:
        return await work(connection)


async def read_resource(endpoint: Endpoint, uri: str, *, timeout_s: float, max_bytes: int,
                        meta: dict[str, Any] | None = None, kept: bool = True) -> CallResult:
    """Read the server's resource ``uri`` (``resources/read``), on the kept connection a call
    would use (``kept``), or on one of its own."""
    return await bounded(endpoint, timeout_s, f"with the resource “{short(uri, 200)}”",
                         _read(endpoint, uri, timeout_s, max_bytes, meta, kept))


def prompt_text(result: Any, max_bytes: int) -> str:
    """The messages of a ``prompts/get`` answer as one text: each message's text (other
    contents as ``result_text`` names them), a message of the assistant's marked as such."""
    parts = []
    for message in result.messages or []:
        text = _describe_block(message.content) or ""
        parts.append(f"(assistant) {text}" if message.role == "assistant" else text)
    return truncate("\n\n".join(p for p in parts if p), max_bytes)


async def _get_prompt(endpoint: Endpoint, name: str, arguments: dict[str, str], timeout_s: float,
                      max_bytes: int) -> CallResult:
    started = time.perf_counter()

    async def work(connection: Connection) -> CallResult:
        try:
            result = await connection.client.get_prompt(name, arguments)
        except MCPError as exc:
            raise protocol_error(f"MCP server “{endpoint.name}”", exc, connection.bridge) from exc
        except ValidationError as exc:
            raise ToolError(f"MCP server “{endpoint.name}” sent a prompt “{name}” that is not "
                            f"valid MCP ({short(exc)}).") from exc
        return _answered(connection, prompt_text(result, max_bytes), started)

    return await _on_a_connection(endpoint, timeout_s, work, kept=False)  # outside any turn's loop


async def get_prompt(endpoint: Endpoint, name: str, arguments: dict[str, str], *,
                     timeout_s: float, max_bytes: int) -> CallResult:
    """The server's prompt ``name`` filled with ``arguments`` (``prompts/get``), as one text."""
    return await bounded(endpoint, timeout_s, f"with the prompt “{short(name, 100)}”",
                         _get_prompt(endpoint, name, arguments, timeout_s, max_bytes))


LIST_CHANGED = {"notifications/tools/list_changed", "notifications/prompts/list_changed",
                "notifications/resources/list_changed"}
ALIVE_CHECK_S = 60.0  # how often a server of the 2025 revisions is asked whether it is still there


async def listen_changes(endpoint: Endpoint, on_change: Callable[[], Awaitable[None]], *,
                         on_listening: Callable[[], Awaitable[None]] | None = None,
                         settle_s: float = 1.0, timeout_s: float = 30.0) -> bool:
    """Listen to what ``endpoint`` announces (its tool, prompt or resource list changed) and
    await ``on_change()`` after each announcement (a burst, once: after ``settle_s``);
    ``on_listening()`` once listening. A 2026-07-28 server is listened to with
    ``subscriptions/listen``; one of the 2025 revisions sends its ``list_changed``
    notifications on the session's stream, and is asked for its tool list every
    ``ALIVE_CHECK_S`` so a server gone away is noticed. False at once when the server announces
    none of them, True when it ended the stream; raises when the stream cannot be opened or is
    lost."""
    announced = asyncio.Event()

    async def notified(message: Any) -> None:
        if getattr(getattr(message, "root", message), "method", None) in LIST_CHANGED:
            announced.set()

    async with connect(endpoint, timeout_s, message_handler=notified) as connection:
        client = connection.client
        if client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            capabilities = client.server_capabilities
            if not any(getattr(getattr(capabilities, kind, None), "list_changed", False)
                       for kind in ("tools", "prompts", "resources")):
                return False
            await client.list_tools(cache_mode="bypass")  # and whenever quiet: raises when it went away
            if on_listening is not None:
                await on_listening()
            while True:
                try:
                    await asyncio.wait_for(announced.wait(), ALIVE_CHECK_S)
                except TimeoutError:
                    await client.list_tools(cache_mode="bypass")
                    continue
                await asyncio.sleep(settle_s)
                announced.clear()
                await on_change()
        async with client.listen(tools_list_changed=True, prompts_list_changed=True,
                                 resources_list_changed=True) as events:
            honored = events.honored
            if honored is None or not (honored.tools_list_changed or honored.prompts_list_changed
                                       or honored.resources_list_changed):
                return False
            if on_listening is not None:
                await on_listening()
            async for _event in events:
                await asyncio.sleep(settle_s)
                await on_change()
    return True
