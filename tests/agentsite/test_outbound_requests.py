"""The outbound policy for ``requests`` (``guarded_session``, the OpenTelemetry exporter's
client): internal addresses refused before connecting, unless the operator allows their
network; the connection pinned to the vetted address (a second DNS answer cannot move it) while
``Host``, SNI and the certificate check keep the name; every redirect hop vetted again."""

from __future__ import annotations

import datetime
import re
import socket
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
import urllib3.util.connection
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from django.test import override_settings
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentsite.outbound.session import GuardedAdapter, OutboundBlockedError, guarded_session
from tests.helpers import FakeResolver
from tests.otel.receiver import OTLPReceiver

PUBLIC_IP = "93.184.216.34"
LOOPBACK_ALLOWED = override_settings(OUTBOUND_ALLOWED_NETWORKS=["127.0.0.1/32"])



class Recorder(BaseHTTPRequestHandler):
    """Answers 200 with the ``Host`` it saw, or ``/redirect?to=URL`` with a 302 there."""

    def do_GET(self) -> None:
        self.server.seen.append((self.path, self.headers["Host"]))  # type: ignore[attr-defined]
        target = parse_qs(urlsplit(self.path).query).get("to")
        self.send_response(302 if target else 200)
        if target:
            self.send_header("Location", target[0])
        body = self.headers["Host"].encode()
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def log_message(self, format: str, *args: object) -> None:
        pass


def serve(server: ThreadingHTTPServer) -> Iterator[ThreadingHTTPServer]:
    server.seen = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def local() -> Iterator[ThreadingHTTPServer]:
    yield from serve(ThreadingHTTPServer(("127.0.0.1", 0), Recorder))


@pytest.fixture
def no_connections(monkeypatch) -> list[tuple]:
    """Any connection urllib3 opens fails the test (a refusal must come before connecting)."""
    opened: list[tuple] = []

    def refuse(address, *args, **kwargs):
        opened.append(address)
        raise AssertionError(f"connected to {address}")

    monkeypatch.setattr(urllib3.util.connection, "create_connection", refuse)
    return opened


@pytest.mark.parametrize(("url", "table", "message"), [
    ("http://127.0.0.1:4318/v1/traces", {}, "Refused: 127.0.0.1 is a loopback address. An operator "
                                            "can allow it with OUTBOUND_ALLOWED_NETWORKS"),
    ("http://[::1]:4318/v1/traces", {}, "::1 is a loopback address"),
    ("https://collector.test/v1/traces", {"collector.test": [["10.1.2.3"]]},
     "collector.test resolves to 10.1.2.3, which is a private address"),
    ("http://collector.test/v1/traces", {"collector.test": [["192.168.7.7"]]}, "private address"),
    ("http://169.254.169.254/latest/meta-data/", {}, "169.254.169.254 is a cloud metadata address"),
    ("https://collector.test/v1/traces", {"collector.test": [[PUBLIC_IP, "169.254.169.254"]]},
     "resolves to 169.254.169.254, which is a cloud metadata address"),
    ("http://[::ffff:127.0.0.1]/v1/traces", {},
     "is an IPv4-mapped address of 127.0.0.1, a loopback address"),
    ("http://[::ffff:a9fe:a9fe]/v1/traces", {}, "IPv4-mapped address of 169.254.169.254"),
    ("http://100.64.0.7/v1/traces", {}, "carrier-grade NAT"),
    ("http://user:secret@collector.test/v1/traces", {"collector.test": [[PUBLIC_IP]]},
     "user name or password"),
])
def test_internal_addresses_are_refused_before_connecting(no_connections, url, table, message):
    session = guarded_session(resolver=FakeResolver(table))
    with pytest.raises(OutboundBlockedError, match=re.escape(message)) as refused:
        session.post(url, data=b"spans", timeout=5)
    assert isinstance(refused.value, requests.exceptions.ConnectionError)
    assert no_connections == []


