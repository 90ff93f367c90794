from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from agents.runtime.cancel import CancelToken
from agents.runtime.events import (
    ApprovalDecided,
    ApprovalRequested,
    Compacted,
    FinalAnswer,
    LlmRequestFinished,
    LlmRequestStarted,
    LoopDetected,
    RecordingObserver,
    TextDelta,
    ToolCallParseIssue,
    ToolFinished,
    ToolStarted,
    TrajectoryStateRecorded,
    TurnError,
)
from agents.runtime.history import estimate_tokens
from agents.runtime.loop import (
    DENIED_OUTPUT,
    EXHAUSTION_PROMPT,
    ApprovalDecision,
    ApprovalRequest,
    CompactionSettings,
    LlmCall,
    LlmCallDecision,
    TurnConfig,
    TurnHooks,
    TurnStatus,
    run_turn,
)
from agents.runtime.messages import Message, Role, ToolResultBlock, ToolUseBlock
from agents.runtime.pricing import Usage
from agents.runtime.providers.base import ChatRequest, ErrorKind, ProviderError
from agents.runtime.providers.demo import DemoProvider
from agents.runtime.tools import FunctionTool, Tool, ToolError, ToolResult

from .scripted_provider import FakeScriptedProvider, Stall, answer, calls

FIXED_NOW = datetime(2026, 3, 22, 6, 30, 0, tzinfo=UTC)
SECRET = "sk-abcdef1234567890"


def fixed_clock() -> datetime:
    return FIXED_NOW


def tool(name: str, output: str = "ok", *, delay: float = 0.0, requires_approval: bool = False,
         required: list[str] | None = None, log: list[str] | None = None) -> Tool:
    async def run(arguments: dict[str, Any]) -> str:
        if log is not None:
            log.append(f"start {name}")
        if delay:
            await asyncio.sleep(delay)
        if log is not None:
            log.append(f"end {name}")
        return output

    parameters: dict[str, Any] = {"type": "object", "properties": {}}
    if required:
        parameters["required"] = required
    return FunctionTool(name, f"The {name} tool.", run, parameters=parameters,
                        requires_approval=requires_approval)


def config(**overrides: Any) -> TurnConfig:
    values: dict[str, Any] = {"model": "fake-model", "system_prompt": "You are helpful."}
    values.update(overrides)
    return TurnConfig(**values)


async def turn(provider: Any, *, tools: list[Tool] | None = None, history: list[Message] | None = None,
               message: str = "hello", observer: RecordingObserver | None = None, **kwargs: Any):
    cfg = kwargs.pop("cfg", None) or config()
    observer = observer if observer is not None else RecordingObserver()
    result = await run_turn(provider=provider, config=cfg, history=history or [],
                            user_message=message, tools=tools or [], observer=observer,
                            clock=fixed_clock, **kwargs)
    return result, observer


def tool_messages(result) -> list[Message]:
    return [m for m in result.history if m.role is Role.TOOL]


def all_results(result) -> list[ToolResultBlock]:
    return [b for m in tool_messages(result) for b in m.tool_results_blocks]


def events_json(observer: RecordingObserver) -> str:
    return json.dumps([e.to_dict() for e in observer.events], default=str)


def history_json(messages: list[Message]) -> str:
    return json.dumps([m.to_dict() for m in messages])


# -- basic turns -----------------------------------------------------------------------------------
async def test_it_returns_a_single_answer_without_tools():
    provider = FakeScriptedProvider([answer("Hello there.")])
    result, observer = await turn(provider)
    assert result.status is TurnStatus.COMPLETED
    assert result.text == "Hello there."
    assert result.iterations == 1
    assert [m.role for m in result.new_messages] == [Role.USER, Role.ASSISTANT]
    assert result.usage == Usage(input_tokens=10, output_tokens=5)
    assert "".join(e.text for e in observer.of(TextDelta)) == "Hello there."
    assert observer.of(FinalAnswer)[0].text == "Hello there."


async def test_it_answers_with_the_demo_provider():
    result, observer = await turn(DemoProvider(), message="hello")
    assert result.status is TurnStatus.COMPLETED
    assert "offline demo model" in result.text
    assert observer.of(LlmRequestFinished)[0].success


async def test_it_runs_one_tool_and_answers_from_its_result():
    provider = FakeScriptedProvider([calls(("lookup", {"q": "x"})), answer("Found it.")])
    result, observer = await turn(provider, tools=[tool("lookup", "the answer")])
    assert result.status is TurnStatus.COMPLETED
    assert result.text == "Found it."
    assert [m.role for m in result.new_messages] == [Role.USER, Role.ASSISTANT, Role.TOOL,
                                                     Role.ASSISTANT]
    tool_result = all_results(result)[0]
    assert (tool_result.tool_use_id, tool_result.output, tool_result.is_error) == ("toolu_1", "the answer", False)
    second = provider.requests[1]
    assert second.messages[-1].tool_results_blocks[0].output == "the answer"
    started, finished = observer.of(ToolStarted)[0], observer.of(ToolFinished)[0]
    assert (started.name, started.arguments) == ("lookup", {"q": "x"})
    assert finished.success and finished.output == "the answer" and finished.output_preview == "the answer"
    assert observer.of(LlmRequestStarted)[0].tools_available == ["lookup"]
    assert observer.of(LlmRequestFinished)[0].tool_calls == [{"id": "toolu_1", "name": "lookup",
                                                              "arguments": {"q": "x"}}]


async def test_it_uses_the_demo_provider_calculator_with_builtin_tools():
    from agents.runtime.builtin import builtin_tools

    result, _ = await turn(DemoProvider(), tools=builtin_tools(clock=fixed_clock),
                           message="what is 12 * 7?")
    assert result.status is TurnStatus.COMPLETED
    assert "84" in result.text
    assert all_results(result)[0].output == "84"


async def test_demo_provider_repeats_a_tool_as_asked():
    result, _ = await turn(DemoProvider(), tools=[tool("noop")], message="call the noop tool 3 times")
    assert result.status is TurnStatus.COMPLETED
    assert result.text == "Called noop 3 times."
    assert result.iterations == 4
    assert len(all_results(result)) == 3


async def test_the_demo_provider_works_with_prompt_guided_dispatch():
    from agents.runtime.builtin import builtin_tools

    observer = RecordingObserver()
    result, _ = await turn(DemoProvider(), tools=builtin_tools(clock=fixed_clock),
                           message="what is 6 * 7?", cfg=config(dispatcher="xml"),
                           observer=observer)
    assert result.status is TurnStatus.COMPLETED
    assert "42" in result.text
    assert result.history[1].tool_uses[0].name == "calculator"
    assert observer.of(LlmRequestStarted)[0].request["tools"] == []
    assert "<tool_call>" not in "".join(e.text for e in observer.of(TextDelta))


