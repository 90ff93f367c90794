"""A whole turn with the demo model whose only time tool is the operator's MCP time server:
the model calls ``<server>_get_current_time``, the call goes over stdio, and the trace step
carries the MCP facts; the server's process outlives the turn, and the next turn's call goes to
it (the process keeps it: ``host``)."""

from __future__ import annotations

import psutil
import pytest

from agents.chat.services import conversation_create
from agents.turns.services import turn_start
from agents.turns.tasks import turn_run
from tests.members import member_of

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_turn_asks_the_mcp_time_server(timekeeper, alice, team_a, sent_turns, use_redis) -> None:
    agent = timekeeper
    conversation = conversation_create(agent=agent, membership=member_of(alice, team_a))

    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation),
                       text="What time is it in Europe/Paris?")
    assert turn_run(trace.pk) == "completed"

    step = trace.steps.get(kind="tool_call")
    assert step.name == "clock_get_current_time" and step.success is True
    mcp = step.meta["mcp"]
    assert (mcp["server"], mcp["tool"], mcp["transport"], mcp["method"]) == (
        "clock", "get_current_time", "stdio", "tools/call")
    assert mcp["protocol_version"] == "2026-07-28"
    output = step.payloads.get(kind="output").content
    assert "Europe/Paris" in output
    # The process keeps the server it started for the next turns: one process for two turns.
    started = time_servers()
    assert len(started) == 1
    again = turn_start(conversation=conversation, membership=member_of(alice, conversation),
                       text="What time is it in Asia/Tokyo?")
    assert turn_run(again.pk) == "completed"
    assert again.steps.get(kind="tool_call").success is True
    assert time_servers() == started


def time_servers() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True)
            if any("mcp_server_time" in part for part in p.cmdline())]
