"""Turns through a real Celery worker in a subprocess, on the test database and a Redis no other
worker listens on: queued turns run in order; a turn whose worker is killed is resumed by another."""

from __future__ import annotations

import os
import signal

import pytest

from agents.chat.services import conversation_create
from agents.turns.services import turn_start
from tests.helpers import wait_for
from tests.members import member_of
from traces.models import Step, Trace

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_a_real_worker_runs_queued_turns_one_after_the_other(conversation, alice, start_worker):
    start_worker()
    first = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="What is 2 + 3?")
    second = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="call the current_time tool 2 times")

    wait_for(lambda: Trace.objects.filter(pk=second.pk, status="completed").exists(), timeout=20)

    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.status, first.answer) == ("completed", "2 + 3 = 5.")
    assert second.answer == "Called current_time 2 times." and second.step_count == 5
    assert second.started_at >= first.finished_at
    assert first.worker.startswith("turns-") and first.attempts == 1


def test_a_worker_killed_mid_turn_is_resumed_from_its_last_step_by_another_worker(
        make_agent, alice, start_worker):
    agent = make_agent(name="Slow worker", max_tool_iterations=40,
                       provider_options={"request_latency_s": 0.3})
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    worker = start_worker()
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="call the current_time tool 12 times")
    wait_for(lambda: Step.objects.filter(trace=trace, kind="tool_call", status="ok").count() >= 3,
             timeout=30)

    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait(timeout=5)
    assert Trace.objects.get(pk=trace.pk).status == "running"
    before = set(Step.objects.filter(trace=trace, kind="tool_call", status="ok")
                 .values_list("call_id", "event_seq"))

    start_worker()
    # the other worker's reaper hands the trace back once the dead one is silent; it resumes it
    # (how soon is measured by `make chaos`, where a busy machine cannot fail the build)
    wait_for(lambda: Trace.objects.get(pk=trace.pk).attempts == 2, timeout=30, interval=0.2)
    wait_for(lambda: Trace.objects.get(pk=trace.pk).status == "completed", timeout=60, interval=0.2)

    trace.refresh_from_db()
    assert (trace.answer, trace.attempts) == ("Called current_time 12 times.", 2)
    tools = list(trace.steps.filter(kind="tool_call").values_list("call_id", flat=True))
    assert len(tools) == len(set(tools)) == 12  # no call recorded twice
    # the calls finished before the kill were neither run nor rewritten
    assert before <= set(trace.steps.values_list("call_id", "event_seq"))
    resumed = trace.steps.get(kind="resume")
    assert resumed.name.startswith("resumed on turns-") and resumed.meta["reason"] == "worker_lost"
    assert not trace.steps.filter(status__in=["running", "waiting"]).exists()

    # the conversation goes on: the next message gets a turn that completes
    agent.provider.options = {}
    agent.provider.save()
    following = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="What is 6 * 7?")
    wait_for(lambda: Trace.objects.get(pk=following.pk).status == "completed", timeout=30)
    assert Trace.objects.get(pk=following.pk).answer == "6 × 7 = 42."


def test_a_sigterm_d_worker_hands_its_running_turn_back_within_seconds(
        make_agent, alice, start_worker, tmp_path):
    agent = make_agent(name="Slow handoff", max_tool_iterations=40,
                       provider_options={"request_latency_s": 0.3})
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    worker = start_worker()
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="call the current_time tool 30 times")
    wait_for(lambda: Step.objects.filter(trace=trace).count() >= 3, timeout=20)

    os.kill(worker.pid, signal.SIGTERM)  # what systemd, Kubernetes and docker stop send first
    worker.wait(timeout=15)  # it exits (how soon: `make chaos`)
    assert "handed 1 of 1 running turns back" in (tmp_path / "worker-0.log").read_text()

    trace.refresh_from_db()
    assert (trace.status, trace.worker, trace.attempts) == ("queued", "", 1)
    assert trace.meta["resume"]["reason"] == "handoff"
    assert trace.meta["resume"]["from_worker"] == f"{worker.node} pid {worker.pid}"
    assert not trace.steps.filter(kind="error").exists()
    assert not trace.steps.filter(error__icontains="cancel").exists()
    recorded = trace.steps.count()

    # Its task was sent again: the next worker takes the turn over at once.
    following = start_worker()
    wait_for(lambda: Trace.objects.filter(pk=trace.pk, worker__startswith=following.node).exists(),
             timeout=20)
    assert Trace.objects.get(pk=trace.pk).attempts == 2
    assert trace.steps.count() >= recorded
    # and finishes it from where the first one stopped: each call recorded once
    wait_for(lambda: Trace.objects.get(pk=trace.pk).status == "completed", timeout=60, interval=0.2)
    trace.refresh_from_db()
    assert trace.answer == "Called current_time 30 times."
    tools = list(trace.steps.filter(kind="tool_call").values_list("call_id", flat=True))
    assert len(tools) == len(set(tools)) == 30
    assert trace.steps.get(kind="resume").meta["reason"] == "handoff"