# -- parallel and sequential execution -------------------------------------------------------------
async def test_independent_tools_run_in_parallel():
    log: list[str] = []
    provider = FakeScriptedProvider([calls(("a", {}), ("b", {})), answer("done")])
    result, _ = await turn(provider, tools=[tool("a", delay=0.2, log=log), tool("b", delay=0.2, log=log)])
    assert result.status is TurnStatus.COMPLETED
    # Both started before either ended: they overlapped (a wall-clock bound would be flaky).
    assert log[:2] == ["start a", "start b"]
    assert sorted(log[2:]) == ["end a", "end b"]


async def test_tools_run_one_after_another_when_parallel_tools_is_off():
    log: list[str] = []
    provider = FakeScriptedProvider([calls(("a", {}), ("b", {})), answer("done")])
    started = time.perf_counter()
    await turn(provider, tools=[tool("a", delay=0.2, log=log), tool("b", delay=0.2, log=log)],
               cfg=config(parallel_tools=False))
    assert time.perf_counter() - started >= 0.4
    assert log == ["start a", "end a", "start b", "end b"]


async def test_tools_run_one_after_another_when_one_needs_approval():
    log: list[str] = []

    class Yes:
        async def request(self, call: ApprovalRequest) -> bool:
            return True

    provider = FakeScriptedProvider([calls(("a", {}), ("b", {})), answer("done")])
    started = time.perf_counter()
    await turn(provider, tools=[tool("a", delay=0.2, log=log),
                                tool("b", delay=0.2, log=log, requires_approval=True)],
               approver=Yes())
    assert time.perf_counter() - started >= 0.4
    assert log == ["start a", "end a", "start b", "end b"]


async def test_results_keep_call_order_when_later_calls_finish_first():
    provider = FakeScriptedProvider([calls(("slow", {}), ("fast", {})), answer("done")])
    observer = RecordingObserver()
    result, _ = await turn(provider, tools=[tool("slow", "S", delay=0.1), tool("fast", "F")],
                           observer=observer)
    assert [r.output for r in all_results(result)] == ["S", "F"]
    assert [e.name for e in observer.of(ToolFinished)] == ["fast", "slow"]


async def test_identical_calls_in_one_response_are_deduplicated():
    counter: list[int] = []

    async def count(arguments: dict[str, Any]) -> str:
        counter.append(1)
        return "counted"

    provider = FakeScriptedProvider([
        calls(("count", {"a": 1, "b": 2}, "c1"), ("count", {"b": 2, "a": 1}, "c2")), answer("ok")])
    result, _ = await turn(provider, tools=[FunctionTool("count", "", count)])
    assert len(counter) == 1
    first, second = all_results(result)
    assert first.output == "counted"
    assert second.output == "Skipped duplicate tool call 'count' with identical arguments in this turn."
    assert second.tool_use_id == "c2"


# -- approvals -----------------------------------------------------------------------------------------
class ScriptedApprover:
    def __init__(self, decision: Any = True, delay: float = 0.0) -> None:
        self.decision = decision
        self.delay = delay
        self.requests: list[ApprovalRequest] = []

    async def request(self, call: ApprovalRequest) -> Any:
        self.requests.append(call)
        await asyncio.sleep(self.delay)
        return self.decision


@pytest.mark.parametrize("decision", [True, ApprovalDecision(True, "approved by alice")])
async def test_an_approved_tool_runs(decision):
    approver = ScriptedApprover(decision)
    provider = FakeScriptedProvider([calls(("deploy", {"env": "prod"})), answer("deployed")])
    result, observer = await turn(provider, tools=[tool("deploy", "shipped", requires_approval=True)],
                                  approver=approver)
    assert all_results(result)[0].output == "shipped"
    assert approver.requests[0].name == "deploy" and approver.requests[0].arguments == {"env": "prod"}
    requested, decided = observer.of(ApprovalRequested)[0], observer.of(ApprovalDecided)[0]
    assert requested.call_id == decided.call_id == "toolu_1"
    assert decided.approved


async def test_a_tools_duration_leaves_out_the_wait_for_approval():
    approver = ScriptedApprover(True, delay=0.4)
    provider = FakeScriptedProvider([calls(("deploy", {})), answer("deployed")])
    _, observer = await turn(provider, tools=[tool("deploy", "shipped", requires_approval=True)],
                             approver=approver)
    waited = observer.of(ApprovalDecided)[0].waited_ms
    assert waited >= 400  # a lower bound: a busy machine only makes it longer
    # had the wait been counted, the tool's duration would hold all of it
    assert observer.of(ToolFinished)[0].duration_ms < waited


@pytest.mark.parametrize(("approver", "reason", "said"), [
    (ScriptedApprover(False), "denied", DENIED_OUTPUT),
    (ScriptedApprover(ApprovalDecision(False, "declined by a team admin")), "declined by a team admin",
     "Declined by a team admin.\nThe person chose not to let this call run. Do not call deploy again"),
    (ScriptedApprover(True, delay=5), "timeout", "Not approved in time.\nNo one decided"),
    (None, "no approver", "Not approved (no approver).\n"),
])
@pytest.mark.timeout(10)  # a hang guard; what ended the wait is asserted below
async def test_a_denied_or_unanswered_approval_is_a_decision_not_to_retry(approver, reason, said):
    provider = FakeScriptedProvider([calls(("deploy", {})), answer("ok")])
    result, observer = await turn(provider, tools=[tool("deploy", requires_approval=True)],
                                  approver=approver, cfg=config(approval_timeout_s=0.2))
    denied = all_results(result)[0]
    assert denied.output.startswith(said) and denied.is_error
    decided = observer.of(ApprovalDecided)[0]
    assert (decided.approved, decided.reason) == (False, reason)
    assert not observer.of(ToolFinished)[0].success


# -- cancellation -------------------------------------------------------------------------------------
async def cancel_after(token: CancelToken, seconds: float) -> None:
    await asyncio.sleep(seconds)
    token.cancel()


async def test_cancelling_before_a_step_makes_no_request():
    provider = FakeScriptedProvider([answer("never")])
    token = CancelToken()
    token.cancel()
    result, observer = await turn(provider, cancel=token)
    assert result.status is TurnStatus.CANCELLED
    assert provider.requests == []
    assert observer.of(TurnError)[0].error_kind == "cancelled"
    assert [m.role for m in result.new_messages] == [Role.USER]


