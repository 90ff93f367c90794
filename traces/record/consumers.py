from __future__ import annotations

from collections.abc import Callable
from typing import Any

from channels.db import database_sync_to_async

from agentsite.consumers import CLOSE_FORBIDDEN, AccessCheckedConsumer

from ..models import Trace
from . import live
from .selectors import trace_visible_to


class LiveConsumer(AccessCheckedConsumer):
    """Base for the live views: authorise the user (may they see the object?), join its group,
    forward announcements while access lasts (``AccessCheckedConsumer``). No business logic
    here."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        self.group = None
        if user is not None and user.is_authenticated:
            self.group = await self.authorised_group(user, str(self.scope["url_route"]["kwargs"]["uuid"]))
        if self.group is None:
            await self.close(code=CLOSE_FORBIDDEN)
            return
        await self.join(self.group)

    # The model whose rows the socket follows, its group, and who may follow one:
    # ``visible(user, uuid)`` (sync), the privacy rule of the model's selectors.
    model: Any = None
    group_of: Callable[[str], str]
    visible: Callable[[Any, str], bool]

    async def authorised_group(self, user: Any, uuid: str) -> str | None:
        if not await database_sync_to_async(type(self).visible)(user, uuid):
            return None
        return type(self).group_of(uuid)

    async def still_allowed(self) -> bool:
        uuid = str(self.scope["url_route"]["kwargs"]["uuid"])
        return await self.authorised_group(self.scope["user"], uuid) is not None

    async def disconnect(self, code: int) -> None:
        if self.group:
            await self.leave(self.group)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """Clients act through HTTP (send, stop, approve); the socket only listens."""

    async def live_event(self, event: dict[str, Any]) -> None:
        if await self.may_forward():
            await self.forward(event["payload"])

    async def forward(self, payload: dict[str, Any]) -> None:
        await self.send_json(payload)


class TraceConsumer(LiveConsumer):
    """The inspector's socket. A turn announces data only; the rows' HTML is rendered here,
    for the pages that are open (``live.inspector_payload``)."""

    model = Trace
    group_of = staticmethod(live.trace_group)
    visible = staticmethod(trace_visible_to)
    shows_lists = False  # the inspector lists nothing of the person's

    async def forward(self, payload: dict[str, Any]) -> None:
        if payload.get("event") in live.RENDERED:
            payload = await database_sync_to_async(live.inspector_payload)(payload)
        await self.send_json(payload)
