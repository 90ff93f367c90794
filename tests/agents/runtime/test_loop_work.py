"""Work of the loop that must not grow with the length of the turn, counted rather than timed
(counts hold on any machine; the time is ``bench.loop_overhead``'s to judge)."""

from __future__ import annotations

import itertools
from typing import Any

from agents.runtime.events import NullObserver
from agents.runtime.loop import TurnConfig, TurnStatus, run_turn
from agents.runtime.messages import Message
from agents.runtime.providers.demo import DemoProvider
from agents.runtime.tools import FunctionTool


async def _reads_of_calls(monkeypatch, iterations: int) -> int:
    """How often a turn of ``iterations`` tool calls reads a message's calls."""
    reads = 0
    calls = Message.tool_uses.fget

    def counted(message: Message) -> Any:
        nonlocal reads
        reads += 1
        return calls(message)

    monkeypatch.setattr(Message, "tool_uses", property(counted))
    fresh = itertools.count()

    async def noop(arguments: dict[str, Any]) -> str:
        return f"ok {next(fresh)}"  # identical outputs would trip the loop detector

    result = await run_turn(
        provider=DemoProvider(),
        config=TurnConfig(model="demo", system_prompt="You are a test.", max_tool_iterations=iterations + 1),
        history=[], user_message=f"call the noop tool {iterations} times",
        tools=[FunctionTool("noop", "Does nothing.", noop)], observer=NullObserver())
    monkeypatch.undo()
    assert result.status is TurnStatus.COMPLETED and result.iterations == iterations + 1
    return reads


async def test_each_model_request_reads_only_the_calls_added_since_the_last(monkeypatch):
    # The calls already in the conversation (which a model's copied call is checked against) were
    # gathered from the whole history at every request: a turn of n calls read n² messages.
    short, long = await _reads_of_calls(monkeypatch, 10), await _reads_of_calls(monkeypatch, 40)
    assert long / 40 <= 1.5 * short / 10
    assert long <= 4 * 40
