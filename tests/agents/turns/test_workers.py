"""Worker processes say they are alive, and each runs the reaper: a process that dies has its
running turns picked up by another within seconds (the issue's target: detection at most 10 s,
median at most 5 s)."""

from __future__ import annotations

import os
import signal
import statistics
import time
from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from agents.chat.services import conversation_create
from agents.models import TurnWorker
from agents.turns.lifecycle import trace_claim
from agents.turns.services import turn_start
from agents.turns.workers import (
    FORGET_AFTER_S,
    TurnWorkerLife,
    turn_worker_beat,
    turn_worker_next_death,
    turn_workers_forget,
    worker_name,
)
from tests.helpers import wait_for
from tests.members import member_of
from traces.models import Step, Trace

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def life(settings):
    """``life(name)``: this test process's beat and reaper threads, fast, stopped at the end."""
    settings.TURN_WORKER_BEAT_S = 0.1
    settings.TURN_REAPER_INTERVAL_S = 0.2
    settings.TURN_WORKER_DEAD_AFTER_S = 1.0
    started: list[TurnWorkerLife] = []

    def start(name: str) -> TurnWorkerLife:
        process = TurnWorkerLife(name)
        process.start()
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


def test_the_name_is_the_celery_node_and_the_pid():
    assert worker_name("turns-1@host") == f"turns-1@host pid {os.getpid()}"


def test_a_worker_process_beats_while_it_runs_and_takes_its_row_when_it_stops(life):
    process = life("w@host pid 1")
    first = TurnWorker.objects.get(name="w@host pid 1").beat_at
    wait_for(lambda: TurnWorker.objects.get(name="w@host pid 1").beat_at > first, timeout=5,
             what="a second beat")
    assert TurnWorker.objects.get(name="w@host pid 1").pid == os.getpid()

    process.stop()
    assert not TurnWorker.objects.filter(name="w@host pid 1").exists()


def test_its_reaper_hands_back_the_turns_of_a_worker_that_stopped_beating(life, start_turn):
    trace = start_turn()
    trace_claim(trace_id=trace.pk, worker="dead@host pid 2")
    TurnWorker.objects.create(name="dead@host pid 2", beat_at=timezone.now())

    life("w@host pid 1")

    # dead after 1 s of silence; found at the latest one reap (0.2 s) later
    wait_for(lambda: Trace.objects.filter(pk=trace.pk, status="queued").exists(), timeout=5,
             what="the hand-back")
    assert TurnWorker.objects.get(name="w@host pid 1").reaped_at is not None


def test_a_process_that_takes_a_dead_ones_name_hands_back_its_turns_at_once(life, start_turn):
    """The same node and pid after a restart (a container's): the claims under that name are
    the dead process's, though the name beats again."""
    trace = start_turn()
    trace_claim(trace_id=trace.pk, worker="w@host pid 1")
    TurnWorker.objects.create(name="w@host pid 1", beat_at=timezone.now() - timedelta(seconds=0.5))

    life("w@host pid 1")

    trace.refresh_from_db()
    assert (trace.status, trace.meta["resume"]["from_worker"]) == ("queued", "w@host pid 1")


def test_a_beat_writes_a_forgotten_row_again():
    turn_worker_beat(name="w@host pid 1")
    TurnWorker.objects.all().delete()
    turn_worker_beat(name="w@host pid 1")
    assert TurnWorker.objects.filter(name="w@host pid 1").exists()


def test_the_reaper_wakes_when_a_late_worker_would_count_as_dead(settings):
    now = timezone.now()
    TurnWorker.objects.create(name="on time", beat_at=now - timedelta(seconds=0.5))
    assert turn_worker_next_death(now=now) is None
    late = TurnWorker.objects.create(name="late", beat_at=now - timedelta(seconds=2))
    TurnWorker.objects.create(name="dead", beat_at=now - timedelta(seconds=60))
    assert turn_worker_next_death(now=now) == late.beat_at + timedelta(
        seconds=settings.TURN_WORKER_DEAD_AFTER_S)


