"""The chat's websocket: a conversation's live fragments (``agents.chat.live``), for the people
who may see it (``agents.access``). Text deltas go out as bare frames (``delta_frame``);
everything else as JSON, with the chat's fragments rendered here for the open page
(``chat_payload``)."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async

from agents.access import conversation_visible_to
from agents.models import Conversation
from traces.record import live
from traces.record.consumers import LiveConsumer

from .live import chat_payload, delta_frame


class ConversationConsumer(LiveConsumer):
    model = Conversation
    group_of = staticmethod(live.conversation_group)
    visible = staticmethod(conversation_visible_to)

    async def forward(self, payload: dict[str, Any]) -> None:
        if payload.get("event") == "delta":
            await self.send(text_data=delta_frame(payload))
            return
        if payload.get("event") in ("message", "step", "trace"):
            payload = await database_sync_to_async(chat_payload)(payload, self.scope["user"])
        await self.send_json(payload)
