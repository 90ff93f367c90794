"""The W3C trace context of a tool call (``agents.runtime.tracecontext``): while a call runs, the
``traceparent`` that ``TurnConfig.traceparent_for`` gives it for its iteration and call id is
the current one; parallel calls each see their own; none outside a call or without
``traceparent_for``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agents.runtime.events import RecordingObserver, ToolStarted
from agents.runtime.loop import TurnConfig, TurnStatus, run_turn
from agents.runtime.providers.base import ChatRequest, ChatResponse
from agents.runtime.tools import FunctionTool, Tool
from agents.runtime.tracecontext import (
    current_trace_context,
    current_traceparent,
    traceparent_scope,
)

from .scripted_provider import FakeScriptedProvider, answer, calls


def traceparent_for(iteration: int, call_id: str) -> str:
    return f"tp-{iteration}-{call_id}"


def seeing(name: str, seen: dict[str, list[str | None]], *, delay: float = 0.05) -> Tool:
    """A tool that notes the current traceparent when it starts and again after ``delay``
    (when the other calls of its response are running too)."""

    async def run(arguments: dict[str, Any]) -> str:
        key = str(arguments["key"])
        seen[key] = [current_traceparent()]
        await asyncio.sleep(delay)
        seen[key].append(current_traceparent())
        return "ok"

    return FunctionTool(name, f"The {name} tool.", run,
                        parameters={"type": "object", "properties": {"key": {"type": "string"}}})


def noting(outside: list[str | None], response: ChatResponse):
    """A scripted answer that notes the traceparent current while the model is asked."""

    def item(request: ChatRequest) -> ChatResponse:
        outside.append(current_traceparent())
        return response

    return item


async def run(provider: FakeScriptedProvider, tools: list[Tool], **overrides: Any):
    observer = RecordingObserver()
    config = TurnConfig(model="fake-model", **overrides)
    result = await run_turn(provider=provider, config=config, history=[], user_message="go",
                            tools=tools, observer=observer)
    return result, observer


@pytest.mark.parametrize("parallel", [True, False])
@pytest.mark.parametrize("tool_timeout_s", [120.0, None])
async def test_each_call_sees_its_own_traceparent_and_none_is_seen_outside(parallel, tool_timeout_s):
    seen: dict[str, list[str | None]] = {}
    outside: list[str | None] = []
    provider = FakeScriptedProvider([
        noting(outside, calls(("a", {"key": "a1"}, "call_a"), ("b", {"key": "b1"}, "call_b"))),
        noting(outside, calls(("a", {"key": "a2"}, "call_c"))),
        noting(outside, answer("done")),
    ])

    result, observer = await run(provider, [seeing("a", seen), seeing("b", seen)],
                                 traceparent_for=traceparent_for, parallel_tools=parallel,
                                 tool_timeout_s=tool_timeout_s)

    assert result.status is TurnStatus.COMPLETED
    assert seen == {"a1": ["tp-1-call_a"] * 2, "b1": ["tp-1-call_b"] * 2, "a2": ["tp-2-call_c"] * 2}
    # The iteration is the one the call's events carry (the recorder's step key).
    assert {e.call_id: traceparent_for(e.iteration, e.call_id) for e in observer.of(ToolStarted)} == {
        "call_a": "tp-1-call_a", "call_b": "tp-1-call_b", "call_c": "tp-2-call_c"}
    assert outside == [None, None, None]
    assert current_traceparent() is None


async def test_without_traceparent_for_no_call_has_one():
    seen: dict[str, list[str | None]] = {}
    provider = FakeScriptedProvider([calls(("a", {"key": "a1"}), ("b", {"key": "b1"})),
                                     answer("done")])

    result, _ = await run(provider, [seeing("a", seen), seeing("b", seen)])

    assert result.status is TurnStatus.COMPLETED
    assert seen == {"a1": [None, None], "b1": [None, None]}


async def test_a_call_that_fails_leaves_no_traceparent_behind():
    async def broken(arguments: dict[str, Any]) -> str:
        assert current_traceparent() == "tp-1-toolu_1"
        raise RuntimeError("broken")

    provider = FakeScriptedProvider([calls(("broken", {})), answer("done")])

    result, _ = await run(provider, [FunctionTool("broken", "Fails.", broken)],
                          traceparent_for=traceparent_for)

    assert result.status is TurnStatus.COMPLETED
    assert result.history[2].tool_results_blocks[0].output == "Error executing broken: broken"
    assert current_traceparent() is None


def test_the_scope_sets_and_restores():
    with traceparent_scope("outer"):
        with traceparent_scope("inner"):
            assert current_traceparent() == "inner"
        with traceparent_scope(None):
            assert current_traceparent() is None
        assert current_traceparent() == "outer"
    assert current_traceparent() is None


def test_the_trace_context_holds_the_tracestate_only_with_a_traceparent():
    assert current_trace_context() == {}
    with traceparent_scope("tp", "vendor=1"):
        assert current_trace_context() == {"traceparent": "tp", "tracestate": "vendor=1"}
        with traceparent_scope(None, "vendor=1"):
            assert current_trace_context() == {}
        with traceparent_scope("tp2"):
            assert current_trace_context() == {"traceparent": "tp2"}
        assert current_trace_context() == {"traceparent": "tp", "tracestate": "vendor=1"}
    assert current_trace_context() == {}