@pytest.mark.timeout(10)  # a hang guard; what ended the wait is asserted below
async def test_cancelling_mid_stream_closes_the_stream_and_keeps_partial_text():
    provider = FakeScriptedProvider([Stall(pieces=["Partial ", "answer"])])
    token = CancelToken()
    canceller = asyncio.create_task(cancel_after(token, 0.1))
    result, observer = await turn(provider, cancel=token)
    await canceller
    assert result.status is TurnStatus.CANCELLED
    assert provider.streams_opened == 1 and provider.streams_closed == 1
    assert result.new_messages[-1].role is Role.ASSISTANT
    assert result.new_messages[-1].text == "Partial answer"
    assert result.text == "Partial answer"
    finished = observer.of(LlmRequestFinished)[0]
    assert finished.error == "cancelled"
    # the provider read the prompt and wrote two pieces: billed, so estimated rather than zero
    assert finished.usage_estimated
    assert finished.usage.output_tokens == 4  # ceil(len("Partial answer") / 4)
    assert finished.usage.input_tokens > 0
    assert result.usage.output_tokens == 4


async def test_a_request_that_fails_before_any_text_counts_no_tokens():
    provider = FakeScriptedProvider([ProviderError("503: overloaded", retryable=False)])
    result, observer = await turn(provider)
    finished = observer.of(LlmRequestFinished)[0]
    assert not finished.success and not finished.usage_estimated
    assert finished.usage.total_tokens == 0


@pytest.mark.timeout(10)  # a hang guard; what ended the wait is asserted below
async def test_cancelling_the_demo_provider_mid_stream_keeps_what_it_said():
    provider = DemoProvider(token_delay_s=0.05)
    token = CancelToken()
    canceller = asyncio.create_task(cancel_after(token, 0.2))
    result, observer = await turn(provider, cancel=token, message="hello")
    await canceller
    assert result.status is TurnStatus.CANCELLED
    streamed = "".join(e.text for e in observer.of(TextDelta))
    assert streamed and result.new_messages[-1].text == streamed
    full = (await turn(DemoProvider(), message="hello"))[0].raw_text
    assert full.startswith(streamed) and len(streamed) < len(full)


async def test_provider_errors_are_scrubbed_before_they_are_reported():
    provider = FakeScriptedProvider([ProviderError(f"401: bad api_key={SECRET}", retryable=False)])
    result, observer = await turn(provider)
    assert SECRET not in (result.error or "") and SECRET not in events_json(observer)


@pytest.mark.timeout(10)  # a hang guard; what ended the wait is asserted below
async def test_cancelling_mid_stream_closes_the_http_stream_of_a_real_provider():
    import httpx

    from agents.runtime.providers.openai import OpenAIProvider

    closed: list[bool] = []

    class HangingBody(httpx.AsyncByteStream):
        async def __aiter__(self):
            chunk = {"choices": [{"index": 0, "delta": {"content": "Partial"}}]}
            yield f"data: {json.dumps(chunk)}\n\n".encode()
            await asyncio.sleep(3600)

        async def aclose(self) -> None:
            closed.append(True)

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"},
                              stream=HangingBody())

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    provider = OpenAIProvider("https://llm.example/v1", "key", http_client=client)
    token = CancelToken()
    canceller = asyncio.create_task(cancel_after(token, 0.2))
    result, _ = await turn(provider, cancel=token)
    await canceller
    await client.aclose()
    assert result.status is TurnStatus.CANCELLED
    assert closed == [True]
    assert result.new_messages[-1].text == "Partial"


@pytest.mark.timeout(10)  # a hang guard; what ended the wait is asserted below
async def test_cancelling_mid_tool_abandons_it_and_answers_every_call():
    provider = FakeScriptedProvider([calls(("slow", {}), ("other", {}))])
    token = CancelToken()
    canceller = asyncio.create_task(cancel_after(token, 0.1))
    result, observer = await turn(provider, tools=[tool("slow", delay=30), tool("other", delay=30)],
                                  cancel=token)
    await canceller
    assert result.status is TurnStatus.CANCELLED
    results = all_results(result)
    assert [(r.tool_use_id, r.output, r.is_error) for r in results] == [
        ("toolu_1", "Cancelled by user.", True), ("toolu_2", "Cancelled by user.", True)]
    assert [m.role for m in result.history] == [Role.USER, Role.ASSISTANT, Role.TOOL]
    assert len(observer.of(ToolFinished)) == 2


@pytest.mark.timeout(10)  # a hang guard; what ended the wait is asserted below
async def test_cancelling_a_tool_that_ignores_cancellation_still_ends_the_turn():
    returned: list[str] = []

    async def stubborn(arguments: dict[str, Any]) -> str:
        end = time.perf_counter() + 3
        while time.perf_counter() < end:
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                continue
        returned.append("finally")
        return "finally"

    provider = FakeScriptedProvider([calls(("stubborn", {}))])
    token = CancelToken()
    canceller = asyncio.create_task(cancel_after(token, 0.1))
    result, _ = await turn(provider, tools=[FunctionTool("stubborn", "", stubborn)], cancel=token)
    assert returned == []  # the turn ended without waiting for the tool
    await canceller
    assert all_results(result)[0].output == "Cancelled by user."


@pytest.mark.timeout(10)  # a hang guard; what ended the wait is asserted below
async def test_cancelling_while_waiting_for_approval():
    provider = FakeScriptedProvider([calls(("deploy", {}))])
    token = CancelToken()
    canceller = asyncio.create_task(cancel_after(token, 0.1))
    result, observer = await turn(provider, tools=[tool("deploy", requires_approval=True)],
                                  approver=ScriptedApprover(True, delay=30), cancel=token)
    await canceller
    assert result.status is TurnStatus.CANCELLED
    assert observer.of(ApprovalDecided)[0].reason == "cancelled"
    assert all_results(result)[0].output == "Cancelled by user."


@pytest.mark.timeout(10)  # a hang guard; what ended the wait is asserted below
async def test_cancel_from_another_thread_is_seen():
    provider = FakeScriptedProvider([Stall(pieces=["…"])])
    token = CancelToken()
    loop = asyncio.get_running_loop()
    loop.call_later(0.1, lambda: loop.run_in_executor(None, token.cancel, "stop"))
    result, _ = await turn(provider, cancel=token)
    assert (result.status, result.error) == (TurnStatus.CANCELLED, "stop")


async def test_a_dangling_tool_call_in_the_incoming_history_gets_a_result():
    history = [Message.user("hi"), Message.assistant(blocks=[ToolUseBlock("old", "lookup", {})])]
    provider = FakeScriptedProvider([answer("ok")])
    result, _ = await turn(provider, history=history)
    sent = provider.requests[0].messages
    assert sent[2].role is Role.TOOL and sent[2].tool_results_blocks[0].tool_use_id == "old"
    assert len(history) == 2  # the caller's list is untouched