def test_an_unresolvable_name_is_a_connection_error_not_a_refusal(no_connections):
    with pytest.raises(requests.exceptions.ConnectionError, match="Could not resolve nowhere.test") as failed:
        guarded_session(resolver=FakeResolver({})).get("http://nowhere.test/", timeout=5)
    assert not isinstance(failed.value, OutboundBlockedError)


def test_an_allowed_network_is_reached_and_the_server_sees_the_name_as_host(local):
    port = local.server_address[1]
    resolver = FakeResolver({"collector.test": [["127.0.0.1"]]})
    session = guarded_session(resolver=resolver)
    with pytest.raises(OutboundBlockedError):
        session.get(f"http://collector.test:{port}/v1/traces", timeout=5)
    with LOOPBACK_ALLOWED:
        answer = session.post(f"http://collector.test:{port}/v1/traces", data=b"spans", timeout=5)
        literal = session.get(f"http://127.0.0.1:{port}/", timeout=5)
    assert answer.status_code == 200 and answer.content == f"collector.test:{port}".encode()
    assert local.seen == [("/v1/traces", f"collector.test:{port}"), ("/", f"127.0.0.1:{port}")]
    assert answer.url == f"http://collector.test:{port}/v1/traces" and literal.status_code == 200
    assert "Host" not in answer.request.headers  # the caller's request is left as it was


def test_the_connection_goes_to_the_vetted_address_whatever_a_second_answer_says(local, monkeypatch):
    """The name is resolved once per request, by the policy: urllib3 connects to the vetted
    address and never looks the name up (a rebinding name cannot move the connection)."""
    port = local.server_address[1]
    looked_up: list[str] = []
    real_getaddrinfo = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        looked_up.append(host)
        if host == "collector.test":  # what the name would answer now: the metadata address
            return real_getaddrinfo("169.254.169.254", *args, **kwargs)
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    resolver = FakeResolver({"collector.test": [["127.0.0.1"], ["10.9.8.7"]]})
    session = guarded_session(resolver=resolver)
    with LOOPBACK_ALLOWED:
        assert session.get(f"http://collector.test:{port}/first", timeout=5).status_code == 200
        with pytest.raises(OutboundBlockedError, match="resolves to 10.9.8.7"):
            session.get(f"http://collector.test:{port}/second", timeout=5)
    assert resolver.calls == ["collector.test", "collector.test"]
    assert "collector.test" not in looked_up and looked_up == ["127.0.0.1"]
    assert local.seen == [("/first", f"collector.test:{port}")]
    assert [key.key_host for key in session.get_adapter("http://x").poolmanager.pools.keys()] == ["127.0.0.1"]


def test_when_connecting_fails_the_next_vetted_address_is_tried(local):
    port = local.server_address[1]  # nothing listens on 127.0.0.2 (the server is bound to .1)
    resolver = FakeResolver({"collector.test": [["127.0.0.2", "127.0.0.1"]]})
    with override_settings(OUTBOUND_ALLOWED_NETWORKS=["127.0.0.0/8"]):
        answer = guarded_session(resolver=resolver).get(f"http://collector.test:{port}/", timeout=5)
    assert answer.status_code == 200 and local.seen == [("/", f"collector.test:{port}")]


def test_every_redirect_hop_is_vetted_and_a_refused_one_is_not_followed(local):
    port = local.server_address[1]
    resolver = FakeResolver({"collector.test": [["127.0.0.1"]], "inside.test": [["192.168.1.5"]]})
    session = guarded_session(resolver=resolver)
    with LOOPBACK_ALLOWED:
        followed = session.get(f"http://collector.test:{port}/redirect?to=/landed", timeout=5)
        with pytest.raises(OutboundBlockedError, match="inside.test resolves to 192.168.1.5"):
            session.get(f"http://collector.test:{port}/redirect?to=http://inside.test:{port}/", timeout=5)
        with pytest.raises(OutboundBlockedError, match="127.0.0.2 is a loopback address"):
            session.get(f"http://collector.test:{port}/redirect?to=http://127.0.0.2:{port}/", timeout=5)
    assert followed.status_code == 200 and followed.url == f"http://collector.test:{port}/landed"
    assert [hop.status_code for hop in followed.history] == [302]
    assert local.seen[:2] == [("/redirect?to=/landed", f"collector.test:{port}"),
                              ("/landed", f"collector.test:{port}")]
    assert len(local.seen) == 4  # each refused hop's first request only
    assert resolver.calls == ["collector.test", "collector.test", "collector.test", "inside.test",
                              "collector.test"]


