"""Talking to an MCP server: list its tools, call one. Plain async code around the official
SDK (``mcp`` 2.x); nothing of Django here except the outbound policy the HTTP client goes
through (``transport``).

Protocol: the SDK's ``auto`` mode, i.e. the newest revision it speaks first (2026-07-28:
stateless, a ``server/discover`` probe, no session) and the ``initialize`` handshake of the
older revisions (2025-11-25 and before) when the server does not answer the probe as a modern
server does.

Connections. A discovery opens its own connection (or starts its own stdio process) and closes
it. Calls share kept connections: one per server and event loop (a turn runs in its own loop,
so in practice one per server and turn), opened by the first call, so the probe or handshake,
the SDK's ``tools/list`` for output schemas and, over stdio, the process start happen once per
connection instead of once per call. The SDK's client must be entered and left in one task, so
each kept connection belongs to an owner task: it opens the connection, runs every request it
is handed as a task of its own (calls of one turn run concurrently; the SDK session multiplexes
them) and closes it when told to (``close_connections``, at the end of a turn), after
``IDLE_CLOSE_S`` without calls, when a request fails other than by a time limit, or after
``MAX_UNANSWERED`` calls in a row ran out of time (the next call opens a new connection; a call
is never resent, as the tool may have run). A caller's time limit or cancellation ends its own
request only.

Trace context. A call's ``meta`` (``params._meta``) may carry the W3C ``traceparent`` of the
tool call (``tool``). The SDK runs OpenTelemetry's propagation on every request it sends: it
opens a client span in the current OpenTelemetry context and writes that span's
``traceparent`` into ``_meta``, over ours. So the call runs in an OpenTelemetry context whose
parent is our ``traceparent``: without a tracer provider installed (the default) the SDK writes
ours back unchanged; with one, its span is a child of the tool call's span, in the turn's trace,
and the server's spans are children of it.

Failure is always a ``ToolError`` whose message names the server and what happened: it could
not be reached or started, it was refused by the network policy, it did not answer within
``timeout_s`` (the whole operation, connecting included, is bounded; a call that runs out of
time is cancelled on the server's side and leaves the connection open for the next call), it
answered something that is not MCP, or it answered with a protocol error. Closing a stdio
connection is the SDK's shutdown: it closes the process's stdin and kills it if it lingers.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import tempfile
import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import IO, Any

import httpx2
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import REQUEST_TIMEOUT, Implementation
from opentelemetry import context as otel_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from pydantic import ValidationError

from agents.runtime.tools import ToolError
from agents.runtime.tracecontext import TRACEPARENT

from .transport import GuardedBridge
from .types import HTTP, STDIO, CallResult, Discovery, Endpoint, RemoteTool

CLIENT_INFO = Implementation(name="agentsite", version="1.0")
MAX_PAGES = 50
STDERR_TAIL = 400
IDLE_CLOSE_S = 60.0  # a kept connection without calls for this long is closed
CLOSE_WAIT_S = 10.0  # how long close_connections waits for an owner (a stdio process to exit)
MAX_UNANSWERED = 2  # calls in a row without an answer (time limit): the server may be wedged

logger = logging.getLogger(__name__)
W3C_TRACE_CONTEXT = TraceContextTextMapPropagator()


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
        # No read timeout in the HTTP client: a response that never comes would end the whole
        # session there (the SDK takes a transport error as the connection's end), so a slow
        # call would break the kept connection for the calls after it. Each request is bounded
        # by the SDK's ``read_timeout_seconds`` and the caller's own limit instead, and what is
        # still waiting is cancelled when the connection closes.
        http = httpx2.AsyncClient(transport=bridge, headers=dict(endpoint.headers),
                                  timeout=httpx2.Timeout(timeout_s, read=None), trust_env=False,
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


# -- kept connections -----------------------------------------------------------------------------
Work = Callable[[_Connection], Awaitable[Any]]
_CLOSE, _IDLE = "close", "idle"  # what an owner can be told besides a request


@dataclass
class _Request:
    work: Work
    result: asyncio.Future[Any]


def _endpoint_key(endpoint: Endpoint, timeout_s: float) -> tuple[Any, ...]:
    """What makes two calls share a connection: the same server, reached the same way (the
    name too, so messages name the server the caller knows; the time limit too, as the HTTP
    client's own timeouts are set when the connection opens)."""
    return (endpoint.name, endpoint.transport, endpoint.url, tuple(sorted(endpoint.headers.items())),
            endpoint.command, tuple(endpoint.args), tuple(sorted(endpoint.env.items())), timeout_s)


def _consume(future: asyncio.Future[Any]) -> None:
    """Mark a future's exception as seen (a caller that gave up will never read it)."""
    if not future.cancelled():
        future.exception()


class _Pool:
    """The kept connections of one event loop: the one new calls use per endpoint (``kept``)
    and every owner still running (``owners``: also those closing after a failure)."""

    def __init__(self) -> None:
        self.kept: dict[tuple[Any, ...], _Owner] = {}
        self.owners: set[_Owner] = set()


class _Owner:
    """The task that owns one kept connection (see the module docstring)."""

    def __init__(self, pool: _Pool, key: tuple[Any, ...], endpoint: Endpoint,
                 timeout_s: float) -> None:
        self.loop = asyncio.get_running_loop()
        self.pool, self.key = pool, key
        self.endpoint, self.timeout_s = endpoint, timeout_s
        self.queue: asyncio.Queue[_Request | str] = asyncio.Queue()
        self.connected: asyncio.Future[_Connection] = self.loop.create_future()
        self.connected.add_done_callback(_consume)
        self.requests: dict[asyncio.Task[None], _Request] = {}
        self.accepting = True
        self.last_used = self.loop.time()
        self.unanswered = 0  # calls in a row that ended without an answer
        self.idle_timer: asyncio.TimerHandle | None = None
        self.task = self.loop.create_task(self._own(), name=f"MCP connection to {endpoint.name}")
        pool.kept[key] = self
        pool.owners.add(self)

    # -- what callers use --
    def submit(self, work: Work) -> asyncio.Future[Any] | None:
        """``work`` queued for the connection; None when this owner takes no more requests."""
        if not self.accepting:
            return None
        result: asyncio.Future[Any] = self.loop.create_future()
        result.add_done_callback(_consume)
        self.queue.put_nowait(_Request(work, result))
        return result

    def unanswered_call(self) -> None:
        """A call ended without an answer (its time limit); after ``MAX_UNANSWERED`` in a row
        the server may be wedged, and the next call starts afresh."""
        self.unanswered += 1
        if self.unanswered >= MAX_UNANSWERED:
            self.retire()

    def retire(self) -> None:
        """Take no more requests; the owner closes the connection once those under way end."""
        self._leave_kept()
        self.queue.put_nowait(_CLOSE)

    def close(self) -> None:
        """Close now: requests under way are ended."""
        self.retire()
        for task, request in list(self.requests.items()):
            if not request.result.done():
                request.result.set_exception(self._closed_error())
            task.cancel()

    def _leave_kept(self) -> None:
        self.accepting = False
        if self.pool.kept.get(self.key) is self:
            del self.pool.kept[self.key]

    # -- the owner task --
    def _closed_error(self) -> ToolError:
        return ToolError(f"MCP server “{self.endpoint.name}”: the connection was closed before "
                         "it answered.", retryable=True)

    async def _own(self) -> None:
        # This task serves every call of the connection: the tool call that happened to open
        # it is not the current one here (each call sends its own trace context in ``_meta``).
        TRACEPARENT.set(None)
        error: BaseException | None = None
        try:
            async with AsyncExitStack() as stack:
                try:
                    async with asyncio.timeout(self.timeout_s):
                        connection = await stack.enter_async_context(
                            _connect(self.endpoint, self.timeout_s))
                except TimeoutError as exc:
                    raise ToolError(f"MCP server “{self.endpoint.name}” did not answer within "
                                    f"{self.timeout_s:g} s.", retryable=True) from exc
                self.connected.set_result(connection)
                await self._serve(connection)
        except asyncio.CancelledError:
            error = self._closed_error()
            raise
        except ToolError as exc:
            error = exc
        except Exception as exc:  # noqa: BLE001 - reported to the callers, never lost
            error = ToolError(f"MCP server “{self.endpoint.name}” failed: "
                              f"{type(exc).__name__}: {exc}.")
        finally:
            self._leave_kept()
            self.pool.owners.discard(self)
            with _POOLS_LOCK:  # the last owner gone: forget the loop (its owners refer to it)
                if not self.pool.owners and _POOLS.get(self.loop) is self.pool:
                    del _POOLS[self.loop]
            if self.idle_timer is not None:
                self.idle_timer.cancel()
            error = error or self._closed_error()
            if not self.connected.done():
                self.connected.set_exception(error)
            for task, request in list(self.requests.items()):
                if not request.result.done():
                    request.result.set_exception(ToolError(str(error), retryable=getattr(
                        error, "retryable", False)))
                task.cancel()
            while not self.queue.empty():  # requests queued after the last one served
                item = self.queue.get_nowait()
                if isinstance(item, _Request) and not item.result.done():
                    item.result.set_exception(self._closed_error())

    async def _serve(self, connection: _Connection) -> None:
        self._arm_idle_timer(IDLE_CLOSE_S)
        closing = False
        while not (closing and not self.requests):
            item = await self.queue.get()
            if isinstance(item, _Request):
                if item.result.done():  # its caller gave up while it was queued
                    continue
                task = self.loop.create_task(self._run(connection, item))
                self.requests[task] = item
                item.result.add_done_callback(lambda f, t=task: t.cancel() if f.cancelled() else None)
            elif item == _IDLE:
                idle_for = self.loop.time() - self.last_used
                if self.requests or idle_for < IDLE_CLOSE_S:
                    self._arm_idle_timer(IDLE_CLOSE_S - idle_for if not self.requests else IDLE_CLOSE_S)
                else:
                    self.retire()
                    closing = True
            else:  # _CLOSE, or a request's end after it
                closing = closing or not self.accepting

    def _arm_idle_timer(self, delay: float) -> None:
        self.idle_timer = self.loop.call_later(max(delay, 0.1), self.queue.put_nowait, _IDLE)

    async def _run(self, connection: _Connection, request: _Request) -> None:
        try:
            value = await request.work(connection)
        except asyncio.CancelledError:  # its caller gave up (counted there), or closing
            if not request.result.done():
                request.result.set_exception(self._closed_error())
        except Exception as exc:
            explained = _explain(self.endpoint, exc, bridge=connection.bridge,
                                 stderr=connection.stderr)
            if isinstance(explained, TimeoutError) or (
                    isinstance(exc, MCPError) and exc.code == REQUEST_TIMEOUT):
                self.unanswered_call()
            else:
                self.retire()  # the next call gets a new connection
            if not isinstance(explained, Exception):
                explained = ToolError(f"MCP server “{self.endpoint.name}” failed: {explained!r}.")
            if not request.result.done():
                request.result.set_exception(explained)
        else:
            self.unanswered = 0
            if not request.result.done():
                request.result.set_result(value)
        finally:
            self.requests.pop(asyncio.current_task(), None)  # type: ignore[arg-type]
            self.last_used = self.loop.time()
            if not self.accepting:
                self.queue.put_nowait(_CLOSE)  # lets a closing owner see it has nothing left


_POOLS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Pool] = weakref.WeakKeyDictionary()
_POOLS_LOCK = threading.Lock()  # loops of several threads share the mapping


