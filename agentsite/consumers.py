from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer, AsyncWebsocketConsumer
from django.contrib.auth import get_user_model

from .access import membership_for
from .channel_layer import LayerUnavailable
from .live import LISTS_NOTICE_GAP_S, RECHECK_INTERVAL_S, user_group
from .models import Team

logger = logging.getLogger(__name__)

# Close codes in the application range: the browser can tell "not allowed" from a network drop.
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
CLOSE_TRY_LATER = 1013  # RFC 6455's "try again later": the browser reconnects


@database_sync_to_async
def _membership(user: Any, team_uuid: str):
    team = Team.objects.filter(uuid=team_uuid).only("id", "uuid").first()
    return membership_for(user, team) if team else None


@database_sync_to_async
def _user_active(user_id: int) -> bool:
    return get_user_model()._default_manager.filter(pk=user_id, is_active=True).exists()


class AccessCheckedConsumer(AsyncJsonWebsocketConsumer):
    """A socket whose access is checked at connect and again whenever it may have changed: on a
    notice to the user's group (``agentsite.live.recheck_sockets``) and, before forwarding a
    frame, once the last check is older than ``RECHECK_INTERVAL_S``. Subclasses say how in
    ``still_allowed`` and call ``join`` instead of ``accept``, and ``may_forward`` before
    sending."""

    recheck_interval_s = RECHECK_INTERVAL_S
    _checked_at = 0.0
    _user_group: str | None = None
    _closed = False

    async def still_allowed(self) -> bool:
        raise NotImplementedError

    async def dispatch(self, message: dict[str, Any]) -> None:
        """As channels' own, without the trip to the sync thread it makes before every message
        to close old database connections: every query here goes through
        ``database_sync_to_async``, which closes them around the call in its own thread, so
        that trip only cost every frame (a text delta, a lists notice) a thread hop, in one
        thread shared by all the process's sockets."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def join(self, *groups: str) -> None:
        """Accepted once in its groups; refused with "try again later" when the channel layer
        does not answer (the page reconnects and re-syncs)."""
        user = self.scope["user"]
        self._user_group = user_group(user.pk)
        try:
            for group in (*groups, self._user_group):
                await self.channel_layer.group_add(group, self.channel_name)
        except LayerUnavailable as exc:
            logger.warning("socket refused: %s", exc)
            self._closed = True
            await self.close(code=CLOSE_TRY_LATER)
            return
        self._checked_at = time.monotonic()
        await self.accept()

    async def leave(self, *groups: str) -> None:
        """Out of its groups; a channel layer that does not answer forgets it by itself (group
        members expire). A lists notice still waiting is dropped."""
        self._closed = True
        if self._lists_later is not None:
            self._lists_later.cancel()
            self._lists_later = None
        try:
            for group in (*groups, self._user_group):
                if group:
                    await self.channel_layer.group_discard(group, self.channel_name)
        except LayerUnavailable as exc:
            logger.info("socket left without leaving its groups: %s", exc)

    async def _check(self) -> bool:
        user = self.scope["user"]
        allowed = await _user_active(user.pk) and await self.still_allowed()
        self._checked_at = time.monotonic()
        if not allowed and not self._closed:
            self._closed = True
            await self.close(code=CLOSE_FORBIDDEN)
        return allowed

    async def may_forward(self) -> bool:
        """False when the socket may no longer listen (it is then closed)."""
        if self._closed:
            return False
        if time.monotonic() - self._checked_at < self.recheck_interval_s:
            return True
        return await self._check()

    async def access_recheck(self, event: dict[str, Any]) -> None:
        if not self._closed:
            await self._check()

    # Whether the page on this socket shows the person's lists (``agentsite.live.LISTS_EVENT``).
    shows_lists = True
    # A page is told its lists changed at most once per ``lists_gap_s``: every start and end of
    # one of its person's turns is announced, and a burst of their turns (200 at once through
    # the API) would otherwise make each of their open pages read its lists hundreds of times.
    # A notice within the gap is folded into one sent when the gap ends, so the last change
    # always reaches the page.
    lists_gap_s = LISTS_NOTICE_GAP_S
    _lists_sent_at = float("-inf")
    _lists_later: asyncio.TimerHandle | None = None
    _lists_sending: asyncio.Task | None = None

    async def lists_changed(self, event: dict[str, Any]) -> None:
        """The person's lists changed: the page reads them again (``{"event": "lists.changed"}``
        becomes the DOM event ``team:lists-changed``). The notice carries nothing (the page reads
        its lists through its own checked requests), so it does not wait for a check of the
        socket's access: that is made before a frame with data goes out, and at once on a
        recheck notice."""
        if not self.shows_lists or self._closed or self._lists_later is not None:
            return
        wait = self._lists_sent_at + self.lists_gap_s - time.monotonic()
        if wait > 0:
            self._lists_later = asyncio.get_running_loop().call_later(wait, self._lists_due)
            return
        await self._send_lists()

    def _lists_due(self) -> None:
        self._lists_later = None
        self._lists_sending = asyncio.ensure_future(self._send_lists())

    async def _send_lists(self) -> None:
        if self._closed:
            return
        self._lists_sent_at = time.monotonic()
        await self.send_json({"event": "lists.changed", "data": {}})


class TeamConsumer(AccessCheckedConsumer):
    """Live team events (members, invitations, later configuration changes) for its members."""

    membership = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        team_uuid = str(self.scope["url_route"]["kwargs"]["team_uuid"])
        self.membership = await _membership(user, team_uuid) if user and user.is_authenticated else None
        if self.membership is None:
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.group = self.membership.team.group_name
        await self.join(self.group)

    async def disconnect(self, code: int) -> None:
        if self.membership is not None:
            await self.leave(self.group)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """The socket is one-way; clients have nothing to say on it."""

    async def still_allowed(self) -> bool:
        self.membership = await _membership(self.scope["user"], str(self.membership.team.uuid))
        return self.membership is not None

    async def team_event(self, event: dict[str, Any]) -> None:
        data = event.get("data") or {}
        if event.get("event") == "members.changed" and data.get("user") == self.membership.user_id:
            # Our own membership changed: removed members stop hearing the team at once.
            if not await self._check():
                return
        elif not await self.may_forward():
            return
        await self.send_json({"event": event.get("event"), "data": data})


class NotFoundConsumer(AsyncWebsocketConsumer):
    """Any websocket path no route serves: closed before the handshake completes, as a 404."""

    async def connect(self) -> None:
        await self.close(code=CLOSE_NOT_FOUND)