def test_the_environments_proxies_are_ignored_and_a_sessions_proxy_is_refused(local, monkeypatch):
    port = local.server_address[1]
    for variable in ("HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        monkeypatch.setenv(variable, "http://10.0.0.1:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    session = guarded_session(resolver=FakeResolver({"collector.test": [["127.0.0.1"]]}))
    assert session.trust_env is False and isinstance(session.get_adapter("https://x"), GuardedAdapter)
    with LOOPBACK_ALLOWED:
        assert session.get(f"http://collector.test:{port}/", timeout=5).status_code == 200
        session.proxies = {"http": "http://proxy.test:3128"}
        with pytest.raises(OutboundBlockedError, match="do not go through a proxy"):
            session.get(f"http://collector.test:{port}/", timeout=5)
    assert local.seen == [("/", f"collector.test:{port}")]


# -- https: the connection to the address, SNI and the certificate on the name ----------------------
def certificate_for(name: str, directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for ``name`` (its own CA) and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / f"{name}.pem", directory / f"{name}.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@pytest.fixture
def tls_server(tmp_path) -> Iterator[tuple[ThreadingHTTPServer, Path, list[str]]]:
    cert, key = certificate_for("collector.test", tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    names: list[str] = []
    context.sni_callback = lambda _socket, name, _context: names.append(name)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    for running in serve(server):
        yield running, cert, names


def test_https_goes_to_the_address_with_sni_and_the_certificate_on_the_name(tls_server, tmp_path):
    server, cert, names = tls_server
    port = server.server_address[1]
    resolver = FakeResolver({"collector.test": [["127.0.0.1"]], "other.test": [["127.0.0.1"]]})
    session = guarded_session(resolver=resolver)
    with LOOPBACK_ALLOWED:
        answer = session.post(f"https://collector.test:{port}/v1/traces", data=b"spans", verify=str(cert),
                              timeout=5)
        with pytest.raises(requests.exceptions.SSLError, match="other.test"):
            session.get(f"https://other.test:{port}/", verify=str(cert), timeout=5)
        with pytest.raises(requests.exceptions.SSLError):  # the CA bundle does not know it
            session.get(f"https://collector.test:{port}/", timeout=5)
    assert answer.status_code == 200 and server.seen[0] == ("/v1/traces", f"collector.test:{port}")
    assert names[0] == "collector.test" and "other.test" in names
    keys = session.get_adapter("https://x").poolmanager.pools.keys()
    assert {(k.key_host, k.key_server_hostname, k.key_assert_hostname) for k in keys} >= {
        ("127.0.0.1", "collector.test", "collector.test")}


# -- the exporter's session --------------------------------------------------------------------------
def one_span():
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with provider.get_tracer("agentsite.traces").start_as_current_span("chat m"):
        pass
    return memory.get_finished_spans()


def test_the_otlp_exporter_sends_through_the_guarded_session():
    with OTLPReceiver() as receiver:
        port = receiver.endpoint.split(":")[2].split("/")[0]
        resolver = FakeResolver({"collector.test": [["127.0.0.1"]]})
        endpoint = f"http://collector.test:{port}/v1/traces"
        refused = OTLPSpanExporter(endpoint=endpoint, timeout=0.5, session=guarded_session(resolver=resolver))
        assert refused.export(one_span()) is SpanExportResult.FAILURE and receiver.requests == 0
        with LOOPBACK_ALLOWED:
            exporter = OTLPSpanExporter(endpoint=endpoint, session=guarded_session(resolver=resolver))
            assert exporter.export(one_span()) is SpanExportResult.SUCCESS
        (span,) = receiver.wait_for(1)
    assert span.name == "chat m" and span.headers["host"] == f"collector.test:{port}"
