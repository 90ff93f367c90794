"""The SSRF guard: which addresses tools may reach, as literal IPs, as names that resolve to
them and as redirect targets; pinning to the vetted address; redirects, size and time limits."""

from __future__ import annotations

import asyncio
import gzip
import ipaddress
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from agents.tools.net import Fetcher, FetchFailed, FetchRefused, address_problem

from .fakes import PUBLIC_IP, FakeResolver

# (address, what the refusal says about it)
REFUSED = [
    ("127.0.0.1", "a loopback address"),
    ("127.8.9.10", "a loopback address"),
    ("10.0.0.1", "a private address"),
    ("10.255.255.254", "a private address"),
    ("172.16.0.1", "a private address"),
    ("172.31.255.254", "a private address"),
    ("192.168.0.1", "a private address"),
    ("192.168.255.254", "a private address"),
    ("169.254.169.254", "a cloud metadata address"),
    ("169.254.1.1", "a link-local address"),
    ("0.0.0.0", "an unspecified address"),
    ("100.64.0.1", "a shared (carrier-grade NAT) address"),
    ("100.127.255.254", "a shared (carrier-grade NAT) address"),
    ("224.0.0.1", "a multicast address"),
    ("240.0.0.1", "a reserved address"),
    ("::1", "a loopback address"),
    ("::", "an unspecified address"),
    ("fe80::1", "a link-local address"),
    ("fd00:ec2::254", "a cloud metadata address"),
    ("fc00::1", "a private address"),
    ("::ffff:127.0.0.1", "an IPv4-mapped address of 127.0.0.1, a loopback address"),
    ("::ffff:10.0.0.1", "an IPv4-mapped address of 10.0.0.1, a private address"),
    ("::ffff:169.254.169.254", "a cloud metadata address"),
    ("64:ff9b::7f00:1", "a NAT64 address of 127.0.0.1, a loopback address"),
    ("64:ff9b::a00:1", "a NAT64 address of 10.0.0.1, a private address"),
    ("64:ff9b::a9fe:a9fe", "a NAT64 address of 169.254.169.254, a cloud metadata address"),
    ("64:ff9b::6440:1", "a NAT64 address of 100.64.0.1"),
    ("64:ff9b:1::a00:1", "a local-use NAT64 address"),
    ("2002:7f00:1::1", "a 6to4 address of 127.0.0.1, a loopback address"),
    ("2002:c0a8:101::1", "a 6to4 address of 192.168.1.1, a private address"),
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "a Teredo tunnel address"),
]
IDS = [address for address, _ in REFUSED]


def url_for(address: str, path: str = "/") -> str:
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}{path}"


def mock(handler) -> Fetcher:
    return Fetcher(resolver=FakeResolver({"public.example": [PUBLIC_IP]}),
                   transport=lambda: httpx.MockTransport(handler))


async def fetch(fetcher: Fetcher, url: str, **kwargs):
    kwargs.setdefault("timeout_s", 5)
    kwargs.setdefault("max_bytes", 10_000)
    return await fetcher.fetch("GET", url, **kwargs)


def never_called(request: httpx.Request) -> httpx.Response:
    raise AssertionError(f"no request may be sent, but {request.url} was")


# -- the table ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("address", "reason"), REFUSED, ids=IDS)
async def test_a_literal_internal_address_is_refused(address, reason):
    with pytest.raises(FetchRefused) as caught:
        await fetch(mock(never_called), url_for(address, "/latest/meta-data/"))
    message = str(caught.value)
    assert message.startswith("refused: ") and reason in message


async def test_a_refusal_says_plainly_what_the_address_is():
    with pytest.raises(FetchRefused) as caught:
        await fetch(mock(never_called), "http://127.0.0.1:8000/admin")
    assert str(caught.value) == "refused: 127.0.0.1 is a loopback address"


@pytest.mark.parametrize(("address", "reason"), REFUSED, ids=IDS)
async def test_a_name_resolving_to_an_internal_address_is_refused(address, reason):
    fetcher = Fetcher(resolver=FakeResolver({"inside.example": [address]}),
                      transport=lambda: httpx.MockTransport(never_called))
    with pytest.raises(FetchRefused) as caught:
        await fetch(fetcher, "https://inside.example/admin")
    assert "inside.example resolves to" in str(caught.value) and reason in str(caught.value)


