"""The outbound-network policy: which addresses this server may reach when it makes requests
on an admin's behalf. The clients under it live beside it: ``document`` (a small synchronous
fetch for documents an admin names by URL: the model catalogue), ``transport`` (the policy as
an httpx transport, for clients whose URLs an admin sets) and ``session`` (the policy as a
requests session: the OpenTelemetry exporter). Tools fetch through ``agents.tools.net``, which
uses the same address policy.

The policy (``address_problem``): loopback, private, link-local, unspecified, multicast,
reserved, shared address space (100.64.0.0/10), cloud metadata addresses and the IPv6 forms
that embed an IPv4 address (judged by the address inside them) are refused. ``vet_url`` applies
it to a URL: the host is resolved once and every address must pass; refusals are
``OutboundRefused``, other failures ``OutboundFailed``, both with a plain message.

The operator allowlist: ``settings.OUTBOUND_ALLOWED_NETWORKS`` (env ``OUTBOUND_ALLOWED_NETWORKS``,
comma-separated networks such as ``10.0.0.0/8,127.0.0.1/32``) names networks the server may
reach although the policy would refuse them: an Ollama or llama.cpp server on the host, an
internal API. ``allowed_networks()`` reads it; every check here, the tools' ``Fetcher`` and the
clients beside this module use it.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
from collections.abc import Callable, Iterable

import httpx
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
SyncResolver = Callable[[str, int], list[str]]

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


# -- refusals, resolving, vetting a URL ----------------------------------------------------------
class OutboundRefused(Exception):
    """The URL points somewhere this server may not go."""


class OutboundFailed(Exception):
    """The URL could not be fetched (network, status, time or size limit)."""


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
    check_addresses(host, literal, addresses)
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


def check_addresses(host: str, literal: bool, addresses: list[IPAddress]) -> None:
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


def host_header(url: httpx.URL) -> str:
    """The ``Host`` header of a request to ``url``: the name, and the port unless the scheme's."""
    host = url.raw_host.decode("ascii")
    default_port = 443 if url.scheme == "https" else 80
    return (f"[{host}]" if ":" in host else host) + (
        f":{url.port}" if url.port and url.port != default_port else "")
