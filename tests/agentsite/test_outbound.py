"""The outbound policy for documents an admin names by URL (the model catalogue): https only
(http too under DEBUG), public addresses only after resolving, each redirect vetted again, the
connection pinned to the vetted address, a size and a time limit."""

from __future__ import annotations

import ssl

import httpx
import pytest

from agentsite.outbound import OutboundFailed, OutboundRefused
from agentsite.outbound.document import fetch_document
from agentsite.outbound.transport import GuardedTransport, tls_context
from tests.helpers import FakeResolver

PUBLIC_IP = "93.184.216.34"


def serving(handler):
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return handler(request)

    return httpx.MockTransport(record), seen


def test_a_public_https_document_is_fetched_from_the_vetted_address_by_its_name():
    transport, seen = serving(lambda r: httpx.Response(200, content=b'{"ok": 1}',
                                                       headers={"content-type": "application/json"}))
    resolver = FakeResolver({"catalogue.example": [PUBLIC_IP]})
    document = fetch_document("https://catalogue.example/prices.json", resolver=resolver, transport=transport)
    assert document.content == b'{"ok": 1}' and document.url == "https://catalogue.example/prices.json"
    assert seen[0].url.host == PUBLIC_IP and seen[0].headers["host"] == "catalogue.example"
    assert seen[0].extensions["sni_hostname"] == "catalogue.example" and resolver.calls == ["catalogue.example"]


@pytest.mark.parametrize(("url", "table", "message"), [
    ("http://catalogue.example/x.json", {"catalogue.example": [PUBLIC_IP]}, "Only https URLs"),
    ("https://127.0.0.1/x.json", {}, "127.0.0.1 is a loopback address"),
    ("https://inside.example/x.json", {"inside.example": ["10.1.2.3"]}, "resolves to 10.1.2.3, which is a private"),
    ("https://meta.example/x.json", {"meta.example": [PUBLIC_IP, "169.254.169.254"]}, "cloud metadata"),
    ("https://[::1]/x.json", {}, "loopback"),
    ("https://user:pw@catalogue.example/x.json", {"catalogue.example": [PUBLIC_IP]}, "user name or password"),
    ("file:///etc/passwd", {}, "Only https URLs"),
])
def test_documents_inside_the_network_or_not_https_are_refused(url, table, message):
    transport, seen = serving(lambda r: httpx.Response(200, content=b"secret"))
    with pytest.raises(OutboundRefused, match=message):
        fetch_document(url, resolver=FakeResolver(table), transport=transport, allow_http=False)
    assert seen == []


def test_http_is_allowed_only_under_debug(settings):
    transport, _ = serving(lambda r: httpx.Response(200, content=b"{}"))
    resolver = FakeResolver({"catalogue.example": [PUBLIC_IP]})
    settings.DEBUG = True
    assert fetch_document("http://catalogue.example/x.json", resolver=resolver, transport=transport).content == b"{}"
    settings.DEBUG = False
    with pytest.raises(OutboundRefused):
        fetch_document("http://catalogue.example/x.json", resolver=resolver, transport=transport)


def test_a_redirect_is_vetted_again():
    def handler(request: httpx.Request) -> httpx.Response:
        if request.headers["host"] == "catalogue.example":
            return httpx.Response(302, headers={"location": "https://inside.example/x.json"})
        return httpx.Response(200, content=b"secret")

    transport, seen = serving(handler)
    resolver = FakeResolver({"catalogue.example": [PUBLIC_IP], "inside.example": ["192.168.1.5"]})
    with pytest.raises(OutboundRefused, match="192.168.1.5"):
        fetch_document("https://catalogue.example/x.json", resolver=resolver, transport=transport)
    assert len(seen) == 1


def test_a_document_past_the_size_limit_or_an_error_status_fails_plainly():
    resolver = FakeResolver({"catalogue.example": [PUBLIC_IP]})
    big, _ = serving(lambda r: httpx.Response(200, content=b"x" * 2048))
    with pytest.raises(OutboundFailed, match="larger than"):
        fetch_document("https://catalogue.example/x.json", resolver=resolver, transport=big, max_bytes=1024)
    exact, _ = serving(lambda r: httpx.Response(200, content=b"x" * 1024))
    assert len(fetch_document("https://catalogue.example/x.json", resolver=resolver, transport=exact,
                              max_bytes=1024).content) == 1024
    missing, _ = serving(lambda r: httpx.Response(404))
    with pytest.raises(OutboundFailed, match="404 Not Found"):
        fetch_document("https://catalogue.example/x.json", resolver=resolver, transport=missing)


def test_guarded_transports_share_one_tls_context_as_httpx_builds_it() -> None:
    """Building a TLS context loads the CA bundle (tens of ms): it is built once per process,
    with httpx's own defaults for ``verify=True``."""
    first, second = GuardedTransport(), GuardedTransport()
    contexts = {id(t._inner._pool._ssl_context) for t in (first, second)}  # type: ignore[attr-defined]
    assert contexts == {id(tls_context())}
    context, fresh = tls_context(), httpx.create_ssl_context()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname is True
    assert (context.options, context.minimum_version, context.verify_flags) == (
        fresh.options, fresh.minimum_version, fresh.verify_flags)
    assert context.cert_store_stats() == fresh.cert_store_stats()
