"""Plain helpers shared by every test session: the unit suite (through ``tests/conftest.py``)
and the browser tests (``tests/e2e``, a session of its own that sees no unit-test fixtures).

Waiting for a condition, listening on the channel layer, and starting a real Celery worker.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent

T = TypeVar("T")

def wait_for(predicate: Callable[[], T], *, timeout: float = 10.0, interval: float = 0.02,
             what: str = "a condition") -> T:
    """Poll ``predicate`` until it returns something truthy and return that; fail after
    ``timeout`` seconds naming ``what`` was awaited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


# -- the channel layer ------------------------------------------------------------------------------
def listen(group: str) -> str:
    """Join ``group`` with a test channel of its own; returns the channel's name."""
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    channel = f"test-{group}"
    async_to_sync(get_channel_layer().group_add)(group, channel)
    return channel


async def receive_all(channel: str, *, quiet: float = 0.05) -> list[dict]:
    """The payloads waiting on ``channel``, until it stays quiet for ``quiet`` seconds."""
    from channels.layers import get_channel_layer

    layer, found = get_channel_layer(), []
    while True:
        try:
            message = await asyncio.wait_for(layer.receive(channel), quiet)
        except TimeoutError:
            return found
        found.append(message["payload"])


def drain(channel: str, *, quiet: float = 0.05) -> list[dict]:
    """``receive_all`` from synchronous code."""
    from asgiref.sync import async_to_sync

    return async_to_sync(receive_all)(channel, quiet=quiet)


# -- websockets --------------------------------------------------------------------------------------
def session_cookie(user) -> str:
    """The session cookie of ``user`` logged in, for a websocket."""
    from django.db import connection
    from django.test import Client

    client = Client()
    client.force_login(user)
    # This runs on a helper thread of the async test: its connection would outlive the test
    # and keep PostgreSQL from dropping the test database.
    connection.close()
    return f"sessionid={client.cookies['sessionid'].value}"


def communicator(path: str, *, cookie: str | None = None, origin: str | None = "http://localhost:8000") -> Any:
    """A ``WebsocketCommunicator`` to ``path`` through the whole ASGI application."""
    from channels.testing import WebsocketCommunicator

    from agentsite.asgi import application

    headers = []
    if origin:
        headers.append((b"origin", origin.encode()))
    if cookie:
        headers.append((b"cookie", cookie.encode()))
    headers.append((b"host", b"localhost:8000"))
    return WebsocketCommunicator(application, path, headers=headers)


async def announce_delta(trace, *, text: str) -> None:
    """A model's text delta as a running turn announces it (``TraceRecorder.announce_delta``)."""
    from agents.chat.live import groups_for
    from traces.record import live

    payload = live.delta_payload(trace_uuid=trace.uuid, seq=trace.event_seq, step=3, index=0, text=text)
    await live.publish(groups_for(trace), payload)


