"""The reaper: no trace stays ``running`` after its worker died (found by the worker's silent
beat within seconds, or by the trace's stale heartbeat), and no queued trace waits for a task
that was never sent."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.models import Message, TurnWorker
from agents.turns.lifecycle import TurnOutcome, trace_claim, trace_close, trace_hand_back
from agents.turns.reaper import INTERRUPTED_MESSAGE, Silence, trace_reap
from agents.turns.services import turn_start
from agents.turns.tasks import reap, turn_run
from tests.members import member_of
from traces.models import Step, Trace
from traces.record.services import TraceNotOwned, step_record

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def start(conversation, alice, sent_turns):
    def go(text: str = "What is 2 + 2?") -> Trace:
        return turn_start(conversation=conversation, membership=member_of(alice, conversation), text=text)

    return go


def stale(trace: Trace, *, seconds: int = 120) -> None:
    Trace.objects.filter(pk=trace.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=seconds))


def a_worker(name: str, *, silent_s: float = 0.0) -> TurnWorker:
    """A worker process's row whose last beat was ``silent_s`` seconds ago."""
    return TurnWorker.objects.create(name=name, pid=1, beat_at=timezone.now() - timedelta(seconds=silent_s))


def a_step(trace: Trace, attempt: int = 1, seq: int = 1, status: str = "running") -> Step:
    return step_record(trace_id=trace.pk, attempt=attempt, seq=seq,
                       values={"kind": "llm_request", "status": status, "name": "demo"})


def test_a_trace_whose_worker_died_more_often_than_it_may_resume_ends_interrupted(
        start, conversation, sent_turns, settings):
    trace = start()
    waiting = start("Second question")
    claimed = trace_claim(trace_id=trace.pk, worker="dead@host")
    attempts = settings.TURN_MAX_RESUMES + 1
    Trace.objects.filter(pk=trace.pk).update(attempts=attempts)
    a_step(claimed, attempt=attempts)
    Message.objects.create(conversation=conversation, role="assistant", trace=trace, blocks=[
        {"type": "tool_use", "id": "call_1", "name": "calculator", "input": {"expression": "2+2"}}])
    stale(trace)

    report = trace_reap()

    assert report.interrupted == [trace.pk]
    trace.refresh_from_db()
    assert (trace.status, trace.error, trace.error_kind) == ("interrupted", INTERRUPTED_MESSAGE, "worker_lost")
    assert trace.finished_at and trace.step_count == 1
    step = trace.steps.get()
    assert (step.status, step.success) == ("error", False) and "Interrupted" in step.error
    # the tool call left open got a result, so the next turn's history is valid
    result = Message.objects.get(trace=trace, role="tool").blocks
    assert result[0]["tool_use_id"] == "call_1" and result[0]["is_error"] is True
    assert sent_turns == [trace.pk, waiting.pk]

    # the late worker can neither write a step nor overwrite the end
    with pytest.raises(TraceNotOwned):
        a_step(claimed, attempt=attempts, seq=2)
    assert trace_close(trace_id=trace.pk, attempt=attempts,
                       outcome=TurnOutcome(status="completed")) is None
    assert Trace.objects.get(pk=trace.pk).status == "interrupted"

    assert turn_run(waiting.pk) == "completed"  # and the conversation goes on


def test_a_trace_whose_worker_stopped_beating_is_handed_back_at_the_next_reap(start, sent_turns, settings):
    trace = start()
    trace_claim(trace_id=trace.pk, worker="w1@host pid 7")
    silent = settings.TURN_WORKER_DEAD_AFTER_S + 0.5
    worker = a_worker("w1@host pid 7", silent_s=silent)
    # its turn's own heartbeat is recent: the worker's silence alone is enough
    Trace.objects.filter(pk=trace.pk).update(heartbeat_at=worker.beat_at)

    report = trace_reap()

    assert report.requeued == [trace.pk]
    trace.refresh_from_db()
    assert (trace.status, trace.worker) == ("queued", "")
    resume = trace.meta["resume"]
    assert (resume["reason"], resume["from_worker"]) == ("worker_lost", "w1@host pid 7")
    assert resume["last_seen"] == worker.beat_at.isoformat()  # the worker's last beat
    assert sent_turns == [trace.pk, trace.pk]


