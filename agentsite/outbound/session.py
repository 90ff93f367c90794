"""``guarded_session``: the outbound policy (``agentsite.outbound``) for ``requests`` (the
OpenTelemetry exporter's client), a ``Session`` that ignores the environment's proxy variables
(and refuses a proxy set on it) and sends through ``GuardedAdapter``.

Every request — so every redirect hop the session follows — has its URL vetted as ``vet_url``
does (http and https, no user name or password in the URL), its host resolved once and every
address vetted; the connection goes to a vetted address (the pool is keyed by that address)
while ``Host`` carries the name, and for https the name is the SNI and the name the certificate
must match. A refusal is ``OutboundBlockedError``, a ``requests.exceptions.ConnectionError``
whose message is the policy's sentence (the exporter counts connection errors as transient: it
retries a refusal until its timeout, then drops the batch). Its TLS contexts are the ones
requests and urllib3 build per connection, not ``transport.tls_context``: urllib3 changes the
context it is given (``verify_mode``, ``check_hostname``).
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from typing import Any

import httpx
import requests
from requests.adapters import HTTPAdapter
from requests.utils import select_proxy
from urllib3.exceptions import MaxRetryError, NewConnectionError

from . import (
    OutboundFailed,
    OutboundRefused,
    SyncResolver,
    host_header,
    parse_ip,
    system_resolver,
    vet_url,
)


class OutboundBlockedError(requests.exceptions.ConnectionError):
    """A request the policy refused before connecting (``guarded_session``)."""


@dataclass(frozen=True, slots=True)
class _Pin:
    address: str                 # the vetted address the connection goes to
    tls_hostname: str | None     # the name for SNI and the certificate (https to a name only)


# The pin of the request ``GuardedAdapter.send`` is sending in this thread; the pool lookup below
# reads it (``HTTPAdapter.send`` passes only the request down). No pin, no connection.
_PIN: contextvars.ContextVar[_Pin | None] = contextvars.ContextVar("outbound_pin", default=None)


def _never_connected(exc: requests.exceptions.ConnectionError) -> bool:
    """Whether ``exc`` is a failure to open the connection, so nothing of the request was sent."""
    reason = exc.args[0] if exc.args else None
    return isinstance(reason, MaxRetryError) and isinstance(reason.reason, NewConnectionError)


class GuardedAdapter(HTTPAdapter):
    """``HTTPAdapter`` behind the policy: each request's URL is vetted (``vet_url``, http and
    https), its host resolved once by ``resolver`` and every address vetted, and the connection
    pinned to a vetted address (the next one when connecting fails); ``Host`` keeps the name and,
    for https, so do SNI and the certificate check. Proxies are refused."""

    def __init__(self, *, resolver: SyncResolver = system_resolver, **kwargs: Any) -> None:
        self._resolver = resolver
        super().__init__(**kwargs)

    def send(self, request: requests.PreparedRequest, stream: bool = False, timeout: Any = None,
             verify: bool | str = True, cert: Any = None,
             proxies: dict[str, str] | None = None) -> requests.Response:
        if proxies and select_proxy(request.url or "", proxies):
            raise OutboundBlockedError("Refused: requests under the outbound policy do not go "
                                       "through a proxy.", request=request)
        try:
            url = httpx.URL(request.url or "")
        except (httpx.InvalidURL, TypeError, ValueError) as exc:
            raise requests.exceptions.InvalidURL(f"Not a valid URL ({exc}).", request=request) from exc
        try:
            addresses = vet_url(url, resolver=self._resolver, allow_http=True)
        except OutboundRefused as exc:
            raise OutboundBlockedError(str(exc), request=request) from exc
        except OutboundFailed as exc:
            raise requests.exceptions.ConnectionError(str(exc), request=request) from exc
        host = url.raw_host.decode("ascii")
        tls_hostname = host if url.scheme == "https" and parse_ip(host) is None else None
        pinned = request.copy()  # the caller's request (and so the next redirect hop) keeps no Host
        pinned.headers["Host"] = host_header(url)
        last_error: requests.exceptions.ConnectionError | None = None
        for address in addresses:
            token = _PIN.set(_Pin(str(address), tls_hostname))
            try:
                response = super().send(pinned, stream=stream, timeout=timeout, verify=verify,
                                        cert=cert, proxies=None)
            except requests.exceptions.ConnectionError as exc:
                if not _never_connected(exc):
                    raise
                last_error = exc  # the host's next vetted address
                continue
            finally:
                _PIN.reset(token)
            response.request = request
            return response
        assert last_error is not None
        raise last_error

    def build_connection_pool_key_attributes(
            self, request: requests.PreparedRequest, verify: bool | str,
            cert: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        host_params, pool_kwargs = super().build_connection_pool_key_attributes(request, verify, cert)
        pin = _PIN.get()
        if pin is None:
            raise OutboundBlockedError("Refused: the connection was not vetted by the outbound "
                                       "policy.", request=request)
        host_params["host"] = pin.address  # the pool, and so every connection of it, is the address's
        if pin.tls_hostname is not None:
            pool_kwargs["server_hostname"] = pin.tls_hostname
            pool_kwargs["assert_hostname"] = pin.tls_hostname
        return host_params, pool_kwargs


def guarded_session(*, resolver: SyncResolver = system_resolver) -> requests.Session:
    """A ``requests`` session under the policy: ``GuardedAdapter`` for http and https, and
    ``trust_env`` off (no proxy, ``.netrc`` or CA bundle from the environment). ``resolver``:
    for tests."""
    session = requests.Session()
    session.trust_env = False
    adapter = GuardedAdapter(resolver=resolver)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session
