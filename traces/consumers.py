from __future__ import annotations

from collections.abc import Callable
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from agentsite.consumers import CLOSE_FORBIDDEN

from . import live
from .models import Trace
from .selectors import trace_visible_to


class LiveConsumer(AsyncJsonWebsocketConsumer):
    """Base for the live views: authorise the user (may they see the object?), join its group,
    forward announcements. No business logic here."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        self.group = None
        if user is not None and user.is_authenticated:
            self.group = await self.authorised_group(user, str(self.scope["url_route"]["kwargs"]["uuid"]))
        if self.group is None:
            await self.close(code=CLOSE_FORBIDDEN)
            return
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    # The model whose rows the socket follows, its group, and who may follow one:
    # ``visible(user, uuid)`` (sync), the privacy rule of the model's selectors.
    model: Any = None
    group_of: Callable[[str], str]
    visible: Callable[[Any, str], bool]

    async def authorised_group(self, user: Any, uuid: str) -> str | None:
        if not await database_sync_to_async(type(self).visible)(user, uuid):
            return None
        return type(self).group_of(uuid)

    async def disconnect(self, code: int) -> None:
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """Clients act through HTTP (send, stop, approve); the socket only listens."""

    async def live_event(self, event: dict[str, Any]) -> None:
        await self.send_json(event["payload"])


class TraceConsumer(LiveConsumer):
    model = Trace
    group_of = staticmethod(live.trace_group)
    visible = staticmethod(trace_visible_to)
