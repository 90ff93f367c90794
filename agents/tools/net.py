"""Fetching URLs for tools without reaching inside the network: the SSRF guard.

Every tool that fetches a URL (``http_fetch`` and the HTTP tools defined in the admin) goes
through ``Fetcher.fetch``. For every hop, the first request and each redirect alike:

* only ``http`` and ``https`` URLs without user names or passwords are fetched;
* the host is resolved once and *every* address it resolves to must be public. Refused:
  loopback, private, link-local, unspecified, multicast, reserved, shared address space
  (100.64.0.0/10), cloud metadata addresses, and the IPv6 forms that embed an IPv4 address
  (IPv4-mapped ``::ffff:a.b.c.d``, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``), which are
  judged by the IPv4 address inside them; Teredo and local-use NAT64 addresses are refused;
* the connection goes to the vetted address itself (the URL's host is replaced by the IP, the
  ``Host`` header and TLS SNI keep the name, and certificates are checked against the name), so
  a second DNS answer can never redirect it (DNS rebinding);
* redirects are followed by hand, at most ``max_redirects`` of them, each hop vetted again; the
  tool's own headers (which may hold secrets) are dropped when a redirect leaves the origin;
* the whole exchange, redirects included, has one time limit, and the body is read only up to
  ``max_bytes`` (compressed bodies are inflated with the same bound).

Refusals are ``FetchRefused`` with a plain message ("refused: 127.0.0.1 is a loopback
address"); other failures are ``FetchFailed``. Both are ``ToolError``s the model reads.
Proxies from the environment are ignored: a proxy would resolve names itself.
"""

from __future__ import annotations

import asyncio
import codecs
import socket
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from agents.runtime.tools import ToolError

# The address policy is the platform's, shared with every other outbound request.
from agentsite.outbound import IPAddress, IPNetwork, address_problem, allowed_networks, parse_ip

Resolver = Callable[[str, int], Awaitable[list[str]]]

DEFAULT_MAX_REDIRECTS = 5
USER_AGENT = "agentsite-tools/1.0"
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})

class FetchRefused(ToolError):
    """The URL points somewhere tools may not go."""


class FetchFailed(ToolError):
    """The URL could not be fetched (network, time limit, too many redirects)."""


async def system_resolver(host: str, port: int) -> list[str]:
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


# -- results --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class FetchResult:
    status: int
    reason: str
    content_type: str
    body: bytes
    truncated: bool
    url: str
    redirects: int = 0
    encoding: str | None = None

    @property
    def is_binary(self) -> bool:
        kind = self.content_type.split(";", 1)[0].strip().lower()
        if not kind:
            return b"\x00" in self.body[:1024]
        textual = kind.startswith("text/") or kind.endswith(("json", "xml", "javascript",
                                                                "yaml", "csv"))
        return not textual and kind not in {"application/x-www-form-urlencoded"}

    def text(self) -> str:
        """The body as text (the declared charset, else UTF-8); an incomplete character at a
        cut is dropped, undecodable bytes are replaced."""
        encoding = self.encoding or "utf-8"
        try:
            decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
        except LookupError:
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        return decoder.decode(self.body, final=not self.truncated)


# -- reading a body with a bound ------------------------------------------------------------------
class _Inflater:
    """Content decoding (gzip, deflate) that never produces more than asked for."""

    def __init__(self, encoding: str) -> None:
        encoding = encoding.strip().lower()
        if encoding in ("", "identity"):
            self._z = None
        elif encoding in ("gzip", "x-gzip"):
            self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding == "deflate":
            self._z = zlib.decompressobj()
        else:
            raise FetchFailed(f"the response is compressed with '{encoding}', which this tool "
                              "cannot read")

    def feed(self, chunk: bytes, room: int) -> bytes:
        if self._z is None:
            return chunk[:room]
        try:
            out = self._z.decompress(chunk, room)
        except zlib.error as exc:
            raise FetchFailed(f"the compressed response is damaged ({exc})") from exc
        return out


async def _read_bounded(response: httpx.Response, max_bytes: int) -> tuple[bytes, bool]:
    if response.is_stream_consumed:  # a response built in memory (transports in tests)
        return response.content[:max_bytes], len(response.content) > max_bytes
    inflater = _Inflater(response.headers.get("content-encoding", ""))
    parts: list[bytes] = []
    size = 0
    async for chunk in response.aiter_raw():
        # One byte more than allowed tells a body that is exactly the limit from a longer one.
        room = max_bytes + 1 - size
        data = inflater.feed(chunk, room)
        parts.append(data)
        size += len(data)
        if size > max_bytes:
            break
    body = b"".join(parts)
    return body[:max_bytes], len(body) > max_bytes


