"""The connections MCP calls share.

Connections. A discovery opens its own connection (or starts its own stdio process) and closes
it. Calls share kept connections: one per server and event loop (a turn runs in its own loop,
so in practice one per server and turn), opened by the first call, so the probe or handshake,
the SDK's ``tools/list`` for output schemas and, over stdio, the process start happen once per
connection instead of once per call. The SDK's client must be entered and left in one task, so
each kept connection belongs to an owner task: it opens the connection, runs every request it
is handed as a task of its own (calls of one turn run concurrently; the SDK session multiplexes
them) and closes it when told to (``close_connections``, at the end of a turn), after
``IDLE_CLOSE_S`` without calls, when a request fails other than by a time limit or an error the
server answered (an unknown resource leaves the connection as it was), or after
``MAX_UNANSWERED`` calls in a row ran out of time (the next call opens a new connection; a call
is never resent, as the tool may have run). A caller's time limit or cancellation ends its own
request only.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, METHOD_NOT_FOUND, REQUEST_TIMEOUT

from agents.runtime.tools import ToolError
from agents.runtime.tracecontext import TRACEPARENT

from .connection import Connection, connect, explain
from .types import Endpoint

IDLE_CLOSE_S = 60.0  # a kept connection without calls for this long is closed (by default)
PING_S = 5.0  # how long a health check waits for a server's answer to a ping
CLOSE_WAIT_S = 10.0  # how long close_connections waits for an owner (a stdio process to exit)
MAX_UNANSWERED = 2  # calls in a row without an answer (time limit): the server may be wedged
# Errors a server answers about one request (bad parameters, an unknown resource among them;
# an unknown method; -32002, the unknown resource of the 2025 revisions), which leave its
# connection as it was.
ANSWERED = (INVALID_PARAMS, METHOD_NOT_FOUND, -32002)

logger = logging.getLogger(__name__)

Work = Callable[[Connection], Awaitable[Any]]
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
            endpoint.command, tuple(endpoint.args), tuple(sorted(endpoint.env.items())), timeout_s,
            endpoint.team_id, endpoint.sign_in)


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
                 timeout_s: float, idle_s: float | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        self.pool, self.key = pool, key
        self.endpoint, self.timeout_s = endpoint, timeout_s
        self.idle_s = IDLE_CLOSE_S if idle_s is None else idle_s
        self.queue: asyncio.Queue[_Request | str] = asyncio.Queue()
        self.connected: asyncio.Future[Connection] = self.loop.create_future()
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

    async def healthy(self, after_s: float) -> bool:
        """Whether a connection unused for ``after_s`` still answers (``_ping``, within
        ``PING_S``): one whose stdio server died or wedged while it waited is retired here, and
        the call goes to a new one instead of failing. A connection in use, or used more
        recently, is taken as it is."""
        if self.requests or self.loop.time() - self.last_used < after_s:
            return True
        answered = self.submit(_ping)
        if answered is None:
            return False
        try:
            await asyncio.wait_for(answered, PING_S)
        except Exception:  # noqa: BLE001 - whatever keeps it from answering, it is not healthy
            self.retire()
            return False
        return True

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
                            connect(self.endpoint, self.timeout_s))
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

    async def _serve(self, connection: Connection) -> None:
        self._arm_idle_timer(self.idle_s)
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
                if self.requests or idle_for < self.idle_s:
                    self._arm_idle_timer(self.idle_s - idle_for if not self.requests else self.idle_s)
                else:
                    self.retire()
                    closing = True
            else:  # _CLOSE, or a request's end after it
                closing = closing or not self.accepting

    def _arm_idle_timer(self, delay: float) -> None:
        self.idle_timer = self.loop.call_later(max(delay, 0.1), self.queue.put_nowait, _IDLE)

    async def _run(self, connection: Connection, request: _Request) -> None:
        try:
            value = await request.work(connection)
        except asyncio.CancelledError:  # its caller gave up (counted there), or closing
            if not request.result.done():
                request.result.set_exception(self._closed_error())
        except Exception as exc:
            explained = explain(self.endpoint, exc, bridge=connection.bridge,
                                 stderr=connection.stderr)
            if isinstance(explained, TimeoutError) or (
                    isinstance(exc, MCPError) and exc.code == REQUEST_TIMEOUT):
                self.unanswered_call()
            elif not (isinstance(exc, MCPError) and exc.code in ANSWERED
                      and not (connection.bridge and connection.bridge.failure)):
                self.retire()  # the next call gets a new connection
            # (else the server answered that this request was wrong: the connection works)
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


async def _ping(connection: Connection) -> None:
    """A request every server answers, of either revision (the 2026-07-28 revision has no
    ``ping``): the first page of its tools, never from the client's cache."""
    await connection.client.list_tools(cache_mode="bypass")


_POOLS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Pool] = weakref.WeakKeyDictionary()
_POOLS_LOCK = threading.Lock()  # loops of several threads share the mapping


def _pool() -> _Pool:
    loop = asyncio.get_running_loop()
    with _POOLS_LOCK:
        pool = _POOLS.get(loop)
        if pool is None:
            pool = _POOLS[loop] = _Pool()
        return pool


def kept_owners(match: Callable[[Endpoint], bool]) -> list[_Owner]:
    """The owners of this event loop's kept connections (taking calls) to endpoints that
    ``match``, least recently used first."""
    with _POOLS_LOCK:
        pool = _POOLS.get(asyncio.get_running_loop())
    owners = [o for o in pool.kept.values() if match(o.endpoint)] if pool else []
    return sorted(owners, key=lambda o: o.last_used)


def is_kept(endpoint: Endpoint, timeout_s: float) -> bool:
    with _POOLS_LOCK:
        pool = _POOLS.get(asyncio.get_running_loop())
    return pool is not None and _endpoint_key(endpoint, timeout_s) in pool.kept


async def on_kept_connection(endpoint: Endpoint, timeout_s: float, work: Work, *,
                             idle_s: float | None = None, check_after_s: float | None = None) -> Any:
    """``work(connection)`` on the kept connection to ``endpoint`` of this event loop, opened
    first if there is none (or the last one failed); closed after ``idle_s`` without calls
    (``IDLE_CLOSE_S`` by default).
    With ``check_after_s``, a connection unused that long answers a ping first (``healthy``)."""
    pool = _pool()
    key = _endpoint_key(endpoint, timeout_s)
    for _attempt in range(3):
        owner = pool.kept.get(key)
        if owner is None or not owner.accepting:
            owner = _Owner(pool, key, endpoint, timeout_s, idle_s)
        await asyncio.shield(owner.connected)
        if check_after_s is not None and not await owner.healthy(check_after_s):
            continue
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
