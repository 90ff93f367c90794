from __future__ import annotations

from collections.abc import Callable
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from agentsite.access import membership_for
from agentsite.consumers import CLOSE_FORBIDDEN

from . import live
from .models import Trace


class LiveConsumer(AsyncJsonWebsocketConsumer):
    """Base for the live views: authorise the user against the object's team, join its group,
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

    # The model whose rows the socket follows (its ``team`` decides who may), and its group.
    model: Any = None
    group_of: Callable[[str], str]

    async def authorised_group(self, user: Any, uuid: str) -> str | None:
        team_id = await team_of(self.model, uuid)
        if team_id is None or await database_sync_to_async(membership_for)(user, team_id) is None:
            return None
        return type(self).group_of(uuid)

    async def disconnect(self, code: int) -> None:
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """Clients act through HTTP (send, stop, approve); the socket only listens."""

    async def live_event(self, event: dict[str, Any]) -> None:
        await self.send_json(event["payload"])


@database_sync_to_async
def team_of(model: Any, uuid: str) -> int | None:
    try:
        return model.objects.filter(uuid=uuid).values_list("team_id", flat=True).first()
    except (ValueError, TypeError):
        return None


class TraceConsumer(LiveConsumer):
    model = Trace
    group_of = staticmethod(live.trace_group)
