"""The turn task end to end, in this process, with the offline demo model and a real Redis for
the cancel and approval signals: steps, states, totals, messages, announcements, redelivery,
one turn in flight per conversation, cancellation, approvals and the time limit."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from decimal import Decimal

import pytest

from agents.models import Message
from agents.runtime.events import LlmRequestStarted
from agents.runtime.providers import registry
from agents.runtime.providers.demo import DemoProvider
from agents.turns import execution
from agents.turns.approvals import approval_decide
from agents.turns.services import turn_cancel, turn_start
from agents.turns.tasks import turn_run
from tests.approvals import waiting_approval
from tests.helpers import drain, listen, wait_for
from tests.members import member_of
from traces.models import Step, StepPayload, Trace, TrajectoryState

pytestmark = pytest.mark.django_db(transaction=True)

USAGE = ("input_tokens", "output_tokens", "cache_write_tokens", "cache_read_tokens", "reasoning_tokens")


def status_of(trace: Trace) -> str:
    return Trace.objects.values_list("status", flat=True).get(pk=trace.pk)


# -- the whole turn ---------------------------------------------------------------------------------
def test_a_turn_records_every_step_state_total_and_message(conversation, alice, sent_turns, use_redis):
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="call the current_time tool 2 times")
    channel = listen(trace.group_name)
    assert sent_turns == [trace.pk]

    assert turn_run(trace.pk) == "completed"

    trace.refresh_from_db()
    steps = list(trace.steps.order_by("seq"))
    assert [(s.seq, s.kind, s.status) for s in steps] == [
        (1, "llm_request", "ok"), (2, "tool_call", "ok"), (3, "llm_request", "ok"),
        (4, "tool_call", "ok"), (5, "llm_request", "ok"),
    ]
    assert [s.iteration for s in steps] == [1, 1, 2, 2, 3]
    first = steps[0]
    assert first.meta["tools_available"] == ["calculator", "current_time"]
    assert first.meta["tool_calls"] == ["current_time"] and first.meta["unpriced"] is False
    assert first.price.label == "free (offline demo)" and first.price_match == "exact"
    assert first.input_tokens > 0 and first.output_tokens > 0 and first.cost_usd == 0
    assert steps[1].name == "current_time" and steps[1].call_id and steps[1].success is True
    kinds = dict(StepPayload.objects.filter(step=steps[1]).values_list("kind", "size"))
    assert set(kinds) == {"arguments", "output"} and kinds["output"] > 0
    # the answer as it went into the history, for a resumption
    assert set(StepPayload.objects.filter(step=first).values_list("kind", flat=True)) == {
        "request", "response", "message"}
    # one trajectory state per tool iteration
    assert list(TrajectoryState.objects.filter(trace=trace).values_list("iteration", flat=True)) == [1, 2]

    # totals are the sum of the steps
    for name in USAGE:
        assert getattr(trace, name) == sum(getattr(s, name) for s in steps)
    assert trace.cost_usd == sum((s.cost_usd or Decimal(0)) for s in steps)
    assert (trace.status, trace.iterations, trace.step_count) == ("completed", 3, 5)
    assert trace.answer == "Called current_time 2 times."
    assert trace.duration_ms is not None and trace.finished_at and trace.attempts == 1
    assert trace.provider_kind == "demo" and trace.model == "demo"
    assert trace.routing["reason"].startswith("No routing rule matched")

    # messages: the user's, then the turn's own, all pointing at the trace
    rows = list(Message.objects.filter(conversation=conversation).order_by("id"))
    assert [m.role for m in rows] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert all(m.trace_id == trace.pk for m in rows)
    assert rows[-1].text == "Called current_time 2 times." and rows[-1].usage["output_tokens"] > 0

    # every persisted change was announced once, in order, without a gap
    events = drain(channel)
    persisted = [e["seq"] for e in events if e["event"] != "delta"]
    assert persisted == list(range(1, trace.event_seq + 1))
    assert {e["event"] for e in events} >= {"trace", "step", "state", "delta"}
    assert events[-1]["event"] == "trace" and events[-1]["status"] == "completed"
    deltas = [e for e in events if e["event"] == "delta"]
    assert "".join(d["text"] for d in deltas if d["step"] == 5) == "Called current_time 2 times."


def test_a_prompt_guided_call_with_no_other_text_is_stored_as_an_empty_message_not_a_malformed_one(
        make_agent, alice, sent_turns, use_redis):
    """In XML dispatch the text of a message that only calls a tool is the ``<tool_call>``
    markup itself: nothing for a reader, and nothing malformed either."""
    from agents.chat.services import conversation_create
    from agents.runtime.sanitize import MALFORMED_REPLY

    agent = make_agent(name="Tags", tool_dispatcher="xml")
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="call the current_time tool 1 time")

    assert turn_run(trace.pk) == "completed"

    rows = list(Message.objects.filter(conversation=conversation).order_by("id"))
    assert [m.role for m in rows] == ["user", "assistant", "tool", "assistant"]
    assert "<tool_call>" in rows[1].blocks[0]["text"] and rows[1].text == ""
    assert MALFORMED_REPLY not in [m.text for m in rows]
    assert rows[-1].text == "Called current_time 1 times."  # the demo model counts plainly


def test_the_same_task_delivered_twice_runs_once(conversation, alice, sent_turns, use_redis):
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="What is 12 * (7 + 5)?")
    assert turn_run(trace.pk) == "completed"
    trace.refresh_from_db()
    steps = list(Step.objects.filter(trace=trace).values_list("seq", "kind", "event_seq"))

    assert turn_run(trace.pk) == ""  # redelivered: nothing to claim

    again = Trace.objects.get(pk=trace.pk)
    assert list(Step.objects.filter(trace=trace).values_list("seq", "kind", "event_seq")) == steps
    assert (again.event_seq, again.attempts, again.answer) == (trace.event_seq, 1, "12 × (7 + 5) = 144.")
    assert Message.objects.filter(conversation=conversation).count() == 4


def test_a_turn_for_a_missing_trace_does_nothing(db):
    assert turn_run(987654) == ""


# -- one turn in flight per conversation -----------------------------------------------------------
def test_a_message_sent_during_a_turn_waits_and_runs_next(conversation, alice, sent_turns, use_redis):
    first = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="What is 2 + 3?")
    second = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="And what is 4 * 5?")
    assert sent_turns == [first.pk]  # the second waits
    assert status_of(second) == "queued"
    assert turn_run(second.pk) == ""  # even if it were delivered early, it may not start

    assert turn_run(first.pk) == "completed"
    assert sent_turns == [first.pk, second.pk]  # closing the first sent the second
    assert turn_run(second.pk) == "completed"

    second.refresh_from_db()
    assert second.answer == "4 × 5 = 20."
    # the second turn saw the first turn's answer before its own message
    request = StepPayload.objects.get(step__trace=second, step__seq=1, kind="request").content
    assert request.index("2 + 3 = 5.") < request.index("And what is 4 * 5?")


def test_a_new_message_interrupts_the_running_turn_when_the_agent_says_so(
        make_agent, alice, sent_turns, use_redis, run_in_thread):
    from agents.chat.services import conversation_create

    agent = make_agent(name="Eager", interrupt_on_new_message=True,
                       provider_options={"request_latency_s": 5})
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    first = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="What is 2 + 3?")
    worker = run_in_thread(first.pk)
    wait_for(lambda: Step.objects.filter(trace=first, status="running").exists())

    second = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="Never mind: what is 4 * 5?")
    worker.join(timeout=5)

    first.refresh_from_db()
    assert (first.status, first.cancel_reason) == ("cancelled", "interrupted by a new message")
    assert first.error == "Interrupted by a new message."
    assert sent_turns == [first.pk, second.pk]
    agent.provider.options = {}
    agent.provider.save()
    assert turn_run(second.pk) == "completed"


# -- stopping a turn ------------------------------------------------------------------------------------
class FakeClosingDemoProvider(DemoProvider):
    """The demo model, noting whether its stream was closed before it finished."""

    closed = threading.Event()
    finished = threading.Event()

    async def stream(self, request):
        try:
            async for event in super().stream(request):
                yield event
            type(self).finished.set()
        finally:
            type(self).closed.set()


def test_cancel_mid_stream_is_seen_within_a_second_and_closes_the_stream(
        monkeypatch, make_agent, alice, sent_turns, use_redis, run_in_thread):
    from agents.chat.services import conversation_create

    FakeClosingDemoProvider.closed.clear()
    FakeClosingDemoProvider.finished.clear()
    monkeypatch.setitem(registry.PROVIDER_CLASSES, "demo", FakeClosingDemoProvider)
    agent = make_agent(name="Slow", provider_options={"first_token_latency_s": 0.05, "token_delay_s": 0.2})
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="Tell me something nice")
    worker = run_in_thread(trace.pk)
    wait_for(lambda: Step.objects.filter(trace=trace, kind="llm_request", status="running").exists())
    time.sleep(0.3)  # a few words are out

    turn_cancel(trace=trace, membership=member_of(alice, trace))
    wait_for(lambda: status_of(trace) == "cancelled", timeout=10)  # the answer had seconds to go
    worker.join(timeout=5)

    assert FakeClosingDemoProvider.closed.is_set() and not FakeClosingDemoProvider.finished.is_set()
    trace.refresh_from_db()
    assert trace.error == "Cancelled by alice." and trace.cancel_requested_at
    llm = trace.steps.get(seq=1)
    assert (llm.status, llm.error) == ("error", "cancelled")
    assert trace.steps.filter(kind="error", name="cancelled").exists()
    # the words streamed before the stop stay in the conversation
    partial = Message.objects.filter(trace=trace, role="assistant").get()
    assert partial.text and "offline demo model" not in partial.text


def test_cancel_mid_tool_answers_the_dangling_call_so_the_next_turn_is_valid(
        slow_tool_agent, alice, sent_turns, use_redis, run_in_thread):
    from agents.chat.services import conversation_create

    agent = slow_tool_agent.agent
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="call the slow_tool tool 1 times")
    worker = run_in_thread(trace.pk)
    assert slow_tool_agent.started.wait(10)

    turn_cancel(trace=trace, membership=member_of(alice, trace))
    wait_for(lambda: status_of(trace) == "cancelled", timeout=10)
    worker.join(timeout=5)

    tool_step = Step.objects.get(trace=trace, kind="tool_call")
    assert (tool_step.status, tool_step.error) == ("error", "cancelled")
    roles = list(Message.objects.filter(trace=trace).order_by("id").values_list("role", flat=True))
    assert roles == ["user", "assistant", "tool"]
    result = Message.objects.get(trace=trace, role="tool").blocks[0]
    assert result["is_error"] is True and result["output"] == "Cancelled by user."

    following = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="What is 2 + 2?")
    assert turn_run(following.pk) == "completed"
    request = StepPayload.objects.get(step__trace=following, step__seq=1, kind="request")
    import json

    messages = json.loads(request.content)["messages"]
    uses = {b["id"] for m in messages for b in m["blocks"] if b["type"] == "tool_use"}
    answered = {b["tool_use_id"] for m in messages for b in m["blocks"] if b["type"] == "tool_result"}
    assert uses and uses <= answered


def test_cancelling_a_queued_turn_ends_it_at_once_and_starts_the_next(conversation, alice, sent_turns):
    first = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="one")
    second = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="two")

    turn_cancel(trace=first, membership=member_of(alice, first))

    first.refresh_from_db()
    assert (first.status, first.error, first.finished_at is not None) == ("cancelled", "Cancelled by alice.", True)
    assert sent_turns == [first.pk, second.pk]
    assert turn_run(first.pk) == ""  # its task, arriving late, finds nothing to claim


# -- approvals ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("approved", "answer"), [
    (True, "6 × 7 = 42."),
    (False, "I did not run calculator: Declined by a team owner."),
])
def test_a_tool_that_needs_approval_waits_for_a_decision(
        make_agent, alice, bob, sent_turns, use_redis, run_in_thread, approved, answer):
    from agents.chat.services import conversation_create

    agent = make_agent(name="Careful", approval=("calculator",))
    # bob's conversation; alice decides, as the team's owner may (the step names the decider)
    conversation = conversation_create(agent=agent, membership=member_of(bob, agent.team))
    trace = turn_start(conversation=conversation, membership=member_of(bob, conversation), text="What is 6 * 7?")
    worker = run_in_thread(trace.pk)
    step = waiting_approval(trace)
    time.sleep(0.4)  # a wait long enough to tell apart from the call's own time

    approval_decide(trace=trace, call_id=step.call_id, approved=approved, membership=member_of(alice, trace))
    worker.join(timeout=10)

    trace.refresh_from_db()
    step.refresh_from_db()
    assert (trace.status, trace.answer) == ("completed", answer)
    assert step.status == ("ok" if approved else "error") and step.meta["decided_by"] == "alice"
    call = Step.objects.get(trace=trace, kind="tool_call", success=approved)
    # The call is recorded from when it could run, the decision, not from before the wait, and
    # its time is its own: the inspector, the audit and the export read the same.
    decided = step.started_at + timedelta(milliseconds=step.duration_ms)
    assert step.duration_ms >= 400 and call.started_at >= decided - timedelta(milliseconds=2)
    assert call.offset_ms >= step.offset_ms + step.duration_ms - 2 and call.duration_ms < step.duration_ms
    assert call.meta["approval_waited_ms"] == step.duration_ms and "approval_wait_ms" not in call.meta
    if not approved:  # the person's decision, not a failure to retry
        state = trace.trajectory_states.order_by("iteration").first()
        assert state.fields["failures"] == [] and "Do not call calculator again" in state.fields["next_plan"]
        assert "not known: calculator did not run (Declined by a team owner.)" in state.fields["uncertainties"]


def test_an_approval_nobody_gives_times_out_as_a_denial(make_agent, alice, sent_turns, use_redis):
    from agents.chat.services import conversation_create

    agent = make_agent(name="Patient", approval=("calculator",), approval_timeout_s=1)
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="What is 6 * 7?")

    assert turn_run(trace.pk) == "completed"

    step = Step.objects.get(trace=trace, kind="approval")
    assert (step.status, step.meta["reason"]) == ("error", "timeout")
    assert "Nobody decided in time" in step.error
    assert Trace.objects.get(pk=trace.pk).answer == "I did not run calculator: Not approved in time."


# -- time limits -------------------------------------------------------------------------------------
def test_the_soft_time_limit_ends_the_turn_timed_out_and_keeps_its_steps(
        make_agent, alice, sent_turns, use_redis):
    from agents.chat.services import conversation_create

    agent = make_agent(name="Slowpoke", turn_time_limit_s=1, max_tool_iterations=50,
                       provider_options={"request_latency_s": 0.3})
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="call the current_time tool 30 times")

    assert turn_run(trace.pk) == "timed_out"  # 30 calls would take 9 s

    trace.refresh_from_db()
    assert trace.error_kind == "time_limit" and "time limit of 1 seconds" in trace.error
    steps = list(trace.steps.order_by("seq"))
    assert len(steps) >= 3 and steps[-1].kind == "error" and steps[-1].name == "timed_out"
    assert all(s.status in ("ok", "error") for s in steps)  # nothing left running
    assert trace.step_count == len(steps)
    # the tool calls of the turn all have results in the stored messages
    blocks = [b for m in Message.objects.filter(trace=trace) for b in m.blocks]
    assert {b["id"] for b in blocks if b["type"] == "tool_use"} == {
        b["tool_use_id"] for b in blocks if b["type"] == "tool_result"}


def test_a_turn_that_crashes_under_a_running_step_leaves_no_step_running(
        conversation, alice, sent_turns, use_redis, monkeypatch):
    # The loop breaks (a bug, say) while its model request is running: the turn ends failed
    # and the step it was in ends with it, never left "running" inside a finished trace.
    async def crashing(**kwargs):
        await kwargs["observer"].emit(LlmRequestStarted(
            iteration=1, provider="demo", model="demo", messages_count=1, request={"messages": []}))
        raise RuntimeError("the loop broke")

    monkeypatch.setattr(execution, "run_turn", crashing)
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="hello")
    assert turn_run(trace.pk) == "failed"
    steps = list(Trace.objects.get(pk=trace.pk).steps.order_by("seq"))
    llm = [s for s in steps if s.kind == "llm_request"]
    assert llm and all(s.status == "error" and "Interrupted" in s.error for s in llm)
    assert not [s for s in steps if s.status in ("running", "waiting")]