# -- timeouts ---------------------------------------------------------------------------------------------
@pytest.mark.timeout(10)  # a hang guard; what ended the wait is asserted below
async def test_a_step_that_takes_too_long_times_out():
    provider = FakeScriptedProvider([Stall(pieces=["Thinking"])])
    result, observer = await turn(provider, cfg=config(step_timeout_s=0.2))
    assert result.status is TurnStatus.TIMED_OUT
    assert result.error == "LLM inference step timed out after 0.2s (step_timeout_s)"
    assert provider.streams_closed == 1
    assert observer.of(TurnError)[0].error_kind == "timeout"


async def test_a_tool_that_takes_too_long_becomes_an_error_result():
    provider = FakeScriptedProvider([calls(("slow", {})), answer("moved on")])
    result, _ = await turn(provider, tools=[tool("slow", delay=5)], cfg=config(tool_timeout_s=0.1))
    assert result.status is TurnStatus.COMPLETED
    timed_out = all_results(result)[0]
    assert timed_out.is_error and timed_out.output == "Error: tool 'slow' timed out after 0.1s"


# -- loop detection ------------------------------------------------------------------------------------------
async def test_loop_detection_warns_blocks_then_breaks():
    provider = FakeScriptedProvider([calls(("poll", {"id": 1}))], repeat_last=True)
    result, observer = await turn(provider, tools=[tool("poll", "still pending")],
                                  cfg=config(max_tool_iterations=10))
    assert result.status is TurnStatus.FAILED
    assert result.error_kind == "loop_detected"
    assert result.error.startswith("Agent loop aborted by loop detector: Circuit breaker")
    assert [e.level for e in observer.of(LoopDetected)] == ["warning", "block", "break"]
    assert len(provider.requests) == 5
    # the warning reaches the next request as a system notice, once
    assert any("[Loop Detection] Warning" in b.text for b in provider.requests[3].system)
    assert not any("[Loop Detection]" in b.text for b in provider.requests[4].system)
    outputs = [r.output for r in all_results(result)]
    assert outputs[3].startswith("[Loop Detection — BLOCKED] Blocked: tool 'poll' called 4 times")
    assert outputs[:3] == ["still pending"] * 3
    # the turn ends with every call answered
    assert result.history[-1].role is Role.TOOL


async def test_loop_detection_ignores_repeats_whose_output_changes():
    outputs = iter(range(100))

    async def progress(arguments: dict[str, Any]) -> str:
        return f"step {next(outputs)}"

    provider = FakeScriptedProvider([calls(("poll", {"id": 1}))] * 6 + [answer("done")])
    result, observer = await turn(provider, tools=[FunctionTool("poll", "", progress)])
    assert result.status is TurnStatus.COMPLETED
    assert observer.of(LoopDetected) == []


# -- exhaustion ----------------------------------------------------------------------------------------------------
async def test_exhaustion_asks_once_more_without_tools_for_a_summary():
    provider = FakeScriptedProvider([calls(("step", {"n": 1})), calls(("step", {"n": 2})),
                                     answer("Summary of the work.")])
    result, _ = await turn(provider, tools=[tool("step")], cfg=config(max_tool_iterations=2))
    assert result.status is TurnStatus.MAX_ITERATIONS
    assert result.text == "Summary of the work."
    assert result.error is None
    last = provider.requests[-1]
    assert len(provider.requests) == 3
    assert last.tools is None
    assert last.messages[-1].role is Role.USER and last.messages[-1].text == EXHAUSTION_PROMPT
    assert EXHAUSTION_PROMPT not in history_json(result.history)
    assert result.history[-1].text == "Summary of the work."


async def test_exhaustion_without_a_summary_reports_the_limit():
    provider = FakeScriptedProvider([calls(("step", {})), answer("")])
    result, _ = await turn(provider, tools=[tool("step")], cfg=config(max_tool_iterations=1))
    assert result.status is TurnStatus.MAX_ITERATIONS
    assert result.error == ("Agent exceeded maximum tool iterations (1); asked to answer without "
                            "tools, the model sent an empty answer")


async def test_exhaustion_in_xml_mode_drops_the_tool_protocol():
    provider = FakeScriptedProvider([answer('<tool_call>{"name": "step", "arguments": {}}</tool_call>'),
                                     answer("Summary.")], native=False)
    result, _ = await turn(provider, tools=[tool("step")], cfg=config(max_tool_iterations=1))
    assert "<tool_call>" in provider.requests[0].system_text
    assert "<tool_call>" not in provider.requests[1].system_text
    assert result.text == "Summary."


# -- tool failures -------------------------------------------------------------------------------------------
async def test_an_unknown_tool_becomes_an_error_result():
    provider = FakeScriptedProvider([calls(("nope", {})), answer("sorry")])
    result, _ = await turn(provider, tools=[tool("lookup")])
    failed = all_results(result)[0]
    assert (failed.output, failed.is_error) == ("Unknown tool: nope", True)
    assert result.status is TurnStatus.COMPLETED


async def test_tool_exceptions_and_failures_become_error_results():
    async def boom(arguments: dict[str, Any]) -> str:
        raise RuntimeError("kaput")

    async def refuses(arguments: dict[str, Any]) -> str:
        raise ToolError("no such file")

    async def fails(arguments: dict[str, Any]) -> ToolResult:
        return ToolResult.fail("quota reached")

    provider = FakeScriptedProvider([calls(("boom", {}), ("refuses", {}), ("fails", {})), answer("ok")])
    result, observer = await turn(provider, tools=[FunctionTool("boom", "", boom),
                                                   FunctionTool("refuses", "", refuses),
                                                   FunctionTool("fails", "", fails)])
    assert [(r.output, r.is_error) for r in all_results(result)] == [
        ("Error executing boom: kaput", True), ("Error: no such file", True),
        ("Error: quota reached", True)]
    assert [e.error for e in observer.of(ToolFinished)] == ["kaput", "no such file", "quota reached"]


async def test_invalid_arguments_get_a_clear_error_the_model_can_fix():
    provider = FakeScriptedProvider([
        calls(("lookup", "just a string"), ("lookup", {"other": 1})), answer("ok")])
    result, _ = await turn(provider, tools=[tool("lookup", required=["q"])])
    first, second = all_results(result)
    assert first.is_error and first.output == (
        "Error: Invalid arguments for tool 'lookup': The arguments must be a JSON object, not str. "
        "Call the tool again with an object of named arguments.")
    assert second.is_error and "Missing required argument(s) for tool 'lookup': q." in second.output
    stored_call = result.history[1].tool_uses[0]
    assert stored_call.input == {}


