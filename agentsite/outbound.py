"""Requests this server makes to the outside world on an admin's behalf: which addresses may be
reached; a small synchronous fetch for documents an admin names by URL (the model catalogue);
the policy as an httpx transport and as a requests session, for clients whose URLs an admin
sets. Tools fetch through ``agents.tools.net``, which uses the same address policy.

The policy (``address_problem``): loopback, private, link-local, unspecified, multicast,
reserved, shared address space (100.64.0.0/10), cloud metadata addresses and the IPv6 forms
that embed an IPv4 address (judged by the address inside them) are refused.

``fetch_document``: https only (plain http too when ``DEBUG`` is on), no user name or password
in the URL; the host is resolved once and every address must pass the policy; the connection
goes to the vetted address (the name kept for ``Host`` and TLS), so a second DNS answer cannot
redirect it; redirects are followed by hand, each hop vetted again; one time limit for the
whole exchange; the body is read up to ``max_bytes`` and a longer one is refused, not cut.
Refusals are ``OutboundRefused``, other failures ``OutboundFailed``, both with a plain message.

The operator allowlist: ``settings.OUTBOUND_ALLOWED_NETWORKS`` (env ``OUTBOUND_ALLOWED_NETWORKS``,
comma-separated networks such as ``10.0.0.0/8,127.0.0.1/32``) names networks the server may
reach although the policy would refuse them: an Ollama or llama.cpp server on the host, an
internal API. ``allowed_networks()`` reads it; every check here, the tools' ``Fetcher``,
``GuardedTransport`` and ``guarded_session`` use it.

``GuardedTransport``: the policy as an ``httpx`` transport, for clients whose URLs an admin
sets (model providers, their connection test). Every request — so every redirect hop a client
follows — has its host resolved once, each address vetted, and the connection made to the
vetted address (``Host`` and TLS SNI keep the name). Its TLS context (``tls_context``) is built
once per process: building one loads the CA bundle (tens of milliseconds), which every client
made per request or per tool call would otherwise pay.

``guarded_session``: the policy for ``requests`` (the OpenTelemetry exporter's client), a
``Session`` that ignores the environment's proxy variables (and refuses a proxy set on it) and
sends through ``GuardedAdapter``. Every request — so every redirect hop the session follows — has its URL
vetted as ``vet_url`` does (http and https, no user name or password in the URL), its host
resolved once and every address vetted; the connection goes to a vetted address (the pool is
keyed by that address) while ``Host`` carries the name, and for https the name is the SNI and
the name the certificate must match. A refusal is ``OutboundBlockedError``, a
``requests.exceptions.ConnectionError`` whose message is the policy's sentence (the exporter
counts connection errors as transient: it retries a refusal until its timeout, then drops the
batch). Its TLS contexts are the ones requests and urllib3 build per connection, not
``tls_context``: urllib3 changes the context it is given (``verify_mode``, ``check_hostname``).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import ipaddress
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import httpx
import requests
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from requests.adapters import HTTPAdapter
from requests.utils import select_proxy
from urllib3.exceptions import MaxRetryError, NewConnectionError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
SyncResolver = Callable[[str, int], list[str]]

DOCUMENT_MAX_BYTES = 20 * 1024 * 1024
DOCUMENT_TIMEOUT_S = 30.0
DOCUMENT_MAX_REDIRECTS = 3
USER_AGENT = "agentsite/1.0"
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})

METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean...
    "169.254.170.2",    # AWS ECS task metadata
    "100.100.100.200",  # Alibaba Cloud
    "fd00:ec2::254",    # AWS over IPv6
))
THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")
SHARED_ADDRESS_SPACE = ipaddress.ip_network("100.64.0.0/10")
NAT64 = ipaddress.ip_network("64:ff9b::/96")
NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")



# -- which addresses are refused ------------------------------------------------------------------
def _ipv4_problem(ip: ipaddress.IPv4Address) -> str | None:
    if ip in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if ip.is_unspecified or ip in THIS_NETWORK:
        return "an unspecified address"
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address"
    if ip in SHARED_ADDRESS_SPACE:
        return "a shared (carrier-grade NAT) address"
    if ip.is_multicast:
        return "a multicast address"
    if ip.is_reserved:
        return "a reserved address"
    if ip.is_private:
        return "a private address"
    if not ip.is_global:
        return "not a public address"
    return None


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address] | None:
    if ip.ipv4_mapped is not None:
        return "an IPv4-mapped", ip.ipv4_mapped
    if ip in NAT64:
        return "a NAT64", ipaddress.IPv4Address(int(ip) & 0xFFFF_FFFF)
    if ip.sixtofour is not None:
        return "a 6to4", ip.sixtofour
    return None


def _ipv6_problem(ip: ipaddress.IPv6Address) -> str | None:
    if ip.scope_id:
        ip = ipaddress.IPv6Address(str(ip).split("%", 1)[0])
    if ip in METADATA_ADDRESSES:
        return "a cloud metadata address"
    embedded = _embedded_ipv4(ip)
    if embedded is not None:
        form, inner = embedded
        problem = _ipv4_problem(inner)
        if problem is not None:
            return f"{form} address of {inner}, {problem}"
        if form != "a 6to4":
            return None  # a public IPv4 behind the translation: judged by it alone
    if ip.teredo is not None:
        return "a Teredo tunnel address"
    if ip in NAT64_LOCAL:
        return "a local-use NAT64 address"
    if ip.is_unspecified:
        return "an unspecified address"
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_multicast:
        return "a multicast address"
    if ip.is_site_local:
        return "a site-local address"
    if ip.is_private:
        return "a private address"
    if ip.is_reserved:
        return "a reserved address"
    if not ip.is_global:
        return "not a public address"
    return None


# -- the operator's allowlist ---------------------------------------------------------------------
ALLOWLIST_HINT = ("An operator can allow it with OUTBOUND_ALLOWED_NETWORKS (see the documentation's "
                  "\u201cOutbound network policy\u201d).")


def parse_networks(entries: Iterable[str]) -> tuple[IPNetwork, ...]:
    """``entries`` as networks; ``ImproperlyConfigured`` naming the first one that is not."""
    networks = []
    for entry in entries:
        entry = str(entry).strip()
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
        except ValueError as exc:
            raise ImproperlyConfigured(
                f"OUTBOUND_ALLOWED_NETWORKS: {entry!r} is not an IP address or network "
                "(write e.g. 127.0.0.1/32, 10.0.0.0/8 or ::1/128).") from exc
    return tuple(networks)


@functools.lru_cache(maxsize=8)
def _networks(entries: tuple[str, ...]) -> tuple[IPNetwork, ...]:
    return parse_networks(entries)


def allowed_networks() -> tuple[IPNetwork, ...]:
    """The networks the operator allows although the policy would refuse them."""
    return _networks(tuple(getattr(settings, "OUTBOUND_ALLOWED_NETWORKS", ()) or ()))


def address_problem(ip: IPAddress, allowed: Iterable[IPNetwork] = ()) -> str | None:
    """Why this server may not connect to ``ip`` ("a loopback address"), or None when it may."""
    if any(ip.version == net.version and ip in net for net in allowed):
        return None
    if isinstance(ip, ipaddress.IPv4Address):
        return _ipv4_problem(ip)
    return _ipv6_problem(ip)


def parse_ip(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None


# -- fetching a document -----------------------------------------------------------------------------
class OutboundRefused(Exception):
    """The URL points somewhere this server may not go."""


class OutboundFailed(Exception):
    """The URL could not be fetched (network, status, time or size limit)."""


@dataclass(frozen=True, slots=True)
class Document:
    url: str
    content: bytes
    content_type: str


def system_resolver(host: str, port: int) -> list[str]:
    return [str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


def vet_url(url: httpx.URL, *, resolver: SyncResolver = system_resolver,
            allow_http: bool | None = None) -> list[IPAddress]:
    """The addresses ``url`` may be fetched from; ``OutboundRefused`` when it may not be."""
    allow_http = settings.DEBUG if allow_http is None else allow_http
    schemes = ("https", "http") if allow_http else ("https",)
    if url.scheme not in schemes:
        raise OutboundRefused("Only https URLs can be fetched" + (" (or http while DEBUG is on)"
                                                                   if not allow_http else "") + ".")
    if url.userinfo:
        raise OutboundRefused("URLs with a user name or password are not fetched.")
    host = url.raw_host.decode("ascii", "replace")
    if not host:
        raise OutboundRefused("The URL has no host.")
    literal, addresses = _host_addresses(url, resolver)
    _check_addresses(host, literal, addresses)
    return addresses


def _host_addresses(url: httpx.URL, resolver: SyncResolver) -> tuple[bool, list[IPAddress]]:
    """(whether the host is an address itself, the addresses it is or resolves to);
    ``OutboundFailed`` when it does not resolve."""
    host = url.raw_host.decode("ascii", "replace")
    literal = parse_ip(host)
    if literal is not None:
        return True, [literal]
    try:
        answers = resolver(host, url.port or (443 if url.scheme == "https" else 80))
    except (OSError, UnicodeError) as exc:
        raise OutboundFailed(f"Could not resolve {host}: {exc}") from exc
    addresses = list(dict.fromkeys(a for a in map(parse_ip, answers) if a is not None))
    if not addresses:
        raise OutboundFailed(f"Could not resolve {host}.")
    return False, addresses


def _check_addresses(host: str, literal: bool, addresses: list[IPAddress]) -> None:
    allowed = allowed_networks()
    for address in addresses:
        problem = address_problem(address, allowed)
        if problem:
            where = host if literal else f"{host} resolves to {address}, which"
            raise OutboundRefused(f"Refused: {where} is {problem}. {ALLOWLIST_HINT}")


def reached_by_allowlist(url: str, *, resolver: SyncResolver = system_resolver) -> bool:
    """Whether ``url``'s host is an address the policy itself refuses (so only the operator's
    ``OUTBOUND_ALLOWED_NETWORKS`` lets it be reached: an internal service). A host that does
    not resolve counts as one."""
    try:
        _, addresses = _host_addresses(httpx.URL(url), resolver)
    except (httpx.InvalidURL, TypeError, OutboundFailed):
        return True
    return any(address_problem(address) is not None for address in addresses)


def base_url_problem(url: str, *, resolver: SyncResolver = system_resolver) -> str | None:
    """Why ``url`` cannot be a model provider's base URL, as a sentence; None when it can.
    http and https are both allowed (a model server on the operator's network speaks http);
    the host must pass the policy; user names, passwords, queries and fragments are refused
    (a ``?`` would otherwise decide the path of every request)."""
    try:
        parsed = httpx.URL(url.strip())
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        return f"Not a valid URL ({exc})."
    if parsed.query or "?" in url:
        return "The base URL cannot have a query ('?…'): requests add their own path to it."
    if parsed.fragment or "#" in url:
        return "The base URL cannot have a fragment ('#…')."
    try:
        vet_url(parsed, resolver=resolver, allow_http=True)
    except OutboundRefused as exc:
        return str(exc)
    except OutboundFailed:
        return None  # a name that does not resolve from here is checked again at every request
    return None


# -- the policy as an httpx transport ---------------------------------------------------------------
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
            _check_addresses(host, literal is not None, addresses)
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


def fetch_document(url: str, *, max_bytes: int = DOCUMENT_MAX_BYTES,
                   timeout_s: float = DOCUMENT_TIMEOUT_S, resolver: SyncResolver = system_resolver,
                   transport: httpx.BaseTransport | None = None,
                   allow_http: bool | None = None) -> Document:
    """GET ``url`` under the policy above (``transport`` and ``resolver``: for tests)."""
    try:
        current = httpx.URL(url.strip())
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise OutboundRefused(f"Not a valid URL ({exc}).") from exc
    deadline = time.monotonic() + timeout_s
    with httpx.Client(transport=transport or httpx.HTTPTransport(retries=0), trust_env=False,
                      follow_redirects=False, timeout=httpx.Timeout(timeout_s)) as client:
        for _hop in range(DOCUMENT_MAX_REDIRECTS + 1):
            addresses = vet_url(current, resolver=resolver, allow_http=allow_http)
            response = _send(client, current, addresses)
            try:
                location = response.headers.get("location")
                if response.status_code in REDIRECT_STATUSES and location:
                    try:
                        current = current.join(location)
                    except (httpx.InvalidURL, ValueError) as exc:
                        raise OutboundFailed(f"The server redirected to an invalid URL ({exc}).") from exc
                    continue
                if response.status_code != 200:
                    raise OutboundFailed(f"The server answered {response.status_code} "
                                         f"{response.reason_phrase}.")
                content = _read(response, max_bytes, deadline, timeout_s)
                return Document(url=str(current), content=content,
                                content_type=response.headers.get("content-type", ""))
            finally:
                response.close()
    raise OutboundFailed(f"Too many redirects (more than {DOCUMENT_MAX_REDIRECTS}).")


def _host_header(url: httpx.URL) -> str:
    """The ``Host`` header of a request to ``url``: the name, and the port unless the scheme's."""
    host = url.raw_host.decode("ascii")
    default_port = 443 if url.scheme == "https" else 80
    return (f"[{host}]" if ":" in host else host) + (
        f":{url.port}" if url.port and url.port != default_port else "")


def _send(client: httpx.Client, url: httpx.URL, addresses: list[IPAddress]) -> httpx.Response:
    host = url.raw_host.decode("ascii")
    host_header = _host_header(url)
    extensions = {"sni_hostname": host} if url.scheme == "https" and parse_ip(host) is None else {}
    last_error: Exception | None = None
    for address in addresses:
        request = client.build_request("GET", url.copy_with(host=str(address)), extensions=extensions,
                                       headers={"User-Agent": USER_AGENT, "Host": host_header})
        try:
            return client.send(request, stream=True)
        except httpx.ConnectError as exc:
            last_error = exc  # the host's next vetted address
        except httpx.TimeoutException as exc:
            raise OutboundFailed(f"{host} did not answer in time.") from exc
        except httpx.HTTPError as exc:
            raise OutboundFailed(f"The request to {host} failed: {exc}") from exc
    raise OutboundFailed(f"Could not connect to {host}: {last_error}")


def _read(response: httpx.Response, max_bytes: int, deadline: float, timeout_s: float) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise OutboundFailed(f"The document is larger than {max_bytes // (1024 * 1024)} MB.")
    parts: list[bytes] = []
    size = 0
    try:
        for chunk in response.iter_bytes():  # inflated; the bound applies after inflation
            size += len(chunk)
            if size > max_bytes:
                raise OutboundFailed(f"The document is larger than {max_bytes // (1024 * 1024)} MB.")
            if time.monotonic() > deadline:
                raise OutboundFailed(f"Reading the document took longer than {timeout_s:g} s.")
            parts.append(chunk)
    except httpx.HTTPError as exc:
        raise OutboundFailed(f"Reading the document failed: {exc}") from exc
    return b"".join(parts)


# -- the policy for requests ------------------------------------------------------------------------
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
        pinned.headers["Host"] = _host_header(url)
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
