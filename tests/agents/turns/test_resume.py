"""Continuing a stored turn from its record (``agents.turns.resume``): what is rebuilt from the
steps, how a cut-off model request is ended and priced, and a turn resumed in this process after
its first attempt stopped part-way."""

from __future__ import annotations

from decimal import Decimal

import pytest

from agents.models import Message
from agents.runtime.loop import Resume
from agents.turns.lifecycle import trace_claim, trace_hand_back
from agents.turns.resume import CUT_OFF_ERROR, resume_from_steps, turn_resume_plan
from agents.turns.services import turn_start
from agents.turns.tasks import turn_run
from tests.members import member_of
from tests.traces.cost_helpers import ledger_total, priced_demo, steps_total
from traces.models import Step, StepPayload, Trace
from traces.record.services import step_partial_save, step_record

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_finished_turn_is_rebuilt_from_its_steps_exactly_as_it_was_stored(
        conversation, alice, sent_turns, use_redis):
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="call the current_time tool 3 times")
    assert turn_run(trace.pk) == "completed"

    resume = resume_from_steps(trace_id=trace.pk)

    stored = [(m.role, m.blocks) for m in Message.objects.filter(trace=trace).exclude(role="user")
              .order_by("id")]
    assert [(str(m.role), m.to_dict()["blocks"]) for m in resume.messages] == stored
    # the last answer has no calls: the runtime ends the turn with it
    assert not resume.messages[-1].tool_uses and resume.iteration == 4
    assert resume.recorded == {} and resume.interrupted == frozenset()
    llm = Step.objects.filter(trace=trace, kind="llm_request")
    assert resume.usage.input_tokens == sum(s.input_tokens for s in llm) > 0
    assert resume.state is not None and resume.state["iteration"] == 3


def test_only_the_steps_up_to_a_point_are_used_when_asked(conversation, alice, sent_turns, use_redis):
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="call the current_time tool 3 times")
    turn_run(trace.pk)
    second_tool = Step.objects.filter(trace=trace, kind="tool_call").order_by("seq")[1]

    resume = resume_from_steps(trace_id=trace.pk, upto_seq=second_tool.seq)

    # two answers: the first with its result, the second with its call recorded, not yet sent on
    assert [str(m.role) for m in resume.messages] == ["assistant", "tool", "assistant"]
    last_call = resume.messages[-1].tool_uses[0].id
    assert last_call == second_tool.call_id and set(resume.recorded) == {last_call}
    assert resume.recorded[last_call].output == second_tool.payloads.get(kind="output").content


def _died_mid_tools(conversation, alice) -> Trace:
    """A turn whose worker died while the second of two calls ran: rebuilt from a finished turn
    by putting its later steps back as they were at that moment."""
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="call the current_time tool 2 times")
    turn_run(trace.pk)
    tools = list(Step.objects.filter(trace=trace, kind="tool_call").order_by("seq"))
    # the second call still running, nothing after it
    Step.objects.filter(trace=trace, seq__gt=tools[1].seq).delete()
    Step.objects.filter(pk=tools[1].pk).update(status="running", success=None)
    StepPayload.objects.filter(step=tools[1], kind="output").delete()
    Message.objects.filter(trace=trace).exclude(role="user").delete()
    Trace.objects.filter(pk=trace.pk).update(status="running", finished_at=None, answer="",
                                             worker="dead@host")
    return Trace.objects.get(pk=trace.pk)


def test_a_call_that_was_running_is_left_to_the_runtime_to_settle(conversation, alice, sent_turns,
                                                                   use_redis):
    trace = _died_mid_tools(conversation, alice)
    running = trace.steps.get(status="running")

    resume = resume_from_steps(trace_id=trace.pk)

    assert resume.interrupted == frozenset({running.call_id})
    assert running.call_id not in resume.recorded
    assert [str(m.role) for m in resume.messages] == ["assistant", "tool", "assistant"]


def test_a_cut_off_request_ends_as_an_aborted_attempt_with_its_text_and_an_estimated_price(
        conversation, alice, sent_turns, use_redis):
    priced_demo(conversation.team, inp="3", out="15")
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="Hello")
    claimed = trace_claim(trace_id=trace.pk, worker="dead@host")
    step_record(trace_id=trace.pk, attempt=1, seq=1, values={
        "kind": "llm_request", "status": "running", "name": "demo", "model": "demo",
        "provider": conversation.agent.provider.name, "iteration": 1,
        "meta": {"key": "llm:1:1", "estimated_input_tokens": 1000}})
    step_partial_save(trace_id=trace.pk, seq=1, text="The answer so far, cut off in the midd")
    assert trace_hand_back(trace_id=trace.pk, attempt=claimed.attempts, reason="worker_lost")
    again = trace_claim(trace_id=trace.pk, worker="alive@host")

    plan = turn_resume_plan(trace=again, attempt=again.attempts)

    assert plan is not None and plan.reason == "worker_lost" and plan.from_worker == "dead@host"
    assert plan.paused_s is not None and plan.paused_s >= 0
    assert plan.resume == Resume(messages=[], iteration=0, usage=plan.resume.usage)
    step = Step.objects.get(trace=trace, seq=1)
    assert (step.status, step.success, step.error) == ("error", False, CUT_OFF_ERROR)
    assert step.input_tokens == 1000 and 5 <= step.output_tokens <= 15
    assert step.meta["usage_estimated"] and step.meta["aborted"] and step.meta["partial_chars"] == 38
    expected = (Decimal(1000) * 3 + Decimal(step.output_tokens) * 15) / Decimal(1_000_000)
    assert step.cost_usd == expected
    # the ledger counts what the provider was paid for
    assert ledger_total(team=conversation.team) == steps_total(trace=trace) == expected
    assert StepPayload.objects.get(step=step, kind="partial").content.endswith("midd")


def test_a_turn_that_stopped_part_way_is_resumed_without_running_a_recorded_call_again(
        conversation, alice, sent_turns, use_redis):
    trace = _died_mid_tools(conversation, alice)
    done = trace.steps.get(kind="tool_call", status="ok")
    assert trace_hand_back(trace_id=trace.pk, attempt=trace.attempts, reason="worker_lost")

    assert turn_run(trace.pk) == "completed"

    trace.refresh_from_db()
    assert (trace.status, trace.attempts, trace.answer) == ("completed", 2, "Called current_time 2 times.")
    tools = trace.steps.filter(kind="tool_call")
    # current_time only reads the clock: the call that was running ran again, on its own row
    assert tools.count() == len(set(tools.values_list("call_id", flat=True))) == 2
    assert tools.get(pk=done.pk).event_seq == done.event_seq  # not run, not rewritten
    resumed = trace.steps.get(kind="resume")
    assert resumed.name.startswith("resumed on ") and resumed.meta["reason"] == "worker_lost"
    assert resumed.meta["interrupted_calls"] == [tools.exclude(pk=done.pk).get().call_id]
    roles = list(Message.objects.filter(trace=trace).order_by("id").values_list("role", flat=True))
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
