"""``run_turn(resume=...)``: a stored turn continues where its record ends, without running a
recorded call again or reporting what was already recorded."""

from __future__ import annotations

from typing import Any

import pytest

from agents.runtime.events import (
    FinalAnswer,
    LlmRequestStarted,
    MessageAppended,
    RecordingObserver,
    ToolFinished,
    ToolStarted,
)
from agents.runtime.loop import RESUME_INTERRUPTED_OUTPUT, Resume, TurnConfig, TurnStatus, run_turn
from agents.runtime.messages import Message, Role, TextBlock, ToolResultBlock, ToolUseBlock
from agents.runtime.pricing import Usage
from agents.runtime.tools import FunctionTool

from .scripted_provider import FakeScriptedProvider, answer

pytestmark = pytest.mark.asyncio


def counting(name: str, runs: list[str], *, idempotent: bool = False) -> FunctionTool:
    async def run(arguments: dict[str, Any]) -> str:
        runs.append(name)
        return f"{name} ran"

    return FunctionTool(name, f"The {name} tool.", run, idempotent=idempotent)


def asked(*uses: tuple[str, str]) -> Message:
    return Message(Role.ASSISTANT, [TextBlock("Let me check."),
                                    *(ToolUseBlock(id=i, name=n, input={}) for i, n in uses)])


async def resumed(resume: Resume, script: list, tools: list[FunctionTool], *,
                  dispatcher: str = "auto"):
    provider = FakeScriptedProvider(script)
    observer = RecordingObserver()
    config = TurnConfig(model="fake-model", dispatcher=dispatcher)
    result = await run_turn(provider=provider, config=config, history=[],
                            user_message="Do the four things", tools=tools, observer=observer,
                            resume=resume)
    return result, provider, observer


async def test_the_last_answers_calls_are_settled_by_what_is_recorded_and_what_is_safe_to_repeat():
    runs: list[str] = []
    tools = [counting("done", runs), counting("send_mail", runs),
             counting("lookup", runs, idempotent=True), counting("later", runs)]
    recorded = ToolResultBlock("call_1", "done ran earlier", False, "done")
    resume = Resume(
        messages=[asked(("call_1", "done"), ("call_2", "send_mail"), ("call_3", "lookup"),
                        ("call_4", "later"))],
        iteration=1, recorded={"call_1": recorded},
        interrupted=frozenset({"call_2", "call_3"}), usage=Usage(input_tokens=100, output_tokens=20))

    result, provider, observer = await resumed(resume, [answer("All four handled.")], tools)

    assert result.status is TurnStatus.COMPLETED and result.text == "All four handled."
    # the recorded call is not run; the interrupted mail is not repeated; the rest run
    assert sorted(runs) == ["later", "lookup"]
    started = [e.call_id for e in observer.of(ToolStarted)]
    finished = {e.call_id: e for e in observer.of(ToolFinished)}
    assert "call_1" not in started and "call_1" not in finished
    assert finished["call_2"].output == RESUME_INTERRUPTED_OUTPUT and not finished["call_2"].success
    # the model's next request holds the earlier answer and every result, in call order
    sent = provider.requests[0].messages
    results = [b for b in sent[-1].blocks if isinstance(b, ToolResultBlock)]
    assert [r.tool_use_id for r in results] == ["call_1", "call_2", "call_3", "call_4"]
    assert results[0].output == "done ran earlier"
    # one new request, for iteration 2; usage counts the recorded requests too
    assert [e.iteration for e in observer.of(LlmRequestStarted)] == [2]
    assert result.usage.input_tokens == 100 + 10
    assert [str(m.role) for m in result.new_messages] == ["user", "assistant", "tool", "assistant"]


async def test_after_a_finished_tool_batch_the_next_request_is_sent_and_call_ids_go_on():
    runs: list[str] = []
    resume = Resume(messages=[asked(("call_1", "lookup")),
                              Message.tool_results([ToolResultBlock("call_1", "42", False, "lookup")])],
                    iteration=1)

    # prompt-guided calls get the loop's own ids (call_<n>)
    result, provider, observer = await resumed(
        resume, [answer('<tool_call>{"name": "lookup", "arguments": {}}</tool_call>'), answer("Done.")],
        [counting("lookup", runs, idempotent=True)], dispatcher="xml")

    assert result.status is TurnStatus.COMPLETED and runs == ["lookup"]
    new_ids = [u.id for m in result.new_messages for u in m.tool_uses]
    assert new_ids == ["call_1", "call_2"]  # the new call does not reuse the recorded id
    appended = observer.of(MessageAppended)
    assert [e.iteration for e in appended] == [2, 3]
    assert appended[0].message["blocks"][-1]["id"] == "call_2"


async def test_a_turn_whose_last_answer_had_no_calls_ends_with_it():
    resume = Resume(messages=[asked(("call_1", "lookup")),
                              Message.tool_results([ToolResultBlock("call_1", "42", False, "lookup")]),
                              Message(Role.ASSISTANT, [TextBlock("It is 42.")])], iteration=2)

    result, provider, observer = await resumed(resume, [], [counting("lookup", [])])

    assert (result.status, result.text) == (TurnStatus.COMPLETED, "It is 42.")
    assert provider.requests == [] and observer.of(FinalAnswer)[0].text == "It is 42."


async def test_an_empty_record_starts_the_turn_from_its_first_request():
    result, provider, observer = await resumed(Resume(), [answer("Hello.")], [])
    assert result.text == "Hello." and len(provider.requests) == 1
    assert observer.of(LlmRequestStarted)[0].iteration == 1
    assert observer.of(LlmRequestStarted)[0].estimated_input_tokens > 0
