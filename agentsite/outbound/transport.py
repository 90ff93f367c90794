"""``GuardedTransport``: the outbound policy (``agentsite.outbound``) as an ``httpx`` transport,
for clients whose URLs an admin sets (model providers, their connection test, MCP servers,
webhooks). Every request — so every redirect hop a client follows — has its host resolved once,
each address vetted, and the connection made to the vetted address (``Host`` and TLS SNI keep
the name). Its TLS context (``tls_context``) is built once per process: building one loads the
CA bundle (tens of milliseconds), which every client made per request or per tool call would
otherwise pay.
"""

from __future__ import annotations

import asyncio
import functools
import socket
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from . import IPAddress, OutboundRefused, check_addresses, parse_ip

AsyncResolver = Callable[[str, int], Awaitable[list[str]]]


async def async_system_resolver(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


class OutboundBlocked(httpx.UnsupportedProtocol):
    """A request the policy refused before connecting. (An ``UnsupportedProtocol``, so clients
    treat it as a request that cannot be made, not as a network failure worth retrying.)"""


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS context of the guarded clients: the one httpx builds for ``verify=True`` (the CA
    bundle, or ``SSL_CERT_FILE``/``SSL_CERT_DIR``), built on first use and shared by every
    ``GuardedTransport`` of the process (an ``SSLContext`` may serve many connections and
    threads; httpx recommends sharing one)."""
    return httpx.create_ssl_context()


class GuardedTransport(httpx.AsyncBaseTransport):
    """``inner`` (a plain ``AsyncHTTPTransport`` on the shared ``tls_context`` by default) behind
    the policy: each request's host is resolved once, every address vetted, and the connection
    pinned to a vetted address. ``resolver``: for tests."""

    def __init__(self, inner: httpx.AsyncBaseTransport | None = None, *,
                 resolver: AsyncResolver = async_system_resolver) -> None:
        self._inner = inner or httpx.AsyncHTTPTransport(retries=0, verify=tls_context())
        self._resolver = resolver

    async def _vetted(self, url: httpx.URL) -> list[IPAddress]:
        if url.scheme not in ("http", "https"):
            raise OutboundBlocked(f"Refused: only http and https URLs are fetched, not '{url.scheme}'.")
        if url.userinfo:
            raise OutboundBlocked("Refused: URLs with a user name or password are not fetched.")
        host = url.raw_host.decode("ascii", "replace")
        literal = parse_ip(host)
        if literal is not None:
            addresses = [literal]
        else:
            try:
                answers = await self._resolver(host, url.port or (443 if url.scheme == "https" else 80))
            except (OSError, UnicodeError) as exc:
                raise httpx.ConnectError(f"Could not resolve {host}: {exc}") from exc
            addresses = list(dict.fromkeys(a for a in map(parse_ip, answers) if a is not None))
            if not addresses:
                raise httpx.ConnectError(f"Could not resolve {host}.")
        try:
            check_addresses(host, literal is not None, addresses)
        except OutboundRefused as exc:
            raise OutboundBlocked(str(exc)) from exc
        return addresses

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        addresses = await self._vetted(url)
        host = url.raw_host.decode("ascii")
        if url.scheme == "https" and parse_ip(host) is None:
            request.extensions = {**request.extensions, "sni_hostname": host}
        last_error: Exception | None = None
        for address in addresses:
            request.url = url.copy_with(host=str(address))  # Host header keeps the name
            try:
                return await self._inner.handle_async_request(request)
            except httpx.ConnectError as exc:
                last_error = exc  # the host's next vetted address
        assert last_error is not None
        raise last_error

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aexit__(self, *args: Any) -> None:
        await self.aclose()