@pytest.mark.parametrize(("address", "reason"), REFUSED, ids=IDS)
@pytest.mark.parametrize("target", ["literal", "name"])
async def test_a_redirect_from_a_public_url_to_an_internal_address_is_refused(address, reason, target):
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.host)
        assert request.url.host == PUBLIC_IP, "only the public address may be contacted"
        location = url_for(address) if target == "literal" else "http://inside.example/secret"
        return httpx.Response(302, headers={"Location": location})

    resolver = FakeResolver({"public.example": [PUBLIC_IP], "inside.example": [address]})
    fetcher = Fetcher(resolver=resolver, transport=lambda: httpx.MockTransport(handler))
    with pytest.raises(FetchRefused) as caught:
        await fetch(fetcher, "https://public.example/go")
    assert reason in str(caught.value)
    assert seen == [PUBLIC_IP]


async def test_a_name_with_one_internal_address_among_public_ones_is_refused():
    fetcher = Fetcher(resolver=FakeResolver({"mixed.example": [PUBLIC_IP, "10.1.2.3"]}),
                      transport=lambda: httpx.MockTransport(never_called))
    with pytest.raises(FetchRefused, match="10.1.2.3, a private address"):
        await fetch(fetcher, "http://mixed.example/")


@pytest.mark.parametrize("url", ["ftp://public.example/file", "file:///etc/passwd",
                                 "gopher://public.example/", "http://user:pw@public.example/"])
async def test_only_plain_http_and_https_urls_are_fetched(url):
    with pytest.raises(FetchRefused, match="^refused: "):
        await fetch(mock(never_called), url)


@pytest.mark.parametrize("address", ["8.8.8.8", "2606:4700:4700::1111", "64:ff9b::808:808",
                                     "::ffff:8.8.8.8"])
def test_public_addresses_are_allowed(address):
    # A NAT64 or IPv4-mapped form of a public IPv4 address is judged by that address.
    assert address_problem(ipaddress.ip_address(address)) is None


# -- a public URL ---------------------------------------------------------------------------------
async def test_a_public_url_is_fetched_from_the_vetted_address_with_its_own_name():
    requests: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(200, headers={"Content-Type": "text/plain; charset=utf-8"},
                              content="héllo".encode())

    result = await fetch(mock(handler), "https://public.example/page?x=1")

    assert (result.status, result.content_type, result.text()) == (200, "text/plain; charset=utf-8", "héllo")
    request = requests[0]
    assert request.url.host == PUBLIC_IP and request.url.path == "/page" and request.url.query == b"x=1"
    assert request.headers["Host"] == "public.example"
    assert request.extensions["sni_hostname"] == "public.example"


async def test_redirects_are_followed_and_each_hop_is_vetted_again():
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/start":
            return httpx.Response(301, headers={"Location": "/next"})
        if request.url.path == "/next":
            return httpx.Response(302, headers={"Location": "https://other.example/last"})
        return httpx.Response(200, text=f"at {request.headers['Host']}")

    resolver = FakeResolver({"public.example": [PUBLIC_IP], "other.example": ["93.184.216.35"]})
    fetcher = Fetcher(resolver=resolver, transport=lambda: httpx.MockTransport(handler))
    result = await fetch(fetcher, "http://public.example/start")

    assert result.text() == "at other.example" and result.redirects == 2
    assert result.url == "https://other.example/last"
    assert resolver.calls == ["public.example", "public.example", "other.example"]


async def test_more_than_five_redirects_fail():
    def handler(request: httpx.Request) -> httpx.Response:
        step = int(request.url.path.strip("/") or 0)
        return httpx.Response(302, headers={"Location": f"/{step + 1}"})

    with pytest.raises(FetchFailed, match="too many redirects"):
        await fetch(mock(handler), "http://public.example/0")


