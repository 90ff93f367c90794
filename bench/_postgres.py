"""A throwaway PostgreSQL database for a benchmark, on the machine's server (127.0.0.1:5432,
user postgres, trust auth): owned by a throwaway role whose ``CONNECTION LIMIT`` keeps the
benchmark from taking the shared server's connections (a connection refused there is the
product's error), both dropped at the end, failure or not; and ``ConnectionWatch``, the most
connections that role held at once.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator

import psycopg

PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


@contextlib.contextmanager
def postgres_database(admin_url: str, connections: int) -> Iterator[tuple[str, str]]:
    """A throwaway database owned by a throwaway role limited to ``connections`` connections;
    yields (its URL, the role). Both are dropped afterwards, failure or not."""
    name = f"agentsite_bench_{os.getpid()}_{int(time.time())}"
    host = admin_url.split("@", 1)[1].rsplit("/", 1)[0]
    created = False
    try:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE ROLE "{name}" LOGIN CONNECTION LIMIT {int(connections)}')
            created = True
            conn.execute(f'CREATE DATABASE "{name}" OWNER "{name}"')
        print(f"PostgreSQL: database {name} on {host}, its role limited to {connections} connections",
              flush=True)
        yield f"postgres://{name}@{host}/{name}", name
    finally:
        if created:
            with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                conn.execute(f'DROP ROLE IF EXISTS "{name}"')
            print(f"PostgreSQL: database {name} and its role dropped", flush=True)


class ConnectionWatch:
    """The most connections the benchmark's role held at once (polled every 0.25 s)."""

    def __init__(self, admin_url: str, role: str) -> None:
        self.admin_url, self.role = admin_url, role
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True, name="pg-watch")

    def __enter__(self) -> ConnectionWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _poll(self) -> None:
        with contextlib.suppress(Exception), psycopg.connect(self.admin_url, autocommit=True,
                                                             connect_timeout=5) as conn:
            while not self._stop.wait(0.25):
                row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE usename = %s",
                                   (self.role,)).fetchone()
                self.peak = max(self.peak, row[0] if row else 0)
