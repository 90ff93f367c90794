"""HTTP tools defined in the admin and ``http_fetch``: URL templates that cannot change the host,
argument checks, header secrets, limits; and which tools a turn is offered."""

from __future__ import annotations

import json

import httpx
import pytest
from asgiref.sync import async_to_sync

from agents.models import Tool
from agents.runtime.tools import ToolError
from agents.tools import ToolContext, runtime_tool_for_row, runtime_tools
from agents.tools.forms import ToolAdminForm
from agents.tools.http import REDACTED, TemplateError, UrlTemplate, headers_decrypt, headers_encrypt
from agents.tools.net import Fetcher, FetchRefused
from agents.tools.services import tool_run_once

from .fakes import PUBLIC_IP, FakeResolver

WEATHER_SCHEMA = {"type": "object",
                  "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
                  "required": ["city"]}


def run(fn, *args, **kwargs):
    """Call an async tool function from a test that also uses the database."""
    return async_to_sync(fn)(*args, **kwargs)


class Recorder:
    """A MockTransport handler that answers 200 with the request it saw."""

    def __init__(self, body: str | None = None, status: int = 200) -> None:
        self.requests: list[httpx.Request] = []
        self.body = body
        self.status = status

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        body = self.body if self.body is not None else json.dumps({
            "host": request.headers["Host"], "path": request.url.raw_path.decode(),
            "auth": request.headers.get("Authorization", "")})
        return httpx.Response(self.status, headers={"Content-Type": "application/json"}, text=body)


def context_for(team, handler, **kwargs) -> ToolContext:
    resolver = FakeResolver({"api.example.com": [PUBLIC_IP], "evil.example": ["203.0.113.99"]})
    fetcher = Fetcher(resolver=resolver, transport=lambda: httpx.MockTransport(handler))
    return ToolContext(team_id=team.pk, fetcher=fetcher, **kwargs)


@pytest.fixture
def weather(team_a):
    return Tool.objects.create(
        team=team_a, name="weather", kind="http", description="Weather by city.",
        url_template="https://api.example.com/v1/weather/{city}", parameters=WEATHER_SCHEMA,
        headers_encrypted=headers_encrypt([("Authorization", "Bearer sk-live-0123456789abcdef")]))


# -- URL templates --------------------------------------------------------------------------------
@pytest.mark.parametrize("template", [
    "https://{host}/weather", "https://api.example.com{path}", "https://api.example.com:{port}/x",
    "{scheme}://api.example.com/x", "https://user:{password}@api.example.com/x",
    "https://api.{domain}.com/x",
])
def test_a_placeholder_before_the_path_is_refused(template):
    with pytest.raises(TemplateError, match="scheme and host of a URL template are fixed|must start with"):
        UrlTemplate.parse(template)


@pytest.mark.parametrize("city", [
    "evil.example", "@evil.example", "/../../admin", "x?redirect=https://evil.example",
    "..", "x#frag", "a/b", "//evil.example/", "https://evil.example/",
])
async def test_an_argument_can_never_change_the_host(weather, city):
    handler = Recorder()
    tool = runtime_tool_for_row(weather, context_for(weather.team, handler))

    result = await tool.execute({"city": city})

    assert result.success
    request = handler.requests[0]
    assert request.url.host == PUBLIC_IP and request.headers["Host"] == "api.example.com"
    path = request.url.raw_path.decode()
    assert path.startswith("/v1/weather/") and path.count("/") == 3, path
    assert "?" not in path and "#" not in path


def test_values_are_url_encoded_and_other_arguments_go_to_the_query(team_a):
    row = Tool.objects.create(team=team_a, name="search", kind="http",
                              url_template="https://api.example.com/search?q={q}",
                              parameters={"type": "object", "properties": {
                                  "q": {"type": "string"}, "page": {"type": "integer"},
                                  "exact": {"type": "boolean"}}})
    handler = Recorder()
    tool = runtime_tool_for_row(row, context_for(team_a, handler))
    run(tool.execute, {"q": "fish & chips=£5", "page": 2, "exact": True})
    url = handler.requests[0].url
    assert url.params["q"] == "fish & chips=£5" and url.params["page"] == "2"
    assert url.params["exact"] == "true" and len(url.params) == 3


