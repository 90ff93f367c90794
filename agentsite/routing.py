"""Websocket routes of every app, collected for ``asgi.py``."""

from __future__ import annotations

from django.urls import path

from . import consumers

websocket_urlpatterns = [
    path("ws/team/<uuid:team_uuid>/", consumers.TeamConsumer.as_asgi()),
]