# -- scrubbing and truncation -------------------------------------------------------------------------------------
async def test_secrets_in_tool_output_never_reach_history_or_events():
    async def leaky_error(arguments: dict[str, Any]) -> str:
        raise RuntimeError(f"bad credentials api_key={SECRET}")

    async def leaky_fail(arguments: dict[str, Any]) -> ToolResult:
        return ToolResult.fail(f"token={SECRET} rejected")

    provider = FakeScriptedProvider([
        calls(("leaky", {}), ("leaky_error", {}), ("leaky_fail", {})), answer("done")])
    result, observer = await turn(provider, tools=[tool("leaky", f"api_key={SECRET}"),
                                                   FunctionTool("leaky_error", "", leaky_error),
                                                   FunctionTool("leaky_fail", "", leaky_fail)],
                                  cfg=config(trajectory_states=True))
    assert SECRET not in history_json(result.history)
    assert SECRET not in events_json(observer)
    assert SECRET not in json.dumps([s.to_dict() for s in result.trajectory_states])
    assert SECRET not in json.dumps([m.to_dict() for m in provider.requests[1].messages])
    assert all("[REDACTED]" in r.output for r in all_results(result))


async def test_large_tool_output_is_truncated_head_and_tail():
    big = "HEAD" + "x" * 10_000 + "TAIL"
    provider = FakeScriptedProvider([calls(("dump", {})), answer("ok")])
    result, observer = await turn(provider, tools=[tool("dump", big)],
                                  cfg=config(max_tool_output_chars=1_000))
    output = all_results(result)[0].output
    assert output.startswith("HEAD") and output.endswith("TAIL")
    assert "characters truncated" in output and len(output) < 1_100
    assert observer.of(ToolFinished)[0].output == output


# -- history size ---------------------------------------------------------------------------------------------------
def big_history(pairs: int, size: int) -> list[Message]:
    history: list[Message] = []
    for i in range(pairs):
        history.append(Message.user(f"question {i} " + "q" * size))
        history.append(Message.assistant(f"answer {i} " + "a" * size))
    return history


async def test_context_overflow_is_recovered_once_and_retried():
    history = [Message.user("read the log"),
               Message.assistant(blocks=[ToolUseBlock("t1", "read", {})]),
               Message.tool_results([ToolResultBlock("t1", "L" * 20_000, False, "read")]),
               Message.assistant("It is long."), *big_history(3, 10)]
    overflow = ProviderError("prompt is too long", retryable=False, kind=ErrorKind.CONTEXT_OVERFLOW)
    provider = FakeScriptedProvider([overflow, answer("recovered")])
    result, observer = await turn(provider, history=history)
    assert result.status is TurnStatus.COMPLETED
    assert result.text == "recovered"
    assert len(provider.requests) == 2
    retried_log = provider.requests[1].messages[2].tool_results_blocks[0].output
    assert len(retried_log) < 3_000
    assert observer.of(Compacted)[0].reason == "context_overflow"
    assert [e.success for e in observer.of(LlmRequestFinished)] == [False, True]


async def test_a_second_context_overflow_fails_the_turn():
    history = [Message.user("read"), Message.assistant(blocks=[ToolUseBlock("t1", "read", {})]),
               Message.tool_results([ToolResultBlock("t1", "L" * 20_000, False, "read")]),
               *big_history(3, 10)]
    overflow = ProviderError("prompt is too long", retryable=False, kind=ErrorKind.CONTEXT_OVERFLOW)
    provider = FakeScriptedProvider([overflow, overflow])
    result, _ = await turn(provider, history=history)
    assert result.status is TurnStatus.FAILED
    assert result.error_kind == "provider" and result.error == "prompt is too long"


async def test_a_request_over_the_window_is_shortened_before_it_is_sent():
    # Nothing over the compaction threshold, but a 4k window: the earlier turns go, this
    # turn's message stays, and the one request sent fits.
    history = big_history(6, 1_600)  # about 4.8k estimated tokens
    provider = FakeScriptedProvider([answer("fits now")])
    cfg = config(context_window=4_096, answer_reserve=512,
                 compaction=CompactionSettings(enabled=False))
    result, observer = await turn(provider, history=history, message="and now?", cfg=cfg)
    assert result.status is TurnStatus.COMPLETED and result.text == "fits now"
    assert len(provider.requests) == 1
    sent = provider.requests[0]
    assert sent.messages[-1].text.endswith("and now?")
    assert estimate_tokens(sent.messages) * 1.1 <= 4_096 - 512
    assert observer.of(Compacted) and observer.of(Compacted)[0].reason == "context_window"


async def test_a_turn_whose_own_message_cannot_fit_ends_without_a_request():
    provider = FakeScriptedProvider([answer("never")])
    cfg = config(context_window=4_096, answer_reserve=512)
    result, _ = await turn(provider, history=big_history(2, 100), message="x" * 20_000, cfg=cfg)
    assert result.status is TurnStatus.FAILED and result.error_kind == "context_overflow"
    assert "reads at most 4,096" in result.error
    assert provider.requests == []


async def test_an_overflow_naming_a_smaller_window_fits_the_retry_to_it():
    # Configured as 32k, the server holds 4k and says so: the retry leaves the earlier turns
    # out (a huge message among them) and the turn answers; no later turn inherits the size.
    history = [Message.user("y" * 12_000), Message.assistant("That is long."),
               *big_history(2, 200)]
    overflow = ProviderError("Requested tokens (5718) exceed context window of 4096",
                             retryable=False, kind=ErrorKind.CONTEXT_OVERFLOW)
    provider = FakeScriptedProvider([overflow, answer("10")])
    cfg = config(context_window=32_768, answer_reserve=4_096,
                 compaction=CompactionSettings(enabled=False))
    result, _ = await turn(provider, history=history, message="What is 5 + 5?", cfg=cfg)
    assert result.status is TurnStatus.COMPLETED and result.text == "10"
    retried = provider.requests[1]
    assert estimate_tokens(retried.messages) * 1.1 <= 4_096 - 512
    assert retried.messages[-1].text.endswith("What is 5 + 5?")


async def test_compaction_triggers_above_the_threshold():
    history = big_history(10, 4_000)  # about 20k estimated tokens
    provider = FakeScriptedProvider([answer("fine")])
    result, observer = await turn(provider, history=history)
    compacted = observer.of(Compacted)[0]
    assert compacted.reason == "threshold" and compacted.removed_message_count > 0
    assert result.compactions[0].removed_message_count == compacted.removed_message_count
    request = provider.requests[0]
    assert all(m.role is not Role.SYSTEM for m in request.messages)
    assert any(b.text.startswith("This session is being continued") for b in request.system)
    assert result.history[0].role is Role.SYSTEM
    assert len(request.messages) <= 5
    assert request.messages[-1].text.endswith("hello")  # the new user message survives


