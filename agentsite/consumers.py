from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from .access import membership_for
from .models import Team

# Close codes in the application range: the browser can tell "not allowed" from a network drop.
CLOSE_FORBIDDEN = 4403


@database_sync_to_async
def _membership(user: Any, team_uuid: str):
    team = Team.objects.filter(uuid=team_uuid).only("id", "uuid").first()
    return membership_for(user, team) if team else None


class TeamConsumer(AsyncJsonWebsocketConsumer):
    """Live team events (members, invitations, later configuration changes) for its members."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        team_uuid = str(self.scope["url_route"]["kwargs"]["team_uuid"])
        self.membership = await _membership(user, team_uuid) if user and user.is_authenticated else None
        if self.membership is None:
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.group = self.membership.team.group_name
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if getattr(self, "membership", None) is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """The socket is one-way; clients have nothing to say on it."""

    async def team_event(self, event: dict[str, Any]) -> None:
        data = event.get("data") or {}
        if event.get("event") == "members.changed" and data.get("user") == self.membership.user_id:
            # Our own membership changed: removed members stop hearing the team at once.
            self.membership = await _membership(self.scope["user"], str(self.membership.team.uuid))
            if self.membership is None:
                await self.close(code=CLOSE_FORBIDDEN)
                return
        await self.send_json({"event": event.get("event"), "data": data})