def test_a_post_tool_sends_the_other_arguments_as_json(team_a):
    row = Tool.objects.create(team=team_a, name="create_ticket", kind="http", http_method="POST",
                              url_template="https://api.example.com/projects/{project}/tickets",
                              parameters={"type": "object", "properties": {
                                  "project": {"type": "string"}, "title": {"type": "string"}}})
    handler = Recorder(body="created")
    tool = runtime_tool_for_row(row, context_for(team_a, handler))
    run(tool.execute, {"project": "web", "title": "Broken <link>"})
    request = handler.requests[0]
    assert request.method == "POST" and request.url.path == "/projects/web/tickets"
    assert json.loads(request.content) == {"title": "Broken <link>"}


# -- arguments ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("arguments", "problem"), [
    ({}, "'city' is a required property"),
    ({"city": 5}, "'city': 5 is not of type 'string'"),
    ({"city": "Oslo", "days": 0}, "'days': 0 is less than the minimum of 1"),
])
async def test_invalid_arguments_are_a_tool_error_naming_the_problem(weather, arguments, problem):
    handler = Recorder()
    tool = runtime_tool_for_row(weather, context_for(weather.team, handler))
    with pytest.raises(ToolError) as caught:
        await tool.execute(arguments)
    assert problem in str(caught.value) and "Call it again" in str(caught.value)
    assert handler.requests == []


async def test_in_a_turn_an_invalid_call_comes_back_to_the_model_as_an_error(weather):
    tool = runtime_tool_for_row(weather, context_for(weather.team, Recorder()))
    result = await tool_run_once(tool, {"city": ["Oslo"]}, timeout_s=5)
    assert not result.success and "'city': ['Oslo'] is not of type 'string'" in result.error


# -- secrets --------------------------------------------------------------------------------------
async def test_header_values_are_sent_encrypted_at_rest_and_never_returned(weather):
    assert "sk-live" not in weather.headers_encrypted
    assert headers_decrypt(weather.headers_encrypted) == [("Authorization", "Bearer sk-live-0123456789abcdef")]
    handler = Recorder()  # echoes the Authorization header back, as some APIs do
    tool = runtime_tool_for_row(weather, context_for(weather.team, handler))

    result = await tool.execute({"city": "Oslo"})

    assert handler.requests[0].headers["Authorization"] == "Bearer sk-live-0123456789abcdef"
    assert "sk-live" not in result.output and REDACTED in result.output


def test_an_error_message_never_carries_a_header_value(team_a):
    row = Tool.objects.create(team=team_a, name="leaky", kind="http",
                              url_template="https://api.example.com/x",
                              headers_encrypted=headers_encrypt([("X-Key", "topsecretvalue42")]))

    class Leaky(Fetcher):
        async def fetch(self, *args, **kwargs):
            raise FetchRefused(f"refused: echo {kwargs['headers']['X-Key']}")

    tool = runtime_tool_for_row(row, ToolContext(team_id=team_a.pk, fetcher=Leaky()))
    with pytest.raises(ToolError) as caught:
        run(tool.execute, {})
    assert "topsecretvalue42" not in str(caught.value)


# -- results and limits ---------------------------------------------------------------------------
def test_http_fetch_returns_status_type_and_text_cut_to_the_rows_limit(team_a):
    row = Tool.objects.create(team=team_a, name="http_fetch", kind="builtin", max_response_bytes=50)
    handler = Recorder(body="<html>" + "a" * 500 + "</html>")
    tool = runtime_tool_for_row(row, context_for(team_a, handler))

    result = run(tool.execute, {"url": "https://api.example.com/page"})

    head, _, body = result.output.partition("\n\n")
    assert head == "Status: 200 OK\nContent-Type: application/json"
    assert body.startswith("<html>aaaa") and "[truncated: the response is longer than the tool's limit of 50 bytes]" in body
    assert len(body.split("\n")[0]) == 50


def test_http_fetch_refuses_internal_urls_as_an_error_the_model_reads(team_a):
    row = Tool.objects.create(team=team_a, name="http_fetch", kind="builtin")
    tool = runtime_tool_for_row(row, context_for(team_a, Recorder()))
    result = run(tool_run_once, tool, {"url": "http://169.254.169.254/latest/meta-data/"}, timeout_s=5)
    assert not result.success
    assert result.error == "refused: 169.254.169.254 is a cloud metadata address"


async def test_an_error_status_is_a_failed_call_with_the_body(weather):
    tool = runtime_tool_for_row(weather, context_for(weather.team, Recorder(body="no such city", status=404)))
    result = await tool.execute({"city": "Atlantis"})
    assert not result.success and result.error == "HTTP 404 Not Found" and "no such city" in result.output


