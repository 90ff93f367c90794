"""Which tools may run again when a turn resumes after its worker stopped mid-call: built-ins
by what they do, HTTP tools when they only read (GET) or when an admin says so."""

from __future__ import annotations

import json

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.urls import reverse

from agents.models import Tool
from agents.runtime.events import RecordingObserver, ToolFinished, ToolStarted
from agents.runtime.loop import RESUME_INTERRUPTED_OUTPUT, Resume, TurnConfig, run_turn
from agents.runtime.messages import Message, Role, ToolUseBlock
from agents.tools import ToolContext, runtime_tool_for_row
from agents.tools.forms import ToolAdminForm
from agents.tools.net import Fetcher
from tests.agents.runtime.scripted_provider import FakeScriptedProvider, answer

from .fakes import PUBLIC_IP, FakeResolver

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


class Recorder:
    """A MockTransport handler that answers 200 and keeps the requests it saw."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(200, headers={"Content-Type": "text/plain"}, text="sunny")


def context_for(team, handler=None, **kwargs) -> ToolContext:
    resolver = FakeResolver({"api.example.com": [PUBLIC_IP]})
    fetcher = Fetcher(resolver=resolver, transport=lambda: httpx.MockTransport(handler or Recorder()))
    return ToolContext(team_id=team.pk, fetcher=fetcher, **kwargs)


def http_row(team, *, name="weather", method="GET", idempotent=False) -> Tool:
    return Tool.objects.create(team=team, name=name, kind="http", http_method=method,
                               url_template="https://api.example.com/v1/{city}",
                               parameters=SCHEMA, idempotent=idempotent)


@pytest.mark.parametrize(("name", "expected"), [
    ("calculator", True), ("current_time", True), ("memory_recall", True), ("http_fetch", True),
    ("memory_store", False), ("memory_forget", False),
])
def test_a_built_in_says_itself_whether_it_may_run_again(make_agent, alice, name, expected):
    agent = make_agent(name="Built-ins", tools=())
    # The row's flag is for HTTP tools; a built-in's answer comes from the code.
    row = Tool.objects.create(team=agent.team, name=name, kind="builtin", idempotent=not expected)
    tool = runtime_tool_for_row(row, context_for(agent.team, agent_id=agent.pk, user_id=alice.pk))
    assert tool.idempotent is expected


@pytest.mark.parametrize(("method", "flag", "expected"), [
    ("GET", False, True), ("GET", True, True),
    ("POST", False, False), ("POST", True, True),
    ("DELETE", False, False), ("PUT", True, True),
])
def test_an_http_tool_may_run_again_when_it_reads_or_its_row_says_so(team_a, method, flag, expected):
    tool = runtime_tool_for_row(http_row(team_a, method=method, idempotent=flag), context_for(team_a))
    assert tool.idempotent is expected


def form_data(team, **overrides):
    data = {"team": team.pk, "name": "book", "description": "", "enabled": "on",
            "parameters": json.dumps(SCHEMA), "http_method": "POST",
            "url_template": "https://api.example.com/{city}", "timeout_s": "10",
            "max_response_bytes": "10000", "headers": "", "policy": "allow",
            "min_role": "viewer"}
    data.update(overrides)
    return data


def test_the_admin_form_sets_the_flag_of_an_http_tool(team_a):
    form = ToolAdminForm(data=form_data(team_a, idempotent="on"))
    assert form.is_valid(), form.errors
    row = form.save(commit=False)
    row.kind = "http"
    row.save()
    assert Tool.objects.get(pk=row.pk).idempotent
    unset = ToolAdminForm(data=form_data(team_a), instance=Tool.objects.get(pk=row.pk))
    assert unset.is_valid(), unset.errors
    assert not unset.save().idempotent


def test_the_admin_shows_the_flag_beside_approval(client_for, alice, team_a):
    client = client_for(alice)
    http = http_row(team_a, method="POST")
    page = client.get(reverse("admin:agents_tool_change", args=[http.pk])).content.decode()
    assert 'name="idempotent"' in page
    assert page.index('name="policy"') < page.index('name="idempotent"')

    store = Tool.objects.create(team=team_a, name="memory_store", kind="builtin")
    page = client.get(reverse("admin:agents_tool_change", args=[store.pk])).content.decode()
    assert 'name="idempotent"' not in page and "is not run again when the turn resumes" in page
    calculator = Tool.objects.create(team=team_a, name="calculator", kind="builtin")
    page = client.get(reverse("admin:agents_tool_change", args=[calculator.pk])).content.decode()
    assert "it only reads or computes" in page


def test_a_resumed_turn_runs_again_the_get_tool_it_was_running_but_not_the_post(team_a):
    handler = Recorder()
    context = context_for(team_a, handler)
    tools = [runtime_tool_for_row(http_row(team_a, name="weather"), context),
             runtime_tool_for_row(http_row(team_a, name="book", method="POST"), context)]
    calls = [ToolUseBlock("call_1", "weather", {"city": "oslo"}),
             ToolUseBlock("call_2", "book", {"city": "oslo"})]
    resume = Resume(messages=[Message(Role.ASSISTANT, list(calls))], iteration=1,
                    interrupted=frozenset({"call_1", "call_2"}))
    observer = RecordingObserver()

    result = async_to_sync(run_turn)(
        provider=FakeScriptedProvider([answer("Booked? Not sure.")]),
        config=TurnConfig(model="fake-model"), history=[], user_message="weather and book",
        tools=tools, observer=observer, resume=resume)

    assert [r.method for r in handler.requests] == ["GET"]
    results = [b for m in result.new_messages if m.role is Role.TOOL for b in m.tool_results_blocks]
    assert [(r.tool_use_id, r.is_error) for r in results] == [("call_1", False), ("call_2", True)]
    assert "sunny" in results[0].output
    assert results[1].output == RESUME_INTERRUPTED_OUTPUT
    assert [e.call_id for e in observer.of(ToolStarted)] == ["call_1"]
    finished = {e.call_id: (e.success, e.error) for e in observer.of(ToolFinished)}
    assert finished == {"call_1": (True, None), "call_2": (False, "interrupted")}
