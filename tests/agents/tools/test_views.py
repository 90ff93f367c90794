"""The Try-it page: a team admin runs one tool by hand, through the same checks, SSRF guard and
credential scrubbing as a turn."""

from __future__ import annotations

import json

import httpx
import pytest
from django.urls import reverse

from agents.models import Tool
from agents.tools import net
from agents.tools.services import tools_sync_builtins

from .fakes import PUBLIC_IP, FakeResolver

SECRET = "Bearer sk-live-SECRETVALUE-0123456789"


@pytest.fixture
def fake_internet(monkeypatch):
    """Tools fetch through a fake resolver and transport that answer with what they received."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        body = f"<script>alert('x')</script> auth={request.headers.get('Authorization', '')}"
        return httpx.Response(200, headers={"Content-Type": "text/html"}, text=body)

    fetcher = net.Fetcher(resolver=FakeResolver({"api.example.com": [PUBLIC_IP]}),
                          transport=lambda: httpx.MockTransport(handler))
    monkeypatch.setattr(net, "default_fetcher", lambda: fetcher)
    return seen


@pytest.fixture
def weather(team_a):
    from agents.tools.http import headers_encrypt

    return Tool.objects.create(
        team=team_a, name="weather", kind="http", url_template="https://api.example.com/w/{city}",
        parameters={"type": "object", "properties": {"city": {"type": "string", "examples": ["Oslo"]},
                                                     "days": {"type": "integer"}}},
        headers_encrypted=headers_encrypt([("Authorization", SECRET)]))


def try_url(tool) -> str:
    return reverse("tool_try", args=[tool.uuid])


def test_try_it_prefills_arguments_from_the_schema(client_for, alice, weather):
    response = client_for(alice).get(try_url(weather))
    assert response.status_code == 200
    assert response.context["form"].initial["arguments"] == json.dumps({"city": "Oslo", "days": 0}, indent=2)


def test_try_it_runs_the_tool_and_shows_its_output_escaped(client_for, alice, weather, fake_internet):
    response = client_for(alice).post(try_url(weather), {"arguments": '{"city": "Oslo"}'})

    html = response.content.decode()
    assert fake_internet[0].url.path == "/w/Oslo" and fake_internet[0].headers["Host"] == "api.example.com"
    assert "Status: 200 OK" in html and " ms</h2>" in html
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html
    assert "<script>alert" not in html
    assert "sk-live" not in html and "auth=[REDACTED]" in html


def test_try_it_goes_through_the_ssrf_guard(client_for, alice, team_a, fake_internet):
    tools_sync_builtins(team_a)
    fetch = Tool.objects.get(team=team_a, name="http_fetch")
    html = client_for(alice).post(try_url(fetch), {"arguments": '{"url": "http://[::ffff:127.0.0.1]:8000/"}'}).content.decode()
    assert "refused: ::ffff:127.0.0.1 is an IPv4-mapped address of 127.0.0.1, a loopback address" in html
    assert fake_internet == []


def test_try_it_reports_invalid_arguments_like_a_turn(client_for, alice, weather, fake_internet):
    client = client_for(alice)
    html = client.post(try_url(weather), {"arguments": '{"city": 7}'}).content.decode()
    assert "Invalid arguments for tool &#x27;weather&#x27;: &#x27;city&#x27;: 7 is not of type" in html
    html = client.post(try_url(weather), {"arguments": "[1, 2]"}).content.decode()
    assert "The arguments must be a JSON object" in html
    assert fake_internet == []


def test_try_it_scrubs_credentials_from_the_output(client_for, alice, team_a, make_agent):
    tools_sync_builtins(team_a)
    agent = make_agent(name="Scrubbed", tools=())
    client = client_for(alice)
    store = Tool.objects.get(team=team_a, name="memory_store")
    recall = Tool.objects.get(team=team_a, name="memory_recall")
    client.post(try_url(store), {"arguments": json.dumps({"content": "deploy token=abcd1234efgh5678ijkl",
                                                          "key": "deploy"}), "agent": agent.pk})
    html = client.post(try_url(recall), {"arguments": '{"query": "deploy"}', "agent": agent.pk}).content.decode()
    assert "token=[REDACTED]" in html and "abcd1234" not in html


def test_memory_tools_need_an_agent_to_try(client_for, alice, team_a):
    tools_sync_builtins(team_a)
    store = Tool.objects.get(team=team_a, name="memory_store")
    response = client_for(alice).post(try_url(store), {"arguments": '{"content": "x"}'})
    assert response.status_code == 200 and response.context["form"].errors["agent"]


def test_only_team_admins_may_try_tools(client_for, bob, charlie, weather):
    assert client_for(bob).get(try_url(weather)).status_code == 403
    assert client_for(charlie).get(try_url(weather)).status_code == 404
    assert client_for(charlie).post(try_url(weather), {"arguments": "{}"}).status_code == 404