def test_the_tools_time_limit_applies(team_a):
    import asyncio

    row = Tool.objects.create(team=team_a, name="slow_api", kind="http", timeout_s=0.5,
                              url_template="https://api.example.com/slow")

    async def handler(request):
        await asyncio.sleep(10)

    tool = runtime_tool_for_row(row, context_for(team_a, handler))
    with pytest.raises(ToolError, match="time limit of 0.5 s"):
        run(tool.execute, {})


# -- the admin form -------------------------------------------------------------------------------
def form_data(team, **overrides):
    data = {"team": team.pk, "name": "weather", "description": "", "enabled": "on",
            "parameters": json.dumps(WEATHER_SCHEMA), "http_method": "GET",
            "url_template": "https://api.example.com/{city}", "timeout_s": "10",
            "max_response_bytes": "10000", "headers": "", "policy": "allow",
            "min_role": "viewer"}
    data.update(overrides)
    return data


@pytest.mark.parametrize(("parameters", "message"), [
    ({"type": "object", "properties": {"city": {"type": "strng"}}}, "The parameters are not a valid JSON schema (at properties/city/type)"),
    ({"type": "object", "required": "city"}, "not a valid JSON schema"),
    ({"type": "string"}, 'must describe an object: set "type": "object"'),
    (["city"], "must be a JSON object"),
])
def test_an_invalid_schema_is_refused_on_save_with_a_clear_message(team_a, parameters, message):
    form = ToolAdminForm(data=form_data(team_a, parameters=json.dumps(parameters)))
    assert not form.is_valid()
    assert message in " ".join(form.errors["parameters"])


@pytest.mark.parametrize(("template", "message"), [
    ("https://{host}/x", "scheme and host of a URL template are fixed"),
    ("ftp://api.example.com/{city}", "must start with http:// or https://"),
    ("http://127.0.0.1:8080/{city}", "Requests to 127.0.0.1 would be refused: it is a loopback address."),
    ("https://api.example.com/{city", "brace that is not a placeholder"),
])
def test_an_unusable_url_template_is_refused_on_save(team_a, template, message):
    form = ToolAdminForm(data=form_data(team_a, url_template=template))
    assert not form.is_valid()
    assert message in " ".join(form.errors["url_template"])


def test_a_placeholder_missing_from_the_schema_is_refused(team_a):
    form = ToolAdminForm(data=form_data(team_a, url_template="https://api.example.com/{town}"))
    assert not form.is_valid()
    assert "uses {town}, which the schema does not declare" in " ".join(form.errors["parameters"])


def test_a_built_in_name_is_reserved(team_a):
    form = ToolAdminForm(data=form_data(team_a, name="memory_store"))
    assert not form.is_valid() and "built-in tool" in " ".join(form.errors["name"])


# -- what a turn is offered -----------------------------------------------------------------------
def test_disabled_tools_are_not_offered_and_approval_comes_from_the_row(make_agent, weather):
    agent = make_agent(name="Offered", tools=("calculator", "current_time"), approval=("current_time",))
    weather.policy = "ask"
    weather.save()
    agent.tools.add(weather, Tool.objects.create(team=agent.team, name="http_fetch", kind="builtin",
                                                 enabled=False))

    tools, warnings = runtime_tools(agent, context=ToolContext(team_id=agent.team_id, agent_id=agent.pk))

    assert [(t.name, t.requires_approval) for t in tools] == [
        ("calculator", False), ("current_time", True), ("weather", True)]
    assert warnings == []
    assert tools[2].spec().parameters == WEATHER_SCHEMA


def test_a_tool_row_of_another_team_is_never_offered(make_agent, team_b):
    agent = make_agent(name="Crossed", tools=("calculator",))
    stranger = Tool.objects.create(team=team_b, name="http_fetch", kind="builtin")
    agent.tools.add(stranger)
    tools, _ = runtime_tools(agent, context=ToolContext(team_id=agent.team_id, agent_id=agent.pk))
    assert [t.name for t in tools] == ["calculator"]


def test_the_loop_lets_an_http_tool_use_its_whole_time_limit(weather, team_a):
    from agents.tools import loop_tool_timeout

    weather.timeout_s = 200
    calculator = Tool.objects.create(team=team_a, name="calculator", kind="builtin")
    context = ToolContext(team_id=team_a.pk)
    tools = [runtime_tool_for_row(weather, context), runtime_tool_for_row(calculator, context)]
    assert loop_tool_timeout(tools, 120.0) == 205.0
    assert loop_tool_timeout(tools[1:], 120.0) == 120.0
    assert loop_tool_timeout(tools, None) is None
