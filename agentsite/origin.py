"""The websocket Origin check: a socket is opened only by a page of this site.

Channels' ``AllowedHostsOriginValidator`` compares the Origin's host with ``ALLOWED_HOSTS`` and
ignores its scheme and port, so a page on ``http://localhost:9999`` (any other local service)
could open a socket with the visitor's session. ``SameOriginValidator`` asks what Django's CSRF
check asks of a POST: the Origin must be the site's own origin — the scheme of the socket
(``ws`` → ``http``, ``wss`` → ``https``), and the host and port of its ``Host`` header, which
must be an allowed host — or one of ``CSRF_TRUSTED_ORIGINS`` (for a site behind a proxy that
terminates TLS, list its public ``https://`` origin there). A missing or opaque (``null``)
Origin is refused: browsers always send one.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host

DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(scheme: str, host: str, port: int | None) -> tuple[str, str, int]:
    return scheme.lower(), host.lower().strip("[]"), port or DEFAULT_PORTS.get(scheme.lower(), 0)


def parse_origin(value: str) -> tuple[str, str, int] | None:
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme.lower() not in DEFAULT_PORTS or not parts.hostname:
        return None
    return _origin(parts.scheme, parts.hostname, port)


def own_origin(scope: dict[str, Any], host_header: str) -> tuple[str, str, int] | None:
    """The origin of the site as this socket reached it, if its Host is an allowed host."""
    host, port = split_domain_port(host_header)
    allowed = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]  # what Django allows in DEBUG
    if not host or not validate_host(host, allowed):
        return None
    scheme = "https" if scope.get("scheme") == "wss" else "http"
    try:
        return _origin(scheme, host, int(port) if port else None)
    except ValueError:
        return None


def origin_allowed(scope: dict[str, Any]) -> bool:
    headers = {name.lower(): value for name, value in scope.get("headers", [])}
    origin = parse_origin(headers.get(b"origin", b"").decode("latin-1"))
    if origin is None:
        return False
    trusted = {parse_origin(o) for o in getattr(settings, "CSRF_TRUSTED_ORIGINS", [])}
    if origin in trusted:
        return True
    return origin == own_origin(scope, headers.get(b"host", b"").decode("latin-1"))


class SameOriginValidator:
    """ASGI middleware for websockets: refuse a handshake whose Origin is not the site's own."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] == "websocket" and not origin_allowed(scope):
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)
