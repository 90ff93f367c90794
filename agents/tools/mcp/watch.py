"""Listening to MCP servers that announce their changes, so what the site shows of them (the
tools, the chat's prompts, its "+" list of resources) follows without waiting for the tool
list's time to live.

A server can say when its tool, prompt or resource list changed: one of the 2026-07-28
revision when listened to (``subscriptions/listen``, the SDK's ``Client.listen``), one of the
2025 revisions with ``list_changed`` notifications on its session (``client.listen_changes``).
One worker process of the site listens (the oldest alive by its ``TurnWorker`` row: another
takes over when it dies), with a connection to each server that can tell: enabled, reached over
HTTP (a stdio server is started for calls only), without per-person sign-in (with the team's
when it has one), discovered once, and announcing at least one of the three.
Any change announced refreshes the server's discovery (``mcp_server_refresh``: its tools,
prompts and resources, which moves the team's configuration, so pages read them afresh); a
burst of announcements is one refresh (``SETTLE_S``). A stream that is lost is opened again
after a pause (``PAUSE_S`` doubling to ``PAUSE_MAX_S``) and the server refreshed, as
announcements are not replayed. Which servers to listen to is read again every ``SYNC_S``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from agents.models import McpServer, TurnWorker
from agentsite.db import releasing

from . import sdk_client
from .endpoints import McpServerUnusable, endpoint_for
from .services import mcp_server_refresh
from .types import Endpoint

SYNC_S = 30.0
SETTLE_S = 1.0
PAUSE_S, PAUSE_MAX_S = 5.0, 300.0

logger = logging.getLogger(__name__)


def _leader(name: str) -> bool:
    alive = timezone.now() - timedelta(seconds=settings.TURN_WORKER_DEAD_AFTER_S)
    first = (TurnWorker.objects.filter(beat_at__gte=alive, stopping_at__isnull=True)
             .order_by("started_at", "pk").values_list("name", flat=True).first())
    return first == name


def watched(name: str) -> dict[tuple[Any, ...], tuple[int, Endpoint]]:
    """The servers worker ``name`` listens to, by what their connection depends on (nothing
    when another worker listens)."""
    if not _leader(name):
        return {}
    found = {}
    for server in (McpServer.objects.filter(enabled=True, transport=McpServer.Transport.HTTP)
                   .exclude(protocol_version="").exclude(sign_in=McpServer.SignIn.PERSON)):
        try:
            endpoint = endpoint_for(server)
        except McpServerUnusable as exc:
            logger.debug("MCP listening: not server %s: %s", server.name, exc)
            continue
        key = (server.pk, endpoint.url, tuple(sorted(endpoint.headers.items())), server.sign_in,
               server.timeout_s)
        found[key] = (server.pk, endpoint)
    return found


def refresh(server_pk: int) -> None:
    server = McpServer.objects.filter(pk=server_pk, enabled=True).first()
    if server is not None:
        mcp_server_refresh(server)


class Watcher:
    """The listening of one worker process (``start``, ``stop``), in a thread of its own."""

    def __init__(self, name: str, *, sync_s: float = SYNC_S) -> None:
        self.name, self.sync_s = name, sync_s
        self.thread: threading.Thread | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stopped: asyncio.Event | None = None
        self.refreshed = 0  # refreshes made
        self.listening = 0  # streams the servers acknowledged

    def start(self) -> None:
        ready = threading.Event()

        def run() -> None:
            self.loop = asyncio.new_event_loop()
            self.stopped = asyncio.Event()
            ready.set()
            self.loop.run_until_complete(self._main())
            self.loop.close()

        self.thread = threading.Thread(target=run, name="mcp-watch", daemon=True)
        self.thread.start()
        ready.wait(5)

    def stop(self, timeout: float = 10.0) -> None:
        if self.loop is not None and self.stopped is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.stopped.set)
        if self.thread is not None:
            self.thread.join(timeout)

    async def _main(self) -> None:
        assert self.stopped is not None
        tasks: dict[tuple[Any, ...], asyncio.Task[None]] = {}
        while not self.stopped.is_set():
            try:
                wanted = await asyncio.to_thread(releasing(watched), self.name)
            except Exception:  # noqa: BLE001 - the database is away: keep what listens
                logger.warning("MCP listening: the servers could not be read", exc_info=True)
                wanted = None
            if wanted is not None:
                for key in [k for k in tasks if k not in wanted]:
                    tasks.pop(key).cancel()
                for key, (server_pk, endpoint) in wanted.items():
                    if key not in tasks:
                        tasks[key] = asyncio.create_task(self._listen(server_pk, endpoint))
            try:
                await asyncio.wait_for(self.stopped.wait(), self.sync_s)
            except TimeoutError:
                pass
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)

    async def _listen(self, server_pk: int, endpoint: Endpoint) -> None:
        pause, again = PAUSE_S, False

        async def listening() -> None:
            nonlocal pause
            pause = PAUSE_S
            self.listening += 1
            if again:  # announcements are not replayed: what changed while away
                await self._refresh(server_pk)

        while True:
            try:
                if not await sdk_client().listen_changes(endpoint, lambda: self._refresh(server_pk),
                                                         on_listening=listening, settle_s=SETTLE_S):
                    return  # it tells of no change: nothing to listen to
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure: listen again after a pause
                logger.info("MCP listening: server %s (%s): %s: %s; again in %g s", endpoint.name,
                            endpoint.url, type(exc).__name__, exc, pause)
            again = True
            await asyncio.sleep(pause)
            pause = min(pause * 2, PAUSE_MAX_S)

    async def _refresh(self, server_pk: int) -> None:
        await asyncio.to_thread(releasing(refresh), server_pk)
        self.refreshed += 1


_watcher: Watcher | None = None
_lock = threading.Lock()


def mcp_watch_start(name: str) -> None:
    """Start this process's listening (once; it listens while it is the leader)."""
    global _watcher
    with _lock:
        if _watcher is None:
            _watcher = Watcher(name)
            _watcher.start()


def mcp_watch_stop() -> None:
    global _watcher
    with _lock:
        watcher, _watcher = _watcher, None
    if watcher is not None:
        watcher.stop()
