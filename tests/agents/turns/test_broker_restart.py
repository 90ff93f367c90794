"""A real Celery worker through Redis restarts: Redis killed while the worker holds a running
turn's unacknowledged task, and started again empty. The worker stays up and tries Redis again
every second, the running turn ends, a message sent while Redis was down starts within seconds
of its return, and the next turn runs."""

from __future__ import annotations

import re
import time
import uuid

import pytest

from agents.chat.services import conversation_create
from agents.turns.reaper import trace_reap
from agents.turns.services import turn_start
from tests.helpers import database_url, wait_for, worker_start, worker_stop
from tests.members import member_of
from traces.models import Step, Trace

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

RESTARTS = 2
# The workers' reaper runs this often (TURN_REAPER_INTERVAL_S); here the test runs it.
REAP_EVERY_S = 2.0


@pytest.fixture
def worker(broker, tmp_path, transactional_db):
    """A worker (eight threads) on this test's database and ``broker``'s Redis."""
    from django.db import connection

    broker.start()
    process = worker_start(
        redis_url=broker.url, log_path=tmp_path / "worker.log", threads=8,
        name=f"turns-{uuid.uuid4().hex[:8]}@localhost",
        env={"DATABASE_URL": database_url(connection.settings_dict),
             "AGENTSITE_VAR_DIR": str(tmp_path / "var"), "TURN_HEARTBEAT_S": "0.5"})
    process.log_path = tmp_path / "worker.log"
    yield process
    worker_stop(process)


def reap_until(predicate, *, timeout: float, what: str) -> float:
    """Run the reaper every REAP_EVERY_S, as the workers do, until ``predicate`` holds; the
    seconds that took."""
    began = last_reap = time.monotonic()
    while not predicate():
        if time.monotonic() - began > timeout:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        if time.monotonic() - last_reap >= REAP_EVERY_S:
            last_reap = time.monotonic()
            trace_reap()
        time.sleep(0.1)
    return time.monotonic() - began


def test_a_worker_survives_redis_restarts_with_a_turn_in_flight(make_agent, alice, broker, worker):
    slow = make_agent(name="Slow", max_tool_iterations=20, provider_options={"request_latency_s": 0.3})
    quick = make_agent(name="Quick")

    def chat(agent, text: str) -> Trace:
        return turn_start(conversation=conversation_create(agent=agent, membership=member_of(alice, agent.team)),
                          membership=member_of(alice, agent.team), text=text)

    for _ in range(RESTARTS):
        running = chat(slow, "call the current_time tool 6 times")
        wait_for(lambda t=running: Step.objects.filter(trace=t).count() >= 2, timeout=20,
                 what="the slow turn to be under way")
        assert broker.client().hlen("unacked") >= 1  # the worker holds its task, unacknowledged

        broker.kill()
        time.sleep(0.5)
        assert worker.poll() is None
        waiting = chat(quick, "What is 6 * 7?")  # sent while Redis is down: kept, not yet sent
        assert Trace.objects.get(pk=waiting.pk).enqueued_at is None
        time.sleep(1)
        broker.start()

        # (how soon: `make chaos`, "start s after Redis is back")
        reap_until(lambda t=waiting: Trace.objects.filter(pk=t.pk, started_at__isnull=False).exists(),
                   timeout=15, what="the message sent while Redis was down to start")
        wait_for(lambda ids=(running.pk, waiting.pk): Trace.objects.filter(pk__in=ids, status="completed").count() == 2,
                 timeout=30, what="both turns to complete")
        assert Trace.objects.get(pk=waiting.pk).answer == "6 × 7 = 42."
        assert worker.poll() is None

    following = chat(quick, "What is 2 + 3?")
    wait_for(lambda: Trace.objects.filter(pk=following.pk, status="completed").exists(), timeout=15,
             what="the next turn to complete")
    assert worker.poll() is None
    log = worker.log_path.read_text()
    assert "Unrecoverable error" not in log
    # it tried the broker again every second at most (Celery's own back-off: 2, 4, 6 ... 30 s)
    waits = [float(s) for s in re.findall(r"Trying again in ([\d.]+) seconds?", log)]
    assert waits and max(waits) <= 1.0
