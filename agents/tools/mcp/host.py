"""The stdio servers a process keeps across turns.

A turn's calls share a connection of the turn's own event loop (``pool``), closed when the turn
ends; for an HTTP server that costs a handshake per turn, for a stdio server the start of a
process (seconds, for a server that imports much). So stdio calls go to this process's host: one
event loop on a thread of its own (started by the first stdio call), which keeps one connection
per server and team (``pool``'s kept connections, a team's never lent to another) across turns:

* started on first use; a call after ``HEALTH_AFTER_S`` without one pings the server first, and
  one that died or wedged while idle is stopped and started again before the call goes out;
* at most ``max_calls`` calls in flight on each (the operator's ``StdioLimits``), the others
  waiting their turn, within their own time limit;
* at most ``max_processes`` processes of one server (its teams'): a team's first call when all
  are running stops the least recently used idle one, or waits for one to be idle;
* stopped after ``idle_s`` without a call, and all of them when the process ends
  (``host_stop``: the worker's shutdown, or the interpreter's exit).

A caller's cancellation (a Stop, its time limit) ends its own request on the host's loop, which
tells the server (the SDK's ``notifications/cancelled``), as on a turn's own connection.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
from typing import Any

from agents.runtime.tools import ToolError

from .pool import CLOSE_WAIT_S, Work, close_connections, is_kept, kept_owners, on_kept_connection
from .types import Endpoint, StdioLimits

HEALTH_AFTER_S = 2.0  # a kept server unused this long answers a ping before the next call
ROOM_POLL_S = 0.02  # how often a call waiting for a server's process slot looks again

logger = logging.getLogger(__name__)


def _server(endpoint: Endpoint) -> tuple[Any, ...]:
    """The operator's server an endpoint starts (whatever team's row names it)."""
    return (endpoint.command, tuple(endpoint.args), tuple(sorted(endpoint.env.items())))


class _Host:
    """The thread and event loop that own this process's kept stdio servers."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.gates: dict[tuple[Any, ...], asyncio.Semaphore] = {}
        self.thread = threading.Thread(target=self._run, name="mcp-stdio-host", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    async def serve(self, endpoint: Endpoint, timeout_s: float, work: Work) -> Any:
        limits = endpoint.limits or StdioLimits()
        key = (_server(endpoint), endpoint.team_id, endpoint.name, timeout_s)
        gate = self.gates.get(key)
        if gate is None:
            gate = self.gates[key] = asyncio.Semaphore(limits.max_calls)
        async with gate:
            if not is_kept(endpoint, timeout_s):
                await _room_for(endpoint, limits)
            return await on_kept_connection(endpoint, timeout_s, work, idle_s=limits.idle_s,
                                            check_after_s=HEALTH_AFTER_S)

    def stop(self, timeout_s: float) -> None:
        """Stop every kept server (their processes exit) and the loop."""
        if self.loop.is_closed() or not self.thread.is_alive():
            return
        done = asyncio.run_coroutine_threadsafe(close_connections(), self.loop)
        try:
            done.result(timeout_s)
        except Exception:  # noqa: BLE001 - the process is ending: say so, go on
            logger.warning("the kept MCP stdio servers did not all stop within %g s", timeout_s,
                           exc_info=True)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout_s)
        if not self.thread.is_alive():
            self.loop.close()


async def _room_for(endpoint: Endpoint, limits: StdioLimits) -> None:
    """Wait until one more process of ``endpoint``'s server may start: under
    ``max_processes``, or once the least recently used idle one has stopped."""
    server = _server(endpoint)
    while True:
        running = kept_owners(lambda other: _server(other) == server)
        if len(running) < limits.max_processes:
            return
        idle = next((owner for owner in running if not owner.requests), None)
        if idle is not None:
            idle.retire()
            await asyncio.wait({idle.task}, timeout=CLOSE_WAIT_S)
            return
        await asyncio.sleep(ROOM_POLL_S)


_HOST: _Host | None = None
_HOST_LOCK = threading.Lock()


def _host() -> _Host:
    global _HOST
    with _HOST_LOCK:
        if _HOST is None or _HOST.pid != os.getpid():  # none yet, or a forked parent's
            _HOST = _Host()
        return _HOST


async def on_process_connection(endpoint: Endpoint, timeout_s: float, work: Work) -> Any:
    """``work(connection)`` on this process's kept connection to the stdio server
    ``endpoint`` (started first if there is none), run on the host's loop."""
    host = _host()
    try:
        done = asyncio.run_coroutine_threadsafe(host.serve(endpoint, timeout_s, work), host.loop)
    except RuntimeError as exc:  # its loop closed: the process is stopping
        raise ToolError(f"MCP server “{endpoint.name}”: this process is stopping its servers.",
                        retryable=True) from exc
    return await asyncio.wrap_future(done)


def host_stop(timeout_s: float = CLOSE_WAIT_S) -> None:
    """Stop this process's kept stdio servers (the worker's shutdown; the interpreter's exit);
    a later call starts a new host."""
    global _HOST
    with _HOST_LOCK:
        host, _HOST = _HOST, None
    if host is not None and host.pid == os.getpid():
        host.stop(timeout_s)


atexit.register(host_stop)
