"""ASGI entry point: daphne serves HTTP (Django) and websockets (Channels) from one process.

Websockets pass the Origin check (``agentsite.origin``: the site's own scheme, host and port),
then session authentication; each consumer checks the user's access to what it serves, and
checks again while it is open (``agentsite.live``). A path no route serves is closed as a 404."""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from .origin import SameOriginValidator  # noqa: E402
from .routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