# -- a real Celery worker ---------------------------------------------------------------------------
def worker_start(*, redis_url: str, log_path: Path, name: str | None = None, threads: int = 4,
                 env: dict[str, str] | None = None, timeout: float = 30.0) -> subprocess.Popen:
    """A Celery worker (thread pool) in a subprocess and a session of its own, consuming both
    queues of ``redis_url``; returns once it logs that it is ready. Its node name is
    ``process.node``; stop it with ``worker_stop``."""
    name = name or f"test-{uuid.uuid4().hex[:8]}@localhost"
    log = open(log_path, "w")  # noqa: SIM115 - closed by worker_stop
    process = subprocess.Popen(  # noqa: S603
        [sys.executable, "-m", "celery", "-A", "agentsite", "worker", "-Q", "turns,maintenance",
         "-P", "threads", "-c", str(threads), "-n", name, "--without-gossip", "--without-mingle",
         "--loglevel", "INFO"],
        cwd=ROOT, env={**os.environ, "REDIS_URL": redis_url, **(env or {})},
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    process.log = log
    process.node = name
    deadline = time.monotonic() + timeout
    while " ready." not in log_path.read_text():
        if process.poll() is not None or time.monotonic() > deadline:
            state = "exited early" if process.returncode is not None else f"was not ready within {timeout:g} s"
            worker_stop(process)
            raise RuntimeError(f"celery worker {state}:\n{log_path.read_text()[-3000:]}")
        time.sleep(0.1)
    return process


def worker_stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
    process.log.close()


def database_url(settings_dict: dict[str, Any]) -> str:
    """The URL of the database of ``settings_dict`` (a connection's), for another process."""
    from urllib.parse import quote

    if settings_dict["ENGINE"].endswith(".sqlite3"):
        return f"sqlite:///{settings_dict['NAME']}"
    user = quote(settings_dict["USER"] or "")
    password = f":{quote(settings_dict['PASSWORD'])}" if settings_dict["PASSWORD"] else ""
    host, port = settings_dict["HOST"] or "localhost", settings_dict["PORT"] or 5432
    return f"postgres://{user}{password}@{host}:{port}/{settings_dict['NAME']}"


class FakeResolver:
    """A fake DNS (the network's edge): names to addresses, recording every lookup. A name maps
    to its addresses, or to a list of successive answers (the last one repeats), as a
    rebinding name gives them."""

    def __init__(self, table: dict[str, list[str] | list[list[str]]]) -> None:
        self.table = {host: ([answers] if answers and isinstance(answers[0], str) else answers)
                      for host, answers in table.items()}
        self.calls: list[str] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        if host not in self.table:
            raise OSError(f"no such host: {host}")
        answers = self.table[host]
        return list(answers[min(self.calls.count(host), len(answers)) - 1])


# -- work counted ------------------------------------------------------------------------------------
@dataclass
class Work:
    """SQL statements (transaction control left out) and Redis round trips counted by
    ``work_counted``, from every thread of the process; ``sql`` keeps the statements."""

    sql: list[str] = field(default_factory=list)
    redis: int = 0

    @property
    def queries(self) -> int:
        return len(self.sql)


@contextmanager
def work_counted(*, ignore_threads: tuple[str, ...] = ()) -> Iterator[Work]:
    """Count the database statements and Redis round trips of everything this process does in
    the block (a turn's thread and its database thread included): what the unit suite's budgets
    assert, as counts that hold on any machine. A Redis pipeline is one round trip. Threads
    whose name starts with one of ``ignore_threads`` are not counted."""
    import redis.asyncio.connection as async_connection
    import redis.connection as sync_connection
    from django.db.backends import utils

    work = Work()
    lock = threading.Lock()
    control = ("BEGIN", "SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK", "COMMIT")
    original_execute = utils.CursorWrapper._execute
    original_many = utils.CursorWrapper._executemany
    sync_send = sync_connection.AbstractConnection.send_packed_command
    async_send = async_connection.AbstractConnection.send_packed_command

    def execute(self, sql, params, *args):
        if counted() and not str(sql).lstrip().upper().startswith(control):
            with lock:
                work.sql.append(str(sql))
        return original_execute(self, sql, params, *args)

    def executemany(self, sql, param_list, *args):
        with lock:
            work.sql.append(str(sql))
        return original_many(self, sql, param_list, *args)

    def counted() -> bool:
        return not threading.current_thread().name.startswith(ignore_threads or ("\0",))

    def count_sync(self, *args, **kwargs):
        if counted():
            with lock:
                work.redis += 1
        return sync_send(self, *args, **kwargs)

    async def count_async(self, *args, **kwargs):
        if counted():
            with lock:
                work.redis += 1
        return await async_send(self, *args, **kwargs)

    utils.CursorWrapper._execute = execute
    utils.CursorWrapper._executemany = executemany
    sync_connection.AbstractConnection.send_packed_command = count_sync
    async_connection.AbstractConnection.send_packed_command = count_async
    try:
        yield work
    finally:
        utils.CursorWrapper._execute = original_execute
        utils.CursorWrapper._executemany = original_many
        sync_connection.AbstractConnection.send_packed_command = sync_send
        async_connection.AbstractConnection.send_packed_command = async_send