async def test_compaction_does_not_run_below_the_threshold_or_when_disabled():
    history = big_history(10, 4_000)
    provider = FakeScriptedProvider([answer("fine")])
    _, observer = await turn(provider, history=history,
                             cfg=config(compaction=CompactionSettings(enabled=False)))
    assert observer.of(Compacted) == []
    assert len(provider.requests[0].messages) == 21


async def test_trimming_keeps_the_system_prompt():
    history = [Message.system("Earlier summary."), *big_history(30, 1)]
    provider = FakeScriptedProvider([answer("ok")])
    result, _ = await turn(provider, history=history, cfg=config(history_max_messages=10))
    assert result.history[0].text == "Earlier summary."
    assert len(result.history) == 11
    assert "Earlier summary." in provider.requests[0].system_text
    assert len(provider.requests[0].messages) == 10


# -- dispatch ---------------------------------------------------------------------------------------------------------
async def test_xml_dispatch_round_trip():
    provider = FakeScriptedProvider([
        answer('Let me check.\n<tool_call>\n{"name": "lookup", "arguments": {"q": "x"}}\n</tool_call>'),
        answer("It is x.")], native=False)
    result, observer = await turn(provider, tools=[tool("lookup", "x-ray")])
    first, second = provider.requests
    assert first.tools is None
    assert "- **lookup**: The lookup tool." in first.system_text
    assert "## Tool Use Protocol" in first.system_text
    assert second.messages[-1].role is Role.USER
    assert second.messages[-1].text == (
        '[Tool results]\n<tool_result name="lookup" status="ok">\nx-ray\n</tool_result>\n')
    assert second.messages[-2].role is Role.ASSISTANT and second.messages[-2].tool_uses == []
    assert "<tool_call>" in second.messages[-2].text
    stored = result.history[1]
    assert stored.tool_uses == [ToolUseBlock("call_1", "lookup", {"q": "x"})]
    assert "<tool_call>" in stored.text  # raw text kept
    assert result.history[2].tool_results_blocks[0].tool_use_id == "call_1"
    assert result.text == "It is x."
    assert "<tool_call>" not in "".join(e.text for e in observer.of(TextDelta))


async def test_xml_dispatch_marks_failed_results_with_error_status():
    provider = FakeScriptedProvider([
        answer('<tool_call>{"name": "missing", "arguments": {}}</tool_call>'), answer("ok")],
        native=False)
    await turn(provider, tools=[tool("lookup")])
    assert provider.requests[1].messages[-1].text == (
        '[Tool results]\n<tool_result name="missing" status="error">\nUnknown tool: missing\n'
        '</tool_result>\n')


async def test_native_dispatch_round_trip():
    provider = FakeScriptedProvider([calls(("lookup", {"q": "x"}), text="Checking."),
                                     answer("It is x.")])
    result, _ = await turn(provider, tools=[tool("lookup", "x-ray")])
    first, second = provider.requests
    assert [s.name for s in first.tools] == ["lookup"]
    assert "## Tool Use Protocol" not in first.system_text
    assistant, results = second.messages[-2], second.messages[-1]
    assert assistant.tool_uses[0].id == "toolu_1" and assistant.text == "Checking."
    assert results.role is Role.TOOL
    assert results.tool_results_blocks[0] == ToolResultBlock("toolu_1", "x-ray", False, "lookup")


async def test_history_from_native_turns_is_rendered_as_text_for_xml_dispatch():
    history = [Message.user("q"), Message.assistant(blocks=[ToolUseBlock("n1", "lookup", {"q": 1})]),
               Message.tool_results([ToolResultBlock("n1", "r", False, "lookup")]),
               Message.assistant("a")]
    provider = FakeScriptedProvider([answer("ok")], native=False)
    await turn(provider, history=history, tools=[tool("lookup")])
    sent = provider.requests[0].messages
    assert '<tool_call>\n{"id": "n1", "name": "lookup", "arguments": {"q": 1}}\n</tool_call>' in sent[1].text
    assert sent[2].role is Role.USER and sent[2].text.startswith("[Tool results]\n")


async def test_a_malformed_tool_call_is_reported_and_hidden():
    provider = FakeScriptedProvider([answer("Sure.\n<tool_call>{not json</tool_call>")], native=False)
    result, observer = await turn(provider, tools=[tool("lookup")])
    assert result.status is TurnStatus.COMPLETED
    assert observer.of(ToolCallParseIssue)
    assert "<tool_call>" not in result.text


# -- trajectory states ---------------------------------------------------------------------------------------------
async def test_a_trajectory_state_is_recorded_after_each_tool_iteration():
    provider = FakeScriptedProvider([
        calls(("lookup", {"q": "a"}), text="I will look it up."),
        calls(("broken", {}), text="Maybe the other source helps?"),
        answer("done")])
    result, observer = await turn(provider, tools=[tool("lookup", "alpha found"), tool("broken", "x")],
                                  message="find alpha")
    states = [e.state for e in observer.of(TrajectoryStateRecorded)]
    assert len(states) == 2 == len(result.trajectory_states)
    first, second = states
    assert first["objective"] == "find alpha"
    assert first["evidence"] == ["lookup: alpha found"]
    assert first["tool_calls"] == [{"id": "toolu_1", "name": "lookup", "arguments": '{"q":"a"}',
                                    "success": True}]
    assert first["next_plan"] == "I will look it up."
    assert second["evidence"] == ["lookup: alpha found", "broken: x"]
    assert second["uncertainties"] == ["Maybe the other source helps?"]
    assert observer.of(TrajectoryStateRecorded)[1].changed == ["evidence", "uncertainties",
                                                               "next_plan", "tool_calls"]


async def test_trajectory_state_is_injected_only_when_enabled():
    for inject in (True, False):
        provider = FakeScriptedProvider([calls(("lookup", {})), answer("done")])
        await turn(provider, tools=[tool("lookup", "found")],
                   cfg=config(inject_trajectory_state=inject))
        texts = [b.text for b in provider.requests[1].system]
        injected = [t for t in texts if t.startswith("## Trajectory state")]
        assert bool(injected) is inject
        if inject:
            assert "- lookup: found" in injected[0]
        assert not any(t.startswith("## Trajectory state") for t in
                       (b.text for b in provider.requests[0].system))


async def test_no_trajectory_states_when_disabled():
    provider = FakeScriptedProvider([calls(("lookup", {})), answer("done")])
    result, observer = await turn(provider, tools=[tool("lookup")],
                                  cfg=config(trajectory_states=False))
    assert result.trajectory_states == [] and observer.of(TrajectoryStateRecorded) == []


