"""A provider's base URL is an address the server posts to: the outbound-network policy
(``agentsite.outbound``) refuses internal addresses when it is saved and again at every
request (a name may resolve elsewhere later), unless the operator allows their network."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import httpx
import pytest
from django.urls import reverse

from agents.config.providers import provider_test_connection
from agents.models import Provider
from agents.turns.providers import runtime_provider
from agentsite.outbound import base_url_problem
from agentsite.outbound.transport import GuardedTransport, OutboundBlocked
from tests.agents.config.test_providers import messages_of, provider_data

ADD = reverse("admin:agents_provider_add")

BLOCKED = [
    ("http://127.0.0.1:8080/v1", "loopback"),
    ("http://[::1]:11434/v1", "loopback"),
    ("http://10.1.2.3/v1", "private"),
    ("http://192.168.1.20:8000/v1", "private"),
    ("http://172.16.0.9/v1", "private"),
    ("http://169.254.169.254/latest", "metadata"),
    ("http://100.64.0.1/v1", "carrier-grade NAT"),
    ("http://[::ffff:127.0.0.1]/v1", "loopback"),
    ("http://[64:ff9b::7f00:1]/v1", "loopback"),
    ("http://0.0.0.0:8000/v1", "unspecified"),
    ("http://[fd00::1]/v1", "private"),
    ("http://[fe80::1]/v1", "link-local"),
]


@pytest.mark.parametrize(("url", "reason"), BLOCKED)
def test_an_internal_base_url_is_refused_on_save_with_the_reason(client_for, alice, team_a, url, reason):
    response = client_for(alice).post(ADD, provider_data(team=team_a.pk, base_url=url))
    body = response.content.decode()
    assert response.status_code == 200 and not Provider.objects.exists(), url
    assert "Refused" in body and reason in body and "OUTBOUND_ALLOWED_NETWORKS" in body


@pytest.mark.parametrize("url", ["http://2130706433/v1", "http://0x7f000001/v1", "http://0177.0.0.1/v1"])
def test_numeric_spellings_of_loopback_are_refused(client_for, alice, team_a, url):
    # The form refuses them as URLs; were one stored, the system resolver turns it into
    # 127.0.0.1, which the policy refuses.
    response = client_for(alice).post(ADD, provider_data(team=team_a.pk, base_url=url))
    assert response.status_code == 200 and not Provider.objects.exists()
    problem = base_url_problem(url)
    assert problem and ("loopback" in problem or "Not a valid URL" in problem)


def test_a_name_that_resolves_inside_is_refused_like_the_address():
    problem = base_url_problem("https://models.example.com/v1", resolver=lambda host, port: ["10.0.0.7"])
    assert problem and "models.example.com resolves to 10.0.0.7" in problem


@pytest.mark.parametrize("url", ["https://api.example.com/v1?x=/admin", "https://api.example.com/v1#frag",
                                 "https://user:pw@api.example.com/v1"])
def test_queries_fragments_and_credentials_in_the_base_url_are_refused(url):
    assert base_url_problem(url, resolver=lambda host, port: ["93.184.216.34"]) is not None


def test_the_operators_allowlist_admits_its_networks_only(client_for, alice, team_a, settings):
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8", "10.0.0.0/8"]
    c = client_for(alice)
    for name, url in (("Local", "http://127.0.0.1:11434/v1"), ("Internal", "http://10.9.8.7/v1")):
        assert c.post(ADD, provider_data(team=team_a.pk, name=name, base_url=url)).status_code == 302
    response = c.post(ADD, provider_data(team=team_a.pk, name="Other", base_url="http://192.168.0.5/v1"))
    assert response.status_code == 200 and "private" in response.content.decode()
    assert set(Provider.objects.values_list("name", flat=True)) == {"Local", "Internal"}


class _Secret(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802
        body = b'{"error": {"message": "internal token=AbCdEf0123456789xyzSECRET"}}'
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def loopback_service():
    server = HTTPServer(("127.0.0.1", 0), _Secret)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_a_stored_internal_base_url_is_refused_at_connect_and_never_reached(team_a, loopback_service):
    # Stored before the policy (or by the ORM): the request itself is refused before connecting.
    row = Provider.objects.create(team=team_a, name="Sneaky", kind="openai", base_url=loopback_service)
    check = provider_test_connection(provider=row, model="gpt-4o-mini")
    assert not check.ok and "Refused" in check.message and "loopback" in check.message
    assert "SECRET" not in check.message


def test_an_allowed_service_is_reached_and_its_reply_is_short_and_scrubbed(team_a, loopback_service, settings):
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    row = Provider.objects.create(team=team_a, name="Local", kind="openai", base_url=loopback_service)
    check = provider_test_connection(provider=row, model="gpt-4o-mini")
    assert not check.ok and "AbCdEf0123456789" not in check.message


async def test_the_transport_pins_the_vetted_address_and_refuses_a_rebound_name():
    answers = iter([["93.184.216.34"], ["127.0.0.1"]])
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.url.host} {request.headers['host']} {request.extensions.get('sni_hostname')}")
        return httpx.Response(200, json={})

    async def resolver(host: str, port: int) -> list[str]:
        return next(answers)

    transport = GuardedTransport(httpx.MockTransport(handler), resolver=resolver)
    async with httpx.AsyncClient(transport=transport) as client:
        await client.post("https://models.example.com/v1/chat/completions", json={})
        with pytest.raises(OutboundBlocked, match="resolves to 127.0.0.1"):
            await client.post("https://models.example.com/v1/chat/completions", json={})
    assert seen == ["93.184.216.34 models.example.com models.example.com"]


def test_turn_providers_use_the_guarded_transport(team_a):
    row = Provider.objects.create(team=team_a, name="Cloud", kind="openai", base_url="https://api.openai.com/v1")
    assert isinstance(runtime_provider(row).client._transport, GuardedTransport)


def test_the_admin_list_action_reports_the_refusal(client_for, alice, team_a):
    local = Provider.objects.create(team=team_a, name="Local box", kind="openai", base_url="http://127.0.0.1:1/v1")
    response = client_for(alice).post(reverse("admin:agents_provider_changelist"), {
        "action": "test_connection", "_selected_action": [local.pk]})
    assert any("Refused: 127.0.0.1 is a loopback address" in m for m in messages_of(response))