def _pool() -> _Pool:
    loop = asyncio.get_running_loop()
    with _POOLS_LOCK:
        pool = _POOLS.get(loop)
        if pool is None:
            pool = _POOLS[loop] = _Pool()
        return pool


async def _on_kept_connection(endpoint: Endpoint, timeout_s: float, work: Work) -> Any:
    """``work(connection)`` on the kept connection to ``endpoint`` of this event loop, opened
    first if there is none (or the last one failed)."""
    pool = _pool()
    key = _endpoint_key(endpoint, timeout_s)
    for _attempt in range(3):
        owner = pool.kept.get(key)
        if owner is None or not owner.accepting:
            owner = _Owner(pool, key, endpoint, timeout_s)
        await asyncio.shield(owner.connected)
        result = owner.submit(work)
        if result is None:
            continue
        try:
            return await result
        except asyncio.CancelledError:  # a time limit: counted before this caller goes on
            owner.unanswered_call()
            raise
    raise ToolError(f"MCP server “{endpoint.name}”: no connection stayed open long enough for "
                    "the call.", retryable=True)


async def close_connections() -> None:
    """Close every kept connection of the running event loop and wait for them to end (a
    stdio server's process to exit) for up to ``CLOSE_WAIT_S``. Called at the end of a turn."""
    with _POOLS_LOCK:
        pool = _POOLS.get(asyncio.get_running_loop())
    owners = list(pool.owners) if pool else []
    for owner in owners:
        owner.close()
    tasks = {owner.task for owner in owners}
    if not tasks:
        return
    _done, pending = await asyncio.wait(tasks, timeout=CLOSE_WAIT_S)
    for task in pending:
        logger.warning("%s did not close within %g s", task.get_name(), CLOSE_WAIT_S)
        task.cancel()
    if pending:
        await asyncio.wait(pending, timeout=1.0)
    for task in tasks:
        if task.done() and not task.cancelled() and task.exception() is not None:
            logger.debug("%s ended with an error", task.get_name(), exc_info=task.exception())