def test_a_live_workers_trace_is_left_alone_though_its_heartbeat_is_old(start, settings):
    trace = start()
    trace_claim(trace_id=trace.pk, worker="w1@host pid 7")
    a_worker("w1@host pid 7", silent_s=settings.TURN_WORKER_BEAT_S)
    stale(trace, seconds=int(settings.TURN_STALE_AFTER_S) - 5)  # old, but below the limit

    assert not trace_reap()
    assert Trace.objects.get(pk=trace.pk).status == "running"


def test_a_live_worker_whose_turn_hangs_past_the_stale_limit_gets_it_taken_back(start, settings):
    trace = start()
    trace_claim(trace_id=trace.pk, worker="w1@host pid 7")
    a_worker("w1@host pid 7")
    stale(trace, seconds=int(settings.TURN_STALE_AFTER_S) + 1)

    assert trace_reap().requeued == [trace.pk]
    assert Trace.objects.get(pk=trace.pk).meta["resume"]["from_worker"] == "w1@host pid 7"


def test_a_worker_without_a_row_is_judged_by_its_turns_heartbeats(start, settings):
    """An older release's worker, mid-upgrade, writes no row: its turns are not taken from it
    while their heartbeats come, and are once about two are missed."""
    trace = start()
    trace_claim(trace_id=trace.pk, worker="alive@host")
    stale(trace, seconds=5)
    assert not trace_reap()
    assert Trace.objects.get(pk=trace.pk).status == "running"

    stale(trace, seconds=int(settings.TURN_WORKER_DEAD_AFTER_S + settings.TURN_HEARTBEAT_S) + 1)
    assert trace_reap().requeued == [trace.pk]


def test_a_worker_that_beats_again_before_the_hand_back_keeps_its_trace(start, settings):
    trace = start()
    claimed = trace_claim(trace_id=trace.pk, worker="w1@host pid 7")
    worker = a_worker("w1@host pid 7", silent_s=settings.TURN_WORKER_DEAD_AFTER_S + 1)
    silence = Silence.at(timezone.now())  # what the reaper saw
    assert Trace.objects.filter(pk=trace.pk).filter(silence.lost()).exists()

    TurnWorker.objects.filter(pk=worker.pk).update(beat_at=timezone.now())  # a late beat
    assert not trace_hand_back(trace_id=trace.pk, attempt=claimed.attempts, reason="worker_lost",
                               only=silence.lost())
    assert Trace.objects.get(pk=trace.pk).status == "running"


def test_a_reap_with_nothing_to_settle_is_one_query_and_one_for_the_queued(
        start, django_assert_num_queries):
    trace = start()
    trace_claim(trace_id=trace.pk, worker="w1@host pid 7")
    a_worker("w1@host pid 7")
    a_worker("w2@host pid 8", silent_s=3600)  # dead long ago, nothing of it runs
    with django_assert_num_queries(2):  # the running traces; the queued ones nobody sent
        assert not trace_reap()


def test_a_trace_whose_worker_died_is_handed_back_and_resumed(start, sent_turns):
    trace = start()
    trace_claim(trace_id=trace.pk, worker="dead@host")
    stale(trace)

    report = trace_reap()

    assert report.requeued == [trace.pk]
    trace.refresh_from_db()
    assert (trace.status, trace.attempts, trace.worker) == ("queued", 1, "")
    assert trace.meta["resume"]["reason"] == "worker_lost"
    assert trace.meta["resume"]["from_worker"] == "dead@host"
    assert sent_turns == [trace.pk, trace.pk]
    assert turn_run(trace.pk) == "completed"
    assert Trace.objects.get(pk=trace.pk).attempts == 2


def test_a_trace_resumed_as_often_as_it_may_be_is_not_resumed_again(start, settings):
    trace = start()
    trace_claim(trace_id=trace.pk, worker="dead@host")
    Trace.objects.filter(pk=trace.pk).update(attempts=settings.TURN_MAX_RESUMES + 1)
    stale(trace)

    assert trace_reap().interrupted == [trace.pk]
    assert Trace.objects.get(pk=trace.pk).status == "interrupted"


def test_a_trace_running_past_its_hard_limit_ends_timed_out(start, conversation):
    trace = start()
    trace_claim(trace_id=trace.pk, worker="stuck@host")
    hard = conversation.agent.hard_time_limit_s
    Trace.objects.filter(pk=trace.pk).update(started_at=timezone.now() - timedelta(seconds=hard + 1))

    assert trace_reap().timed_out == [trace.pk]

    trace.refresh_from_db()
    assert (trace.status, trace.error_kind) == ("timed_out", "hard_time_limit")
    assert f"hard time limit of {hard} seconds" in trace.error


