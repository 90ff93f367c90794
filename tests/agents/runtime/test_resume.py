"""Continuing a stored turn (``run_turn(resume=Resume(...))``) and the record it continues from
(``MessageAppended``, ``LlmRequestStarted.estimated_input_tokens``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from agents.runtime.events import (
    ApprovalRequested,
    Event,
    FinalAnswer,
    LlmRequestFinished,
    LlmRequestStarted,
    LoopDetected,
    MessageAppended,
    RecordingObserver,
    ToolFinished,
    ToolStarted,
    TrajectoryStateRecorded,
)
from agents.runtime.loop import (
    EXHAUSTION_PROMPT,
    RESUME_INTERRUPTED_OUTPUT,
    LlmCallDecision,
    Resume,
    TurnConfig,
    TurnHooks,
    TurnStatus,
    estimate_request_usage,
    run_turn,
)
from agents.runtime.messages import Message, Role, TextBlock, ToolResultBlock, ToolUseBlock
from agents.runtime.pricing import Usage
from agents.runtime.tools import FunctionTool, Tool
from agents.runtime.trajectory import ObservedCall, build_trajectory_state

from .scripted_provider import FakeScriptedProvider, answer, calls

FIXED_NOW = datetime(2026, 3, 22, 6, 30, 0, tzinfo=UTC)
ASK = "Look up a, tell bob, search c and count."


def fixed_clock() -> datetime:
    return FIXED_NOW


def tool(name: str, log: list[str], *, output: str | None = None, idempotent: bool = False,
         requires_approval: bool = False) -> Tool:
    async def run(arguments: dict[str, Any]) -> str:
        log.append(name)
        return output if output is not None else f"{name} result"

    return FunctionTool(name, f"The {name} tool.", run, idempotent=idempotent,
                        requires_approval=requires_approval)


def config(**overrides: Any) -> TurnConfig:
    return TurnConfig(**{"model": "fake-model", "system_prompt": "You are helpful.", **overrides})


async def turn(provider: FakeScriptedProvider, resume: Resume | None, *,
               tools: list[Tool] | None = None, message: str = ASK, **kwargs: Any):
    observer = RecordingObserver()
    cfg = kwargs.pop("cfg", None) or config()
    result = await run_turn(provider=provider, config=cfg, history=kwargs.pop("history", []),
                            user_message=message, tools=tools or [], observer=observer,
                            clock=fixed_clock, resume=resume, **kwargs)
    return result, observer


def assistant(*uses: ToolUseBlock, text: str = "") -> Message:
    return Message(Role.ASSISTANT, [*([TextBlock(text)] if text else []), *uses])


def results_of(messages: list[Message]) -> list[ToolResultBlock]:
    return [b for m in messages if m.role is Role.TOOL for b in m.tool_results_blocks]


def kinds(observer: RecordingObserver) -> list[str]:
    return [e.kind for e in observer.events]


# -- an iteration whose calls were not all answered ---------------------------------------------
async def test_it_settles_each_open_call_by_what_the_record_says_of_it():
    log: list[str] = []
    tools = [tool("lookup", log), tool("send", log), tool("search", log, idempotent=True),
             tool("count", log)]
    open_iteration = assistant(
        ToolUseBlock("call_1", "lookup", {"q": "a"}),   # finished: its result is on record
        ToolUseBlock("call_2", "send", {"to": "bob"}),  # was running, may not run twice
        ToolUseBlock("call_3", "search", {"q": "c"}),   # was running, reads only
        ToolUseBlock("call_4", "count", {}),            # never started
        text="Let me do four things.")
    resume = Resume(messages=[open_iteration], iteration=1,
                    recorded={"call_1": ToolResultBlock("call_1", "a is 1", False, "lookup")},
                    interrupted=frozenset({"call_2", "call_3"}), usage=Usage(100, 20))
    provider = FakeScriptedProvider([answer("All four are done.")])

    result, observer = await turn(provider, resume, tools=tools)

    assert result.status is TurnStatus.COMPLETED and result.text == "All four are done."
    assert sorted(log) == ["count", "search"]
    settled = results_of(result.new_messages)
    assert [(r.tool_use_id, r.output, r.is_error) for r in settled] == [
        ("call_1", "a is 1", False),
        ("call_2", RESUME_INTERRUPTED_OUTPUT, True),
        ("call_3", "search result", False),
        ("call_4", "count result", False),
    ]
    assert sorted(e.call_id for e in observer.of(ToolStarted)) == ["call_3", "call_4"]
    finished = {e.call_id: (e.success, e.error) for e in observer.of(ToolFinished)}
    assert finished == {"call_2": (False, "interrupted"), "call_3": (True, None),
                        "call_4": (True, None)}
    # One tool message answers every call, and the next request sees all of it.
    assert [m.role for m in result.new_messages] == [Role.USER, Role.ASSISTANT, Role.TOOL,
                                                     Role.ASSISTANT]
    assert result.new_messages[1] is open_iteration
    sent = provider.requests[0].messages
    assert sent[-2].tool_uses == open_iteration.tool_uses
    assert sent[-1].tool_results_blocks == settled
    assert [e.iteration for e in observer.of(TrajectoryStateRecorded)] == [1]
    assert [e.iteration for e in observer.of(LlmRequestStarted)] == [2]
    assert result.iterations == 2
    # The resumed message is not announced again; the new answer is.
    appended = observer.of(MessageAppended)
    assert [(e.iteration, e.message) for e in appended] == [(2, result.new_messages[-1].to_dict())]


async def test_a_partly_recorded_tool_message_is_completed_not_repeated():
    log: list[str] = []
    calls_made = assistant(ToolUseBlock("call_1", "lookup", {"q": "a"}),
                           ToolUseBlock("call_2", "count", {}))
    partial = Message.tool_results([ToolResultBlock("call_1", "a is 1", False, "lookup")])
    resume = Resume(messages=[calls_made, partial], iteration=1)

    result, observer = await turn(FakeScriptedProvider([answer("Done.")]), resume,
                                  tools=[tool("lookup", log), tool("count", log)])

    assert log == ["count"]
    assert [m.role for m in result.new_messages] == [Role.USER, Role.ASSISTANT, Role.TOOL,
                                                     Role.ASSISTANT]
    assert [(r.tool_use_id, r.output) for r in results_of(result.new_messages)] == [
        ("call_1", "a is 1"), ("call_2", "count result")]
    assert [e.call_id for e in observer.of(ToolStarted)] == ["call_2"]


async def test_a_call_that_needs_approval_and_never_started_is_asked_again():
    class Approver:
        def __init__(self) -> None:
            self.asked: list[str] = []

        async def request(self, call: Any) -> bool:
            self.asked.append(call.call_id)
            return True

    log: list[str] = []
    approver = Approver()
    resume = Resume(messages=[assistant(ToolUseBlock("call_1", "deploy", {"env": "prod"}))],
                    iteration=1)

    result, observer = await turn(FakeScriptedProvider([answer("Deployed.")]), resume,
                                  tools=[tool("deploy", log, requires_approval=True)],
                                  approver=approver)

    assert approver.asked == ["call_1"] and log == ["deploy"]
    assert [e.call_id for e in observer.of(ApprovalRequested)] == ["call_1"]
    assert result.status is TurnStatus.COMPLETED


async def test_the_settled_iteration_builds_on_the_recorded_state():
    log: list[str] = []
    first = build_trajectory_state(iteration=1, objective=ASK, assistant_text="",
                                   calls=[ObservedCall("call_1", "lookup", {}, "a is 1", True)])
    resume = Resume(messages=[assistant(ToolUseBlock("call_1", "lookup", {})),
                              Message.tool_results([ToolResultBlock("call_1", "a is 1", False,
                                                                    "lookup")]),
                              assistant(ToolUseBlock("call_2", "count", {}))],
                    iteration=2, state=first.to_dict())

    _, observer = await turn(FakeScriptedProvider([answer("Done.")]), resume,
                             tools=[tool("count", log)])

    state = observer.of(TrajectoryStateRecorded)[0]
    assert state.iteration == 2
    assert state.state["evidence"] == ["lookup: a is 1", "count: count result"]
    # Against the restored state, not against nothing: the objective did not change.
    assert "objective" not in state.changed and "evidence" in state.changed


async def test_the_loop_detector_counts_the_recorded_iterations():
    log: list[str] = []
    messages: list[Message] = []
    for n in (1, 2, 3):
        messages += [assistant(ToolUseBlock(f"call_{n}", "lookup", {"q": "same"})),
                     Message.tool_results([ToolResultBlock(f"call_{n}", "same", False, "lookup")])]
    provider = FakeScriptedProvider([calls(("lookup", {"q": "same"}, "call_4")), answer("Stuck.")])

    result, observer = await turn(provider, Resume(messages=messages, iteration=3),
                                  tools=[tool("lookup", log, output="same")])

    # The fourth identical call in a row is blocked, as it would have been without the restart.
    assert [e.level for e in observer.of(LoopDetected)] == ["block"]
    assert results_of(result.new_messages)[-1].output.startswith("[Loop Detection — BLOCKED]")


# -- a record that ends between iterations, or with the answer ----------------------------------
async def test_after_a_finished_batch_the_turn_goes_on_with_the_next_request():
    log: list[str] = []
    done = [assistant(ToolUseBlock("call_1", "lookup", {"q": "a"})),
            Message.tool_results([ToolResultBlock("call_1", "a is 1", False, "lookup")])]
    state = build_trajectory_state(iteration=1, objective=ASK, assistant_text="",
                                   calls=[ObservedCall("call_1", "lookup", {}, "a is 1", True)])
    provider = FakeScriptedProvider([answer("a is 1.")])

    result, observer = await turn(provider, Resume(messages=list(done), iteration=1,
                                                   state=state.to_dict()),
                                  tools=[tool("lookup", log)])

    assert log == [] and not observer.of(ToolStarted) and not observer.of(ToolFinished)
    assert not observer.of(TrajectoryStateRecorded)
    assert [e.iteration for e in observer.of(LlmRequestStarted)] == [2]
    assert provider.requests[0].messages[1:] == done
    assert result.new_messages[1:3] == done and len(result.new_messages) == 4
    assert [e.iteration for e in observer.of(MessageAppended)] == [2]
    assert result.iterations == 2 and result.text == "a is 1."


async def test_a_finished_batch_whose_state_was_not_recorded_gets_it():
    done = [assistant(ToolUseBlock("call_1", "lookup", {})),
            Message.tool_results([ToolResultBlock("call_1", "a is 1", False, "lookup")])]
    _, observer = await turn(FakeScriptedProvider([answer("a is 1.")]),
                             Resume(messages=done, iteration=1), tools=[tool("lookup", [])])
    states = observer.of(TrajectoryStateRecorded)
    assert [(s.iteration, s.state["evidence"]) for s in states] == [(1, ["lookup: a is 1"])]
    assert kinds(observer).index("trajectory_state") < kinds(observer).index("llm_request_started")


async def test_a_finished_batch_at_the_limit_goes_on_to_the_summary():
    log: list[str] = []
    done = [assistant(ToolUseBlock("call_1", "lookup", {})),
            Message.tool_results([ToolResultBlock("call_1", "a is 1", False, "lookup")])]
    provider = FakeScriptedProvider([answer("So far: a is 1.")])

    result, observer = await turn(provider, Resume(messages=done, iteration=1),
                                  tools=[tool("lookup", log)], cfg=config(max_tool_iterations=1))

    assert result.status is TurnStatus.MAX_ITERATIONS and result.text == "So far: a is 1."
    request = provider.requests[0]
    assert request.tools is None and request.messages[-1].text == EXHAUSTION_PROMPT
    assert [e.iteration for e in observer.of(MessageAppended)] == [2]


async def test_a_recorded_answer_ends_the_turn_without_a_request():
    recorded = [assistant(ToolUseBlock("call_1", "lookup", {})),
                Message.tool_results([ToolResultBlock("call_1", "4", False, "lookup")]),
                assistant(text="The answer is 4.")]
    provider = FakeScriptedProvider([])

    result, observer = await turn(provider, Resume(messages=recorded, iteration=2,
                                                   usage=Usage(300, 40)))

    assert provider.requests == []
    assert result.status is TurnStatus.COMPLETED and result.text == "The answer is 4."
    assert result.iterations == 2 and result.usage == Usage(300, 40)
    assert result.new_messages[1:] == recorded
    assert kinds(observer) == ["final_answer"]
    assert observer.of(FinalAnswer)[0].text == "The answer is 4."


async def test_without_recorded_messages_the_turn_starts_with_its_first_request():
    seen: list[Usage] = []

    class Hooks(TurnHooks):
        async def before_llm_call(self, iteration: int, usage_so_far: Usage) -> LlmCallDecision | None:
            seen.append(usage_so_far)
            return None

    provider = FakeScriptedProvider([answer("Hello.", usage=Usage(10, 5))])
    result, observer = await turn(provider, Resume(usage=Usage(100, 20)), message="hi",
                                  hooks=Hooks())

    assert [e.iteration for e in observer.of(LlmRequestStarted)] == [1]
    assert [m.role for m in provider.requests[0].messages] == [Role.USER]
    # Budgets see what the cut-off requests cost too.
    assert seen == [Usage(100, 20)]
    assert result.usage == Usage(110, 25)
    assert [m.role for m in result.new_messages] == [Role.USER, Role.ASSISTANT]


async def test_a_budget_counts_the_recorded_usage():
    class Budget(TurnHooks):
        async def before_llm_call(self, iteration: int, usage_so_far: Usage) -> LlmCallDecision | None:
            if usage_so_far.input_tokens >= 100:
                return LlmCallDecision.block("The turn's budget is spent.")
            return None

    provider = FakeScriptedProvider([answer("never sent")])
    result, _ = await turn(provider, Resume(usage=Usage(100, 0)), hooks=Budget())
    assert result.status is TurnStatus.FAILED and result.error == "The turn's budget is spent."
    assert provider.requests == []


async def test_new_call_ids_go_on_after_the_recorded_ones():
    log: list[str] = []
    history = [Message.user("earlier"), assistant(ToolUseBlock("call_2", "lookup", {})),
               Message.tool_results([ToolResultBlock("call_2", "x", False, "lookup")]),
               assistant(text="earlier answer")]
    recorded = [assistant(ToolUseBlock("call_7", "lookup", {"q": "a"})),
                Message.tool_results([ToolResultBlock("call_7", "a is 1", False, "lookup")])]
    xml_call = '<tool_call>\n{"name": "lookup", "arguments": {"q": "b"}}\n</tool_call>'
    provider = FakeScriptedProvider([answer(xml_call), answer("Both found.")], native=False)

    result, _ = await turn(provider, Resume(messages=recorded, iteration=1),
                           tools=[tool("lookup", log)], history=history)

    ids = [u.id for m in result.history for u in m.tool_uses]
    assert ids == ["call_2", "call_7", "call_8"]
    assert result.status is TurnStatus.COMPLETED and log == ["lookup"]


async def test_a_resume_holding_a_user_message_fails_the_turn_clearly():
    provider = FakeScriptedProvider([answer("never sent")])
    result, _ = await turn(provider, Resume(messages=[Message.user("again")], iteration=1))
    assert result.status is TurnStatus.FAILED and "not user messages" in (result.error or "")
    assert provider.requests == []


# -- the record a turn is resumed from ----------------------------------------------------------
async def test_each_assistant_message_is_announced_when_it_joins_the_history():
    log: list[str] = []
    provider = FakeScriptedProvider([calls(("lookup", {"q": "a"})), calls(("count", {})),
                                     answer("Done.")])
    result, observer = await turn(provider, None, tools=[tool("lookup", log), tool("count", log)])

    answers = [m for m in result.new_messages if m.role is Role.ASSISTANT]
    appended = observer.of(MessageAppended)
    assert [(e.iteration, e.message) for e in appended] == [
        (i, m.to_dict()) for i, m in enumerate(answers, start=1)]
    assert appended[0].message["blocks"][0]["id"] == "toolu_1"
    # After the request that produced it, before its calls run.
    order = kinds(observer)
    first = order.index("message_appended")
    assert order[first - 1] == "llm_request_finished" and order[first + 1] == "tool_started"


async def test_the_summary_after_the_last_iteration_is_announced():
    log: list[str] = []
    provider = FakeScriptedProvider([calls(("lookup", {})), answer("Summary.")])
    result, observer = await turn(provider, None, tools=[tool("lookup", log)],
                                  cfg=config(max_tool_iterations=1))
    assert result.status is TurnStatus.MAX_ITERATIONS
    appended = observer.of(MessageAppended)
    assert [e.iteration for e in appended] == [1, 2]
    assert Message.from_dict(appended[1].message).text == "Summary."


def resume_from(events: list[Event], *, iteration: int) -> Resume:
    """What a caller rebuilds from a recorded turn: its announced messages and tool results."""
    messages: list[Message] = []
    for event in events:
        if isinstance(event, MessageAppended) and event.iteration <= iteration:
            messages.append(Message.from_dict(event.message))
        elif isinstance(event, ToolFinished) and event.iteration <= iteration:
            block = ToolResultBlock(event.call_id, event.output, not event.success, event.name)
            if messages[-1].role is Role.TOOL:
                messages[-1].blocks.append(block)
            else:
                messages.append(Message.tool_results([block]))
    return Resume(messages=messages, iteration=iteration)


async def test_a_turn_resumed_from_its_events_sends_what_it_would_have_sent():
    log: list[str] = []
    tools = [tool("lookup", log), tool("count", log)]
    script = [calls(("lookup", {"q": "a"}), ("count", {})), answer("Done.")]
    whole = FakeScriptedProvider(list(script))
    _, observer = await turn(whole, None, tools=tools)

    again = FakeScriptedProvider([answer("Done.")])
    result, _ = await turn(again, resume_from(observer.events, iteration=1), tools=tools)

    assert log == ["lookup", "count"]  # the resumed turn ran nothing again
    assert ([m.to_dict() for m in again.requests[0].messages]
            == [m.to_dict() for m in whole.requests[1].messages])
    assert result.text == "Done."


async def test_every_request_says_how_many_input_tokens_it_is_estimated_at():
    log: list[str] = []
    provider = FakeScriptedProvider([calls(("lookup", {"q": "a"})), answer("Done.")])
    _, observer = await turn(provider, None, tools=[tool("lookup", log, output="x" * 4000)])

    started = observer.of(LlmRequestStarted)
    estimates = [e.estimated_input_tokens for e in started]
    # The running estimate agrees with counting the whole request afresh.
    for estimate, request in zip(estimates, provider.requests, strict=True):
        counted = estimate_request_usage(request, "").input_tokens
        assert abs(estimate - counted) <= 10, (estimate, counted)
    assert estimates[1] - estimates[0] >= 1000  # the tool's output is in the second request
    assert all(e.success for e in observer.of(LlmRequestFinished))
