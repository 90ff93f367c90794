"""The address a request came from, for sign-in throttling (django-axes'
``AXES_CLIENT_IP_CALLABLE``).

Without a reverse proxy (``TRUSTED_PROXIES=0``, the default) it is the connection's own
address: a client's ``X-Forwarded-For`` is anyone's to write and is ignored. Behind N proxies,
each appends the address it was reached from to ``X-Forwarded-For``, so the client is the N-th
entry from the right; entries further left were written by the client and are ignored. A
request with fewer entries than that did not come through every proxy: its connection's
address counts. (django-ipware's ``proxy_count`` wants the header to hold exactly the proxies'
own addresses too, which nginx's ``$proxy_add_x_forwarded_for`` does not write, and answers
no address at all otherwise.)
"""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.http import HttpRequest


def client_address(request: HttpRequest) -> str | None:
    remote = request.META.get("REMOTE_ADDR") or None
    proxies = getattr(settings, "TRUSTED_PROXIES", 0)
    if proxies <= 0:
        return remote
    entries = [e.strip() for e in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")
               if e.strip()]
    if len(entries) < proxies:
        return remote
    candidate = entries[-proxies]
    try:
        return str(ipaddress.ip_address(candidate.strip("[]")))
    except ValueError:
        return remote