async def test_the_tools_own_headers_do_not_follow_a_redirect_to_another_host():
    seen: list[tuple[str, str | None]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.headers["Host"], request.headers.get("Authorization")))
        if request.headers["Host"] == "public.example" and request.url.path == "/a":
            return httpx.Response(302, headers={"Location": "/b"})
        if request.headers["Host"] == "public.example":
            return httpx.Response(302, headers={"Location": "http://other.example/c"})
        return httpx.Response(200, text="ok")

    resolver = FakeResolver({"public.example": [PUBLIC_IP], "other.example": ["93.184.216.35"]})
    fetcher = Fetcher(resolver=resolver, transport=lambda: httpx.MockTransport(handler))
    await fetch(fetcher, "http://public.example/a", headers={"Authorization": "Bearer s3cret-value"})

    assert seen == [("public.example", "Bearer s3cret-value"), ("public.example", "Bearer s3cret-value"),
                    ("other.example", None)]


# -- limits ---------------------------------------------------------------------------------------
async def test_reading_stops_past_the_size_limit():
    chunks_sent = 0

    async def endless():
        nonlocal chunks_sent
        while True:
            chunks_sent += 1
            yield b"x" * 1024

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"Content-Type": "text/plain"}, content=endless())

    result = await fetch(mock(handler), "http://public.example/big", max_bytes=5000)

    assert len(result.body) == 5000 and result.truncated
    assert chunks_sent <= 6


async def test_a_body_of_exactly_the_limit_is_not_truncated():
    result = await fetch(mock(lambda r: httpx.Response(200, content=b"y" * 100)),
                         "http://public.example/", max_bytes=100)
    assert len(result.body) == 100 and not result.truncated


async def test_a_compressed_body_is_inflated_only_up_to_the_limit():
    bomb = gzip.compress(b"\0" * 20_000_000)  # 20 MB of zeros in about 20 kB

    async def stream():
        for start in range(0, len(bomb), 4096):
            yield bomb[start:start + 4096]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"Content-Encoding": "gzip", "Content-Type": "text/plain"},
                              content=stream())

    result = await fetch(mock(handler), "http://public.example/bomb", max_bytes=1000)
    assert len(result.body) == 1000 and result.truncated


async def test_the_time_limit_covers_the_whole_exchange():
    async def handler(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(5)
        return httpx.Response(200)

    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(FetchFailed, match="time limit of 0.2 s") as caught:
        await fetch(mock(handler), "http://public.example/slow", timeout_s=0.2)
    assert loop.time() - started < 2 and caught.value.retryable


# -- pinning, against a real server ---------------------------------------------------------------
class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        if self.path == "/redirect-inside":
            self.send_response(302)
            self.send_header("Location", "http://10.0.0.1/")
            self.end_headers()
            return
        body = f"host={self.headers['Host']}".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def local_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


class RebindingResolver(FakeResolver):
    """Answers with the test server first, then with an address that must never be used."""

    async def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        return ["127.0.0.1"] if len(self.calls) == 1 else ["10.9.9.9"]


async def test_the_connection_goes_to_the_vetted_address_without_a_second_lookup(local_server):
    resolver = RebindingResolver({})
    # The test server is on loopback, so this fetcher trusts 127.0.0.0/8 explicitly.
    fetcher = Fetcher(resolver=resolver, allowed_networks=(ipaddress.ip_network("127.0.0.0/8"),))

    result = await fetcher.fetch("GET", f"http://rebind.test:{local_server}/", timeout_s=5,
                                 max_bytes=1000)

    assert result.text() == f"host=rebind.test:{local_server}"
    assert resolver.calls == ["rebind.test"]


async def test_a_real_redirect_to_an_internal_address_is_refused(local_server):
    fetcher = Fetcher(resolver=FakeResolver({"pinned.test": ["127.0.0.1"]}),
                      allowed_networks=(ipaddress.ip_network("127.0.0.0/8"),))
    with pytest.raises(FetchRefused, match=r"^refused: 10\.0\.0\.1 is a private address$"):
        await fetcher.fetch("GET", f"http://pinned.test:{local_server}/redirect-inside",
                            timeout_s=5, max_bytes=1000)


async def test_without_trust_the_loopback_test_server_is_refused(local_server):
    fetcher = Fetcher(resolver=FakeResolver({"pinned.test": ["127.0.0.1"]}))
    with pytest.raises(FetchRefused, match="pinned.test resolves to 127.0.0.1, a loopback address"):
        await fetcher.fetch("GET", f"http://pinned.test:{local_server}/", timeout_s=5, max_bytes=1000)
