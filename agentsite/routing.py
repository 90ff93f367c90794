"""Websocket routes of every app, collected for ``asgi.py``."""

from __future__ import annotations

from django.urls import path, re_path

from agents.chat.consumers import ConversationConsumer
from traces.record.consumers import TraceConsumer

from . import consumers

websocket_urlpatterns = [
    path("ws/team/<uuid:team_uuid>/", consumers.TeamConsumer.as_asgi()),
    path("ws/traces/<uuid:uuid>/", TraceConsumer.as_asgi()),
    path("ws/conversations/<uuid:uuid>/", ConversationConsumer.as_asgi()),
    # Last: any other path is closed as a 404 instead of raising in the router.
    re_path(r"", consumers.NotFoundConsumer.as_asgi()),
]
