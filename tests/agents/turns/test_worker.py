"""Turns through a real Celery worker in a subprocess, on the test database and a Redis no other
worker listens on: queued turns run in order; a worker killed mid-turn leaves no trace running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from urllib.parse import quote

import pytest
import redis
from django.db import connection

from agents.chat.services import conversation_create
from agents.turns.reaper import trace_reap
from agents.turns.services import turn_start
from agents.turns.tasks import turn_run
from tests.agents.conftest import wait_for
from tests.conftest import ROOT
from traces.models import Step, Trace

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_database_url() -> str:
    """The URL of the database these tests use, for a worker in another process."""
    settings = connection.settings_dict
    if settings["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{settings['NAME']}"
    user = quote(settings["USER"] or "")
    password = f":{quote(settings['PASSWORD'])}" if settings["PASSWORD"] else ""
    return f"postgres://{user}{password}@{settings['HOST'] or 'localhost'}:{settings['PORT'] or 5432}/{settings['NAME']}"


test_database_url.__test__ = False  # a helper, not a test


@pytest.fixture(scope="session")
def workers_redis(tmp_path_factory):
    """A Redis for these workers only (no other test worker consumes its queues), kept for
    the session."""
    from tests.conftest import EXTERNAL_REDIS_URL

    if EXTERNAL_REDIS_URL:
        base, _, db = EXTERNAL_REDIS_URL.rpartition("/")
        yield f"{base}/{(int(db or 0) + 2) % 16}"
        return
    from agentsite.devrunner import EmbeddedRedis, Printer, free_port

    server = EmbeddedRedis(port=free_port(), data_dir=tmp_path_factory.mktemp("workers-redis"))
    with open(tmp_path_factory.mktemp("workers-redis-log") / "redis.log", "w") as log:
        server.start(Printer(log, color=False))
        try:
            server.wait_ready()
            yield server.url
        finally:
            server.stop(timeout=5)


@pytest.fixture
def start_worker(workers_redis, settings, tmp_path, transactional_db):
    """``start_worker()`` starts a worker (thread pool) on this test's database and Redis, with
    a heartbeat every half second; returns its process. All are stopped at the end."""
    from tests.conftest import point_at_redis

    point_at_redis(settings, workers_redis)
    redis.Redis.from_url(workers_redis).flushdb()
    processes: list[subprocess.Popen] = []

    def start() -> subprocess.Popen:
        name = f"turns-{uuid.uuid4().hex[:8]}@localhost"
        log = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115 - closed with the process
        env = {**os.environ, "REDIS_URL": workers_redis, "DATABASE_URL": test_database_url(),
               "AGENTSITE_VAR_DIR": str(tmp_path / "var"), "TURN_HEARTBEAT_S": "0.5"}
        process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "agentsite", "worker", "-Q", "turns,maintenance",
             "-P", "threads", "-c", "8", "-n", name, "--without-gossip", "--without-mingle",
             "--loglevel", "INFO"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        process.log = log
        processes.append(process)
        # Ready when it says so.
        path = tmp_path / f"{name}.log"
        deadline = time.monotonic() + 30
        while " ready." not in path.read_text():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(path.read_text()[-3000:])
            time.sleep(0.1)
        return process

    yield start
    for process in processes:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        process.log.close()


def test_a_real_worker_runs_queued_turns_one_after_the_other(conversation, alice, start_worker):
    start_worker()
    first = turn_start(conversation=conversation, user=alice, text="What is 2 + 3?")
    second = turn_start(conversation=conversation, user=alice, text="call the current_time tool 2 times")

    wait_for(lambda: Trace.objects.filter(pk=second.pk, status="completed").exists(), timeout=20)

    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.status, first.answer) == ("completed", "2 + 3 = 5.")
    assert second.answer == "Called current_time 2 times." and second.step_count == 5
    assert second.started_at >= first.finished_at
    assert first.worker.startswith("turns-") and first.attempts == 1


def test_a_worker_killed_mid_turn_leaves_the_trace_interrupted_and_the_chat_usable(
        make_agent, alice, start_worker):
    agent = make_agent(name="Slow worker", max_tool_iterations=40,
                       provider_options={"request_latency_s": 0.3})
    conversation = conversation_create(team=agent.team, agent=agent, user=alice)
    worker = start_worker()
    trace = turn_start(conversation=conversation, user=alice, text="call the current_time tool 30 times")
    wait_for(lambda: Step.objects.filter(trace=trace).count() >= 3, timeout=20)

    os.killpg(worker.pid, signal.SIGKILL)
    killed = time.monotonic()
    worker.wait(timeout=5)
    assert Trace.objects.get(pk=trace.pk).status == "running"

    # the heartbeat goes stale; the reaper (what beat runs every 15 s) then settles the trace
    wait_for(lambda: trace.pk in trace_reap(stale_after_s=2).interrupted, timeout=30, interval=0.5)
    assert time.monotonic() - killed < 60

    trace.refresh_from_db()
    assert trace.status == "interrupted" and "worker running this turn stopped" in trace.error
    assert not trace.steps.filter(status__in=["running", "waiting"]).exists()

    # the conversation goes on: the next message gets a turn that completes
    agent.provider.options = {}
    agent.provider.save()
    following = turn_start(conversation=conversation, user=alice, text="What is 6 * 7?")
    assert turn_run(following.pk) == "completed"
    assert Trace.objects.get(pk=following.pk).answer == "6 × 7 = 42."