def test_a_queued_trace_nobody_sent_is_sent(start, sent_turns):
    first = start()
    second = start("Second question")
    # the first turn's worker died after closing it but before sending the next one
    Trace.objects.filter(pk=first.pk).update(status="failed")

    assert trace_reap().dispatched == [second.pk]
    assert sent_turns == [first.pk, second.pk]
    assert not trace_reap()  # sent recently: not again


def test_a_queued_trace_sent_long_ago_is_sent_again(start, sent_turns):
    trace = start()
    Trace.objects.filter(pk=trace.pk).update(enqueued_at=timezone.now() - timedelta(minutes=10))
    assert trace_reap().dispatched == [trace.pk]


def test_the_periodic_task_runs_the_reaper(start):
    trace = start()
    trace_claim(trace_id=trace.pk, worker="dead@host")
    a_step(trace)
    stale(trace)
    assert reap() == {"interrupted": [], "timed_out": [], "requeued": [trace.pk], "dispatched": []}


def test_beat_runs_the_reaper_every_15_seconds_on_the_maintenance_queue(settings):
    from agentsite.celery import app

    entry = settings.CELERY_BEAT_SCHEDULE["turns-reap"]
    assert (entry["task"], entry["schedule"]) == ("agents.turns.tasks.reap", 15.0)
    assert app.amqp.router.route({}, "agents.turns.tasks.reap")["queue"].name == "maintenance"
    # a dead worker is silent for dead-after, then found at the latest one interval later:
    # inside the promised 10 s with a beat to spare
    assert (settings.TURN_WORKER_DEAD_AFTER_S + settings.TURN_REAPER_INTERVAL_S
            + settings.TURN_WORKER_BEAT_S) <= 10


@pytest.mark.django_db(transaction=True)
def test_tasks_queued_under_their_earlier_names_still_run(conversation, alice, sent_turns):
    """A queue filled before an upgrade holds tasks named as they were then."""
    from agentsite.celery import app

    app.loader.import_default_modules()
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="What is 2+2?")
    assert app.tasks["agents.tasks.run_turn"](trace.pk) == "completed"
    assert app.tasks["traces.tasks.reap"]() == {"interrupted": [], "timed_out": [], "requeued": [],
                                                "dispatched": []}
    assert app.amqp.router.route({}, "traces.tasks.reap")["queue"].name == "maintenance"


def test_hand_backs_that_were_not_the_turns_doing_do_not_use_up_its_resumptions(start, settings):
    """A worker shutting down (SIGTERM) or a dropped database connection hands the turn back
    without counting against ``TURN_MAX_RESUMES``: a turn that lived through two of them and a
    lost worker on every allowed attempt is still resumed, until ``TURN_MAX_ATTEMPTS``."""
    trace = start()
    trace_claim(trace_id=trace.pk, worker="w1@host")
    assert trace_hand_back(trace_id=trace.pk, attempt=1, reason="handoff")
    trace_claim(trace_id=trace.pk, worker="w2@host")
    assert trace_hand_back(trace_id=trace.pk, attempt=2, reason="database connection lost")
    trace.refresh_from_db()
    assert trace.meta["excused_resumes"] == 2
    attempts = settings.TURN_MAX_RESUMES + 2  # the two above, and TURN_MAX_RESUMES lost workers
    Trace.objects.filter(pk=trace.pk).update(status="running", attempts=attempts, worker="dead@host")
    stale(trace)

    assert trace_reap().requeued == [trace.pk]

    # one more lost worker than allowed: it ends
    Trace.objects.filter(pk=trace.pk).update(status="running", attempts=attempts + 1, worker="dead@host")
    stale(trace)
    assert trace_reap().interrupted == [trace.pk]


def test_a_turn_handed_back_for_ever_ends_at_the_attempts_cap(start, settings):
    settings.TURN_MAX_ATTEMPTS = 6
    trace = start()
    for attempt in range(1, 6):
        trace_claim(trace_id=trace.pk, worker="w@host")
        assert trace_hand_back(trace_id=trace.pk, attempt=attempt, reason="database connection lost")
    trace_claim(trace_id=trace.pk, worker="dead@host")
    stale(trace)

    assert trace_reap().interrupted == [trace.pk]