@contextmanager
def _trace_parent(meta: dict[str, Any] | None) -> Iterator[None]:
    """The OpenTelemetry context of a request whose ``_meta`` names its ``traceparent`` (see
    the module docstring); nothing changes without one."""
    traceparent = (meta or {}).get("traceparent")
    if not isinstance(traceparent, str) or not traceparent:
        yield
        return
    token = otel_context.attach(W3C_TRACE_CONTEXT.extract({"traceparent": traceparent}))
    try:
        yield
    finally:
        otel_context.detach(token)


async def _call(endpoint: Endpoint, name: str, arguments: dict[str, Any], timeout_s: float,
                max_bytes: int, meta: dict[str, Any] | None) -> CallResult:
    started = time.perf_counter()

    async def work(connection: _Connection) -> CallResult:
        try:
            with _trace_parent(meta):
                result = await connection.client.call_tool(name, arguments, meta=meta)
        except ValidationError as exc:
            raise ToolError(f"MCP server “{endpoint.name}” sent a result for “{name}” that is "
                            f"not valid MCP ({_short(exc)}).") from exc
        return CallResult(text=result_text(result, max_bytes), is_error=bool(result.is_error),
                          protocol_version=connection.client.protocol_version,
                          session_id=connection.session_id,
                          duration_ms=(time.perf_counter() - started) * 1000)

    return await _on_kept_connection(endpoint, timeout_s, work)


async def call_tool(endpoint: Endpoint, name: str, arguments: dict[str, Any], *,
                    timeout_s: float, max_bytes: int,
                    meta: dict[str, Any] | None = None) -> CallResult:
    """Call the server's tool ``name`` (its own name, not the prefixed one), on this event
    loop's kept connection to the server."""
    return await _bounded(endpoint, timeout_s, f"the call of “{name}”",
                          _call(endpoint, name, arguments, timeout_s, max_bytes, meta))