# -- the fetcher ----------------------------------------------------------------------------------
@dataclass
class Fetcher:
    """Vets, pins and fetches. ``resolver`` and ``transport`` are injectable (tests use a fake
    resolver and ``httpx.MockTransport``); ``allowed_networks`` lists networks an operator
    explicitly trusts (by default the site's ``OUTBOUND_ALLOWED_NETWORKS``)."""

    resolver: Resolver = system_resolver
    transport: Callable[[], httpx.AsyncBaseTransport] | None = None
    allowed_networks: tuple[IPNetwork, ...] | None = None

    async def vet(self, url: httpx.URL) -> list[IPAddress]:
        """The addresses ``url``'s host may be reached at; ``FetchRefused`` when any of them is
        off limits."""
        if url.scheme not in ("http", "https"):
            raise FetchRefused(f"refused: only http and https URLs can be fetched, not "
                               f"'{url.scheme or 'no scheme'}'")
        if url.userinfo:
            raise FetchRefused("refused: URLs with a user name or password are not fetched; "
                               "use the tool's headers for credentials")
        host = url.raw_host.decode("ascii", "replace")
        if not host:
            raise FetchRefused("refused: the URL has no host")
        allowed = allowed_networks() if self.allowed_networks is None else self.allowed_networks
        literal = parse_ip(host)
        if literal is not None:
            problem = address_problem(literal, allowed)
            if problem:  # named as written: "::ffff:127.0.0.1", not "::ffff:7f00:1"
                raise FetchRefused(f"refused: {host} is {problem}")
            return [literal]
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            answers = await self.resolver(host, port)
        except (OSError, UnicodeError) as exc:
            raise FetchFailed(f"could not resolve {host}: {exc}", retryable=True) from exc
        addresses = [a for a in (parse_ip(answer) for answer in answers) if a is not None]
        if not addresses:
            raise FetchFailed(f"could not resolve {host}", retryable=True)
        for address in addresses:
            problem = address_problem(address, allowed)
            if problem:
                raise FetchRefused(f"refused: {host} resolves to {address}, {problem}")
        return list(dict.fromkeys(addresses))

    async def fetch(self, method: str, url: str, *, headers: dict[str, str] | None = None,
                    params: dict[str, Any] | None = None, json: Any = None,
                    timeout_s: float, max_bytes: int,
                    max_redirects: int = DEFAULT_MAX_REDIRECTS) -> FetchResult:
        try:
            async with asyncio.timeout(timeout_s):
                return await self._fetch(method, url, headers=headers or {}, params=params,
                                         json=json, timeout_s=timeout_s, max_bytes=max_bytes,
                                         max_redirects=max_redirects)
        except TimeoutError as exc:
            raise FetchFailed(f"the request took longer than the tool's time limit of "
                              f"{timeout_s:g} s", retryable=True) from exc

    async def _fetch(self, method: str, raw_url: str, *, headers: dict[str, str],
                     params: dict[str, Any] | None, json: Any, timeout_s: float, max_bytes: int,
                     max_redirects: int) -> FetchResult:
        try:
            url = httpx.URL(raw_url)
            if params:
                url = url.copy_merge_params(params)
        except (httpx.InvalidURL, TypeError, ValueError) as exc:
            raise FetchRefused(f"refused: not a valid URL ({exc})") from exc
        origin = _origin(url)
        transport = self.transport() if self.transport else httpx.AsyncHTTPTransport(retries=0)
        async with httpx.AsyncClient(transport=transport, trust_env=False, follow_redirects=False,
                                     timeout=httpx.Timeout(timeout_s)) as client:
            for hop in range(max_redirects + 1):
                addresses = await self.vet(url)
                own_headers = headers if _origin(url) == origin else {}
                response = await self._send(client, method, url, addresses, own_headers, json)
                try:
                    location = response.headers.get("location")
                    if response.status_code in REDIRECT_STATUSES and location:
                        url = _redirect_target(url, location)
                        if response.status_code == 303 or (
                                response.status_code in (301, 302) and method not in ("GET", "HEAD")):
                            method, json = "GET", None
                        continue
                    body, truncated = await _read_bounded(response, max_bytes)
                finally:
                    await response.aclose()
                return FetchResult(
                    status=response.status_code, reason=response.reason_phrase,
                    content_type=response.headers.get("content-type", ""), body=body,
                    truncated=truncated, url=str(url), redirects=hop,
                    encoding=_charset(response.headers.get("content-type", "")))
        raise FetchFailed(f"too many redirects (more than {max_redirects})")

    async def _send(self, client: httpx.AsyncClient, method: str, url: httpx.URL,
                    addresses: list[IPAddress], headers: dict[str, str],
                    json: Any) -> httpx.Response:
        host = url.raw_host.decode("ascii")
        default_port = 443 if url.scheme == "https" else 80
        host_header = _bracketed(host) + (f":{url.port}" if url.port and url.port != default_port
                                          else "")
        extensions: dict[str, Any] = {}
        if url.scheme == "https" and parse_ip(host) is None:
            extensions["sni_hostname"] = host
        last_error: Exception | None = None
        for address in addresses:
            pinned = url.copy_with(host=str(address))
            request = client.build_request(
                method, pinned, json=json, extensions=extensions,
                headers={"User-Agent": USER_AGENT, "Accept-Encoding": "gzip, deflate",
                         **headers, "Host": host_header})
            try:
                return await client.send(request, stream=True)
            except httpx.ConnectError as exc:
                last_error = exc  # try the host's next vetted address
            except httpx.TimeoutException as exc:
                raise FetchFailed(f"{host} did not answer in time", retryable=True) from exc
            except httpx.HTTPError as exc:
                raise FetchFailed(f"the request to {host} failed: {exc}", retryable=True) from exc
        raise FetchFailed(f"could not connect to {host}: {last_error}", retryable=True)


def _origin(url: httpx.URL) -> tuple[str, bytes, int | None]:
    return url.scheme, url.raw_host, url.port


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _redirect_target(current: httpx.URL, location: str) -> httpx.URL:
    try:
        return current.join(location)
    except (httpx.InvalidURL, ValueError) as exc:
        raise FetchFailed(f"the server redirected to an invalid URL ({exc})") from exc


def _charset(content_type: str) -> str | None:
    for part in content_type.split(";")[1:]:
        name, _, value = part.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            return value.strip().strip('"')
    return None


_default = Fetcher()


def default_fetcher() -> Fetcher:
    """The fetcher tools use unless their context names another."""
    return _default