def test_rows_of_workers_silent_for_long_are_forgotten():
    now = timezone.now()
    TurnWorker.objects.create(name="gone", beat_at=now - timedelta(seconds=FORGET_AFTER_S + 1))
    TurnWorker.objects.create(name="dead a minute", beat_at=now - timedelta(seconds=60))
    assert turn_workers_forget(now=now) == 1
    assert list(TurnWorker.objects.values_list("name", flat=True)) == ["dead a minute"]


@pytest.fixture
def start_turn(conversation, alice, sent_turns):
    def go():
        return turn_start(conversation=conversation, membership=member_of(alice, conversation), text="What is 2 + 2?")

    return go


# -- real worker processes ----------------------------------------------------------------------------
def alive_rows(*processes) -> dict[str, TurnWorker]:
    rows = {row.pid: row for row in TurnWorker.objects.all()}
    return {p.node: rows[p.pid] for p in processes if p.pid in rows}


@pytest.mark.worker
def test_a_real_worker_beats_under_the_name_its_claims_record(conversation, alice, start_worker):
    from tests.helpers import worker_stop

    process = start_worker()
    row = wait_for(lambda: alive_rows(process).get(process.node), timeout=10, what="the worker's row")
    assert row.name == f"{process.node} pid {process.pid}"

    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="What is 2 + 3?")
    wait_for(lambda: Trace.objects.filter(pk=trace.pk, status="completed").exists(), timeout=20)
    assert Trace.objects.get(pk=trace.pk).worker == row.name
    wait_for(lambda: TurnWorker.objects.get(pk=row.pk).reaped_at is not None, timeout=10,
             what="a reap of its own")

    worker_stop(process)  # a warm shutdown takes the row with it
    assert not TurnWorker.objects.filter(pk=row.pk).exists()


KILLS = int(os.environ.get("TURN_DETECTION_KILLS", "3"))


@pytest.mark.worker
def test_a_killed_workers_running_turn_is_picked_up_by_another_within_10_s(make_agent, alice,
                                                                          start_worker):
    """SIGKILL the worker running a turn (``KILLS`` times, a fresh victim each time): the other
    worker's reaper hands the turn back and a worker claims it again. Detection: kill to
    hand-back; pick-up: kill to the new claim."""
    agent = make_agent(name="Slow worker", max_tool_iterations=40,
                       provider_options={"request_latency_s": 0.5})
    workers = [start_worker(), start_worker()]
    detections, pickups = [], []
    for _ in range(KILLS):
        wait_for(lambda: len(alive_rows(*workers)) == len(workers), timeout=15, what="both rows")
        conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
        trace = turn_start(conversation=conversation, membership=member_of(alice, conversation),
                           text="call the current_time tool 12 times")
        wait_for(lambda trace=trace: Step.objects.filter(trace=trace).exists(), timeout=20, what="a first step")
        running = Trace.objects.get(pk=trace.pk)
        victim = next(p for p in workers if running.worker == f"{p.node} pid {p.pid}")

        os.killpg(victim.pid, signal.SIGKILL)
        killed = time.time()
        victim.wait(timeout=5)
        workers.remove(victim)

        again = wait_for(lambda trace=trace: Trace.objects.filter(pk=trace.pk, attempts=2, status__in=[
            "running", "completed", "failed", "interrupted"]).first(), timeout=15, interval=0.05,
            what="the turn claimed again")
        picked_up = time.time()
        handed_back = datetime.fromisoformat(again.meta["resume"]["handed_back_at"]).timestamp()
        detections.append(handed_back - killed)
        pickups.append(picked_up - killed)
        assert again.meta["resume"]["from_worker"] == running.worker
        assert again.worker == f"{workers[0].node} pid {workers[0].pid}"
        workers.append(start_worker())

    print(f"\ndetection (kill -> hand-back), {KILLS} kills: median {statistics.median(detections):.2f} s, "
          f"max {max(detections):.2f} s: {[round(d, 2) for d in detections]}")
    print(f"pick-up (kill -> claimed again): median {statistics.median(pickups):.2f} s, "
          f"max {max(pickups):.2f} s")
    assert max(pickups) <= 10
    assert statistics.median(detections) <= 5.5
