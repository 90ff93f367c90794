"""An MCP call is an MCP call in its step (and so in its span) whatever its outcome: denied by
its policy, declined by a person, or run. Before, only a call that reached the server said so
(``gen_ai.tool.type`` was ``function`` and the ``mcp.*`` attributes missing otherwise). No
server is needed: a call that is refused never reaches it."""

from __future__ import annotations

import pytest

from agents.runtime.events import RecordingObserver, ToolFinished
from agents.runtime.loop import TurnConfig, run_turn
from agents.runtime.tools import FunctionTool
from agents.tools.mcp.tool import McpTool
from agents.tools.mcp.types import Endpoint
from tests.agents.runtime.scripted_provider import FakeScriptedProvider, answer, calls
from traces.export.spans import tool_type


def clock(policy: str) -> McpTool:
    tool = McpTool(name="clock_now", description="The time.", parameters={"type": "object"},
                   endpoint=Endpoint(name="clock", transport="stdio", command="/bin/false"),
                   remote_name="get_current_time", timeout_s=5, max_bytes=10_000)
    tool.policy = policy
    return tool


class No:
    async def request(self, call) -> bool:  # noqa: ANN001 - the loop's approval request
        return False


async def finished(tool, approver=None) -> ToolFinished:
    observer = RecordingObserver()
    await run_turn(provider=FakeScriptedProvider([calls((tool.name, {})), answer("ok")]),
                   config=TurnConfig(model="m"), history=[], user_message="time?", tools=[tool],
                   observer=observer, approver=approver)
    [event] = observer.of(ToolFinished)
    return event


@pytest.mark.parametrize(("policy", "approver"), [("deny", None), ("ask", No())])
async def test_a_refused_mcp_call_names_its_server_and_is_an_extension(policy, approver):
    event = await finished(clock(policy), approver)
    assert not event.success
    assert event.meta["mcp"] == {"server": "clock", "tool": "get_current_time", "transport": "stdio",
                                 "method": "tools/call"}
    assert tool_type(event.meta) == "extension"


async def test_a_built_in_tool_is_a_function_whatever_its_outcome():
    async def run(arguments):  # noqa: ANN001, ANN202 - never called
        raise AssertionError("a denied tool ran")

    event = await finished(FunctionTool("calc", "Sums.", run, policy="deny"))
    assert "mcp" not in event.meta and tool_type(event.meta) == "function"


def test_older_steps_are_typed_by_what_they_hold():
    assert tool_type({"mcp": {"server": "clock"}}) == "extension"
    assert tool_type({}) == "function"
    assert tool_type({"tool_type": "datastore"}) == "datastore"
