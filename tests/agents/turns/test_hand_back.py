"""A worker that is stopping hands its running turns back: the recorder stops recording, the
turn is cancelled without a trace of the cancellation, and its trace goes back to the queue to
be continued elsewhere from its last recorded step. Turns run in threads of this process, as
a worker's thread pool runs them, on the demo model slowed down."""

from __future__ import annotations

import time

import pytest
from django.utils import timezone

from agents.chat.services import conversation_create
from agents.models import Message, TurnWorker
from agents.turns.execution import HANDED_BACK, turn_execute
from agents.turns.running import RUNNING, turns_hand_back
from agents.turns.services import turn_start
from agents.turns.tasks import turn_run, worker_stopping
from agents.turns.workers import worker_name
from tests.helpers import wait_for
from tests.members import member_of
from traces.models import Step, Trace

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _running_turns_reopen():
    """Handing back closes the process's registry to new turns (a worker that stops); the
    next test's process runs turns again."""
    yield
    RUNNING.reopen()


def assert_handed_back(trace: Trace) -> Trace:
    trace.refresh_from_db()
    assert (trace.status, trace.worker, trace.heartbeat_at, trace.finished_at) == ("queued", "", None, None)
    resume = trace.meta["resume"]
    assert resume["reason"] == "handoff" and resume["from_worker"]
    assert not trace.steps.filter(kind="error").exists()
    assert not trace.steps.filter(error__icontains="cancel").exists()
    # Nothing of the turn was stored as the conversation's: it is not over.
    assert list(Message.objects.filter(trace=trace).values_list("role", flat=True)) == ["user"]
    return trace


def test_a_streaming_turn_is_handed_back_and_its_thread_ends(
        make_agent, alice, sent_turns, use_redis, run_in_thread):
    agent = make_agent(name="Slow", provider_options={"first_token_latency_s": 0.05, "token_delay_s": 0.2})
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="Tell me something nice")
    worker = run_in_thread(trace.pk)
    wait_for(lambda: Step.objects.filter(trace=trace, kind="llm_request", status="running").exists())
    time.sleep(0.3)  # a few words are out
    assert len(RUNNING) == 1

    assert turns_hand_back(reason="handoff", wait_s=5) == 1
    worker.join(timeout=5)
    assert not worker.is_alive()
    assert worker.result == HANDED_BACK and len(RUNNING) == 0

    trace = assert_handed_back(trace)
    # The request cut off stays as it was when the worker stopped, for the resumption to see.
    assert list(trace.steps.values_list("kind", "status")) == [("llm_request", "running")]
    assert sent_turns == [trace.pk, trace.pk]  # sent again, for any worker to continue


def test_a_tool_cut_off_by_the_hand_back_gets_no_cancelled_result(
        slow_tool_agent, alice, sent_turns, use_redis, run_in_thread):
    agent = slow_tool_agent.agent
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="call the slow_tool tool 1 times")
    worker = run_in_thread(trace.pk)
    assert slow_tool_agent.started.wait(10)

    assert turns_hand_back(wait_s=5) == 1
    worker.join(timeout=5)
    assert not worker.is_alive() and worker.result == HANDED_BACK
    assert slow_tool_agent.stopped.is_set()  # the tool was cancelled, not left running

    trace = assert_handed_back(trace)
    steps = list(trace.steps.order_by("seq").values_list("kind", "status", "error"))
    assert steps == [("llm_request", "ok", ""), ("tool_call", "running", "")]


def test_a_turn_that_starts_after_the_hand_back_is_handed_back_at_once(
        conversation, alice, sent_turns, use_redis):
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="What is 2 + 3?")
    assert turns_hand_back(wait_s=1) == 0  # nothing runs; the worker is stopping now

    # The task of a stopping worker goes back to the queue unclaimed ...
    from celery.exceptions import Reject

    with pytest.raises(Reject):
        turn_run(trace.pk)
    assert Trace.objects.get(pk=trace.pk).attempts == 0
    # ... and a turn claimed in the same moment is handed back before it runs.
    assert turn_execute(trace_id=trace.pk, worker="stopping@here") == HANDED_BACK
    trace.refresh_from_db()
    assert (trace.status, trace.attempts, trace.meta["resume"]["from_worker"]) == ("queued", 1, "stopping@here")
    assert not trace.steps.exists()

    RUNNING.reopen()
    assert turn_run(trace.pk) == "completed"


def test_a_worker_that_waits_marks_itself_stopping_and_lets_its_turns_run(
        settings, make_agent, alice, sent_turns, use_redis, run_in_thread):
    settings.TURN_SHUTDOWN = "wait"
    agent = make_agent(name="Patient", provider_options={"request_latency_s": 1})
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    row = TurnWorker.objects.create(name=worker_name("turns-1@here"), pid=1, beat_at=timezone.now())
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="What is 2 + 3?")
    worker = run_in_thread(trace.pk)
    wait_for(lambda: Step.objects.filter(trace=trace, status="running").exists())

    assert worker_stopping(name="turns-1@here") == 0
    row.refresh_from_db()
    assert row.stopping_at is not None

    worker.join(timeout=10)
    assert worker.result == "completed"


def test_a_worker_that_hands_off_marks_itself_stopping_and_hands_its_turns_back(
        make_agent, alice, sent_turns, use_redis, run_in_thread):
    agent = make_agent(name="Slowish", provider_options={"request_latency_s": 5})
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    row = TurnWorker.objects.create(name=worker_name("turns-2@here"), pid=1, beat_at=timezone.now())
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="What is 2 + 3?")
    worker = run_in_thread(trace.pk)
    wait_for(lambda: Step.objects.filter(trace=trace, status="running").exists())

    assert worker_stopping(name="turns-2@here") == 1
    worker.join(timeout=5)
    row.refresh_from_db()
    assert row.stopping_at is not None
    assert_handed_back(trace)