async def test_previous_trajectory_state_goes_into_the_dynamic_prompt():
    previous = {"iteration": 2, "objective": "old goal", "evidence": ["x: y"], "uncertainties": [],
                "failures": [], "next_plan": "finish", "tool_calls": []}
    provider = FakeScriptedProvider([answer("ok")])
    await turn(provider, cfg=config(previous_trajectory_state=previous))
    assert "previous turn" in provider.requests[0].system_text
    assert "Objective: old goal" in provider.requests[0].system_text


# -- system prompt, time stamp, memory ------------------------------------------------------------------------------
async def test_the_time_stamp_is_on_the_wire_but_not_in_stored_history():
    provider = FakeScriptedProvider([answer("ok")])
    result, _ = await turn(provider, message="what's new?",
                           cfg=config(timezone="Asia/Seoul"))
    assert provider.requests[0].messages[-1].text == "[2026-03-22 15:30:00 KST] what's new?"
    assert result.new_messages[0].text == "what's new?"
    assert result.history[0].text == "what's new?"


async def test_system_prompt_has_a_static_and_a_dynamic_part_with_memory():
    provider = FakeScriptedProvider([answer("ok")])
    memory = "[Memory context]\n- name: Alice\n[/Memory context]"
    result, _ = await turn(provider, cfg=config(memory_context=memory, timezone="Europe/Berlin"))
    static, dynamic = provider.requests[0].system
    assert (static.text, static.cacheable) == ("You are helpful.", True)
    assert not dynamic.cacheable
    assert "2026-03-22 07:30:00 CET (Sunday)" in dynamic.text and memory in dynamic.text
    assert "Memory context" not in history_json(result.history)


# -- hooks -------------------------------------------------------------------------------------------------------------
async def test_the_budget_hook_can_block_a_call():
    class Budget(TurnHooks):
        async def before_llm_call(self, iteration: int, usage_so_far: Usage) -> LlmCallDecision | None:
            return LlmCallDecision.block("Daily budget reached.") if iteration == 2 else None

    provider = FakeScriptedProvider([calls(("lookup", {})), answer("never")])
    result, observer = await turn(provider, tools=[tool("lookup")], hooks=Budget())
    assert result.status is TurnStatus.FAILED
    assert (result.error, result.error_kind) == ("Daily budget reached.", "budget")
    assert len(provider.requests) == 1
    assert observer.of(TurnError)[0].error_kind == "budget"
    assert result.history[-1].role is Role.TOOL


async def test_a_hook_can_end_the_turn_before_the_tools_run():
    log: list[str] = []

    class Budget(TurnHooks):
        async def before_tool_calls(self, iteration: int, usage_so_far: Usage, names: list[str]) -> str | None:
            return f"No budget for the request after {', '.join(names)}." if iteration == 1 else None

    provider = FakeScriptedProvider([calls(("deploy", {}), ("lookup", {})), answer("never")])
    result, observer = await turn(provider, tools=[tool("deploy", log=log), tool("lookup", log=log)],
                                  hooks=Budget())
    assert log == []  # no side effects
    assert (result.status, result.error_kind) == (TurnStatus.FAILED, "budget")
    assert result.error == "No budget for the request after deploy, lookup."
    assert len(provider.requests) == 1
    # the history stays valid: every call has a result, none of them a tool's output
    results = tool_messages(result)[-1].tool_results_blocks
    assert [b.tool_use_id for b in results] == ["toolu_1", "toolu_2"] and all(b.is_error for b in results)


async def test_the_budget_hook_can_route_down_to_another_model_and_provider():
    seen: list[tuple[int, Usage]] = []
    finished: list[LlmCall] = []
    cheap = FakeScriptedProvider([answer("cheap answer")])

    class RouteDown(TurnHooks):
        async def before_llm_call(self, iteration: int, usage_so_far: Usage) -> LlmCallDecision | None:
            seen.append((iteration, usage_so_far))
            return LlmCallDecision.route_down("small-model", cheap) if iteration == 2 else None

        async def after_llm_call(self, call: LlmCall) -> None:
            finished.append(call)

    provider = FakeScriptedProvider([calls(("lookup", {}))])
    result, _ = await turn(provider, tools=[tool("lookup")], hooks=RouteDown())
    assert result.text == "cheap answer"
    assert cheap.requests[0].model == "small-model"
    assert seen == [(1, Usage()), (2, Usage(input_tokens=10, output_tokens=5))]
    assert [c.provider for c in result.llm_calls] == ["fake", "fake"]
    assert [c.model for c in finished] == ["fake-model", "fake-model"]
    assert result.usage == Usage(input_tokens=20, output_tokens=10)


async def test_a_provider_error_fails_the_turn_with_its_message():
    provider = FakeScriptedProvider([ProviderError("upstream 503", retryable=True)])
    result, observer = await turn(provider)
    assert result.status is TurnStatus.FAILED
    assert result.error == "upstream 503"
    assert observer.of(LlmRequestFinished)[0].error == "upstream 503"


async def test_a_stream_without_a_done_event_fails_cleanly():
    class Truncated(FakeScriptedProvider):
        async def stream(self, request: ChatRequest):
            self.requests.append(request)
            yield __import__("agents.runtime.providers.base", fromlist=["StreamText"]).StreamText("Hal")

    result, _ = await turn(Truncated([]))
    assert result.status is TurnStatus.FAILED
    assert "without a message stop event" in result.error


async def test_non_streaming_mode_uses_chat():
    provider = FakeScriptedProvider([answer("plain")])
    result, observer = await turn(provider, cfg=config(stream=False))
    assert result.text == "plain" and observer.of(TextDelta) == []
    assert provider.streams_opened == 0


async def test_the_final_answer_is_sanitized_for_display():
    raw = "<think>secret plan</think>The answer is 4."
    provider = FakeScriptedProvider([answer(raw)])
    result, observer = await turn(provider)
    assert result.raw_text == raw
    assert result.text == "The answer is 4."
    assert "secret plan" not in "".join(e.text for e in observer.of(TextDelta))


async def test_the_next_turn_continues_from_the_returned_history():
    provider = FakeScriptedProvider([calls(("lookup", {})), answer("first"), answer("second")])
    first, _ = await turn(provider, tools=[tool("lookup")], message="one")
    second, _ = await turn(provider, tools=[tool("lookup")], message="two", history=first.history)
    assert second.text == "second"
    assert [m.role for m in provider.requests[-1].messages] == [
        Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT, Role.USER]
    assert provider.requests[-1].messages[0].text == "one"  # stored unstamped


