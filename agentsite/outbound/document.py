"""``fetch_document``: a small synchronous GET under the outbound policy (``agentsite.outbound``),
for documents an admin names by URL (the model catalogue).

https only (plain http too when ``DEBUG`` is on), no user name or password in the URL; the host
is resolved once and every address must pass the policy; the connection goes to the vetted
address (the name kept for ``Host`` and TLS), so a second DNS answer cannot redirect it;
redirects are followed by hand, each hop vetted again; one time limit for the whole exchange;
the body is read up to ``max_bytes`` and a longer one is refused, not cut. Refusals are
``OutboundRefused``, other failures ``OutboundFailed``, both with a plain message.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import httpx

from . import (
    IPAddress,
    OutboundFailed,
    OutboundRefused,
    SyncResolver,
    host_header,
    parse_ip,
    system_resolver,
    vet_url,
)

DOCUMENT_MAX_BYTES = 20 * 1024 * 1024
DOCUMENT_TIMEOUT_S = 30.0
DOCUMENT_MAX_REDIRECTS = 3
USER_AGENT = "agentsite/1.0"
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})


@dataclass(frozen=True, slots=True)
class Document:
    url: str
    content: bytes
    content_type: str


def fetch_document(url: str, *, max_bytes: int = DOCUMENT_MAX_BYTES,
                   timeout_s: float = DOCUMENT_TIMEOUT_S, resolver: SyncResolver = system_resolver,
                   transport: httpx.BaseTransport | None = None,
                   allow_http: bool | None = None) -> Document:
    """GET ``url`` under the policy (``transport`` and ``resolver``: for tests)."""
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


def _send(client: httpx.Client, url: httpx.URL, addresses: list[IPAddress]) -> httpx.Response:
    host = url.raw_host.decode("ascii")
    header = host_header(url)
    extensions = {"sni_hostname": host} if url.scheme == "https" and parse_ip(host) is None else {}
    last_error: Exception | None = None
    for address in addresses:
        request = client.build_request("GET", url.copy_with(host=str(address)), extensions=extensions,
                                       headers={"User-Agent": USER_AGENT, "Host": header})
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
