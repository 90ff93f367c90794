"""A burst of requests against the whole product (``agentsite.stack.Stack``: daphne, a Celery
worker, beat, Redis): 200 completions at once are all answered, none with "database is locked"
on SQLite, and on PostgreSQL the site never holds more connections than its processes' pools
allow (``DATABASE_POOL_MAX`` each), whatever its threads."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from agentsite.stack import Stack

pytestmark = [pytest.mark.worker, pytest.mark.own_stack]

BURST = 200
POOL_MAX = 4
PROCESSES = 3  # web, worker, beat
PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def postgres_answers() -> bool:
    try:
        socket.create_connection(("127.0.0.1", 5432), timeout=2).close()
    except OSError:
        return False
    return True


@contextlib.contextmanager
def throwaway_database() -> Iterator[str]:
    """A database of its own on the machine's PostgreSQL, dropped afterwards."""
    import psycopg

    name = f"agentsite_burst_{os.getpid()}_{int(time.time())}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class ConnectionPeak:
    """The most connections to database ``name`` at once, sampled every 50 ms."""

    def __init__(self, name: str) -> None:
        self.name, self.peak = name, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> ConnectionPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _sample(self) -> None:
        import psycopg

        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            while not self._stop.wait(0.05):
                row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s",
                                   (self.name,)).fetchone()
                self.peak = max(self.peak, row[0])


async def burst(url: str, key: str, model: str) -> Counter[str]:
    """``BURST`` completions sent at once; what each ended as ("ok", or why not)."""
    limits = httpx.Limits(max_connections=BURST, max_keepalive_connections=BURST)
    async with httpx.AsyncClient(base_url=url, timeout=240, limits=limits) as client:
        async def one(n: int) -> str:
            try:
                answer = await client.post("/v1/chat/completions", json={
                    "model": model, "messages": [{"role": "user", "content": f"Hello {n}"}]},
                    headers={"Authorization": f"Bearer {key}"})
            except httpx.HTTPError as exc:
                return f"{type(exc).__name__}"
            if answer.status_code != 200:
                return f"HTTP {answer.status_code}: {answer.text[:200]}"
            return "ok" if answer.json()["choices"][0]["message"]["content"] else "empty answer"

        return Counter(await asyncio.gather(*(one(n) for n in range(BURST))))


def run_burst(database_url: str | None) -> tuple[Counter[str], str]:
    env = {"DATABASE_POOL_MAX": str(POOL_MAX), "LOG_LEVEL": "ERROR"}
    with Stack(worker_threads=50, debug=False, database_url=database_url, extra_env=env) as stack:
        ids = stack.seed({"agents": [{"name": "Burst", "tools": [], "provider_options": {}}],
                          "api_keys": [{"name": "burst", "user": "alice", "scopes": ["chat"]}]})
        outcomes = asyncio.run(burst(stack.url, ids["keys"]["burst"], ids["slugs"]["Burst"]))
        return outcomes, stack.log_tail(20000)


def test_a_burst_on_sqlite_is_answered_whole_and_never_told_the_database_is_locked():
    outcomes, log = run_burst(None)
    assert outcomes == Counter({"ok": BURST}), outcomes
    assert "database is locked" not in log


@pytest.mark.skipif(not postgres_answers(), reason="PostgreSQL does not answer on 127.0.0.1:5432")
def test_a_burst_on_postgresql_stays_within_the_pools_connections():
    with throwaway_database() as name, ConnectionPeak(name) as connections:
        outcomes, log = run_burst(f"postgres://postgres@127.0.0.1:5432/{name}")
    assert outcomes == Counter({"ok": BURST}), outcomes
    assert "too many clients" not in log
    assert 0 < connections.peak <= PROCESSES * POOL_MAX, connections.peak