async def test_xml_call_ids_continue_after_those_in_history():
    history = [Message.user("q"), Message.assistant(blocks=[ToolUseBlock("call_7", "lookup", {})]),
               Message.tool_results([ToolResultBlock("call_7", "r", False, "lookup")]),
               Message.assistant("a")]
    provider = FakeScriptedProvider([answer('<tool_call>{"name": "lookup", "arguments": {}}</tool_call>'),
                                     answer("ok")], native=False)
    result, _ = await turn(provider, history=history, tools=[tool("lookup")])
    assert result.new_messages[1].tool_uses[0].id == "call_8"



# -- building blocks -----------------------------------------------------------------------------------
async def test_cancel_token_keeps_the_first_reason_and_wakes_waiters():
    token = CancelToken()
    waiter = asyncio.create_task(token.wait())
    await asyncio.sleep(0)
    token.cancel("first")
    token.cancel("second")
    assert await asyncio.wait_for(waiter, 1) == "first"
    assert token.cancelled and token.reason == "first"
    assert await token.wait() == "first"


async def test_guarded_times_out_and_cancels_the_work():
    from agents.runtime.cancel import StepTimedOut, guarded

    cancelled: list[bool] = []

    async def slow() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    with pytest.raises(StepTimedOut):
        await guarded(slow(), limit_s=0.05)
    assert cancelled == [True]
    assert await guarded(asyncio.sleep(0, "done"), cancel=CancelToken(), limit_s=1) == "done"


def test_loop_detector_sees_ping_pong_and_no_progress():
    from agents.runtime.loop import LoopDetector

    detector = LoopDetector()
    verdicts = [detector.record("read" if i % 2 == 0 else "write", {}, f"r{i}") for i in range(12)]
    # 4 full read/write cycles warn, 5 block, 6 break
    assert [v[0] if v else None for v in verdicts][6:] == [None, "warning", "warning", "block",
                                                          "block", "break"]
    detector = LoopDetector()
    verdicts = [detector.record("search", {"q": i}, "no results") for i in range(7)]
    assert [v[0] if v else None for v in verdicts] == [None, None, None, None, "warning", "block",
                                                      "break"]


async def test_bidirectional_controls_in_tool_output_and_answers_are_written_out():
    provider = FakeScriptedProvider([calls(("files", {})), answer("Open safe\u202etxt.exe now")])
    result, observer = await turn(provider, tools=[tool("files", "report\u2067.pdf\u2069 and safe\u202etxt.exe")])
    [block] = all_results(result)
    assert block.output == "report[U+2067].pdf[U+2069] and safe[U+202E]txt.exe"
    assert observer.of(ToolFinished)[0].output == block.output
    assert result.text == "Open safe[U+202E]txt.exe now"


async def test_in_prompt_guided_mode_a_call_quoted_with_its_result_is_not_run_again():
    # The model retells the conversation, call and result included, before its answer: the
    # quoted call is not made again; a call after the quote still is.
    log: list[str] = []
    quoted = ('So far: <tool_call>\n{"name": "lookup", "arguments": {}}\n</tool_call>\n'
              '<tool_result name="lookup" status="ok">\nkey-7\n</tool_result>\n')
    provider = FakeScriptedProvider([
        answer('<tool_call>\n{"name": "lookup", "arguments": {}}\n</tool_call>'),
        answer(quoted + "Your key is key-7."),
        answer('<tool_call>\n{"name": "lookup", "arguments": {}}\n</tool_call>'),
        answer(quoted + 'Once more: <tool_call>\n{"name": "lookup", "arguments": {}}\n</tool_call>'),
        answer("Still key-7."),
    ])
    cfg = config(dispatcher="xml")
    first, _ = await turn(provider, tools=[tool("lookup", "key-7", log=log)], cfg=cfg,
                          message="what is my key?")
    assert first.status is TurnStatus.COMPLETED and log == ["start lookup", "end lookup"]
    assert "key-7" in first.text and "<tool_result" not in first.text
    log.clear()
    second, _ = await turn(provider, tools=[tool("lookup", "key-7", log=log)], cfg=cfg,
                           message="and again?")
    assert second.status is TurnStatus.COMPLETED
    assert log == ["start lookup", "end lookup"] * 2  # its own call, then the one after the quote


async def test_in_prompt_guided_mode_a_call_copied_from_the_history_is_a_quote_not_a_call():
    # The history shows each call with its id; a model retelling what it did copies the id, and
    # that call is not made again. A bare copy (nothing else said) is the model asking again.
    log: list[str] = []
    copied = '<tool_call>\n{"id": "call_1", "name": "lookup", "arguments": {}}\n</tool_call>'
    provider = FakeScriptedProvider([
        answer('<tool_call>\n{"name": "lookup", "arguments": {}}\n</tool_call>'),
        answer("Your key is key-7."),
        answer(f"Earlier I ran this:\n{copied}\nand your key was key-7."),
        answer(copied),
        answer("Still key-7."),
    ])
    cfg = config(dispatcher="xml")
    lookup = tool("lookup", "key-7", log=log)
    first, _ = await turn(provider, tools=[lookup], cfg=cfg, message="what is my key?")
    assert log == ["start lookup", "end lookup"]
    second, _ = await turn(provider, tools=[lookup], cfg=cfg, history=first.history,
                           message="what did you run?")
    assert copied in provider.requests[2].messages[1].text  # the history showed the id
    assert second.status is TurnStatus.COMPLETED and len(log) == 2  # not run again
    assert "<tool_call" not in second.text and second.text.endswith("your key was key-7.")
    third, _ = await turn(provider, tools=[lookup], cfg=cfg, history=second.history,
                          message="check again")
    assert third.status is TurnStatus.COMPLETED and third.text == "Still key-7."
    assert len(log) == 4  # asked again: run, under an id of its own
    ids = [u.id for m in third.history for u in m.tool_uses]
    assert ids == ["call_1", "call_2"]


async def test_an_id_the_model_wrote_is_never_shared_by_two_calls():
    provider = FakeScriptedProvider([
        answer('<tool_call>{"id": "x", "name": "lookup", "arguments": {"q": 1}}</tool_call>'
               '<tool_call>{"id": "x", "name": "lookup", "arguments": {"q": 2}}</tool_call>'),
        answer('<tool_call>{"id": "x", "name": "lookup", "arguments": {"q": 3}}</tool_call>'),
        answer("done"),
    ])
    result, _ = await turn(provider, tools=[tool("lookup")], cfg=config(dispatcher="xml"))
    assert result.status is TurnStatus.COMPLETED
    ids = [u.id for m in result.history for u in m.tool_uses]
    assert len(ids) == 3 and len(set(ids)) == 3 and ids[0] == "x"
    assert [b.tool_use_id for b in all_results(result)] == ids
