"""SQLite with one writer per process: Django's back-end, with write transactions taken in turn.

SQLite lets one connection write at a time. In WAL mode readers never wait, but writers that
meet (a web process's requests and a worker's turns, each thread with its own connection) wait
on the file's lock by polling it in growing sleeps, and once the busy timeout passes the loser
gets "database is locked". Under a burst of hundreds of requests the polling is unfair: some
writers lose every round while others get through.

So writers take their turn: ``BEGIN IMMEDIATE`` (the settings' ``transaction_mode``) waits for
a process-wide lock first, then for an exclusive ``flock`` on a file beside the database that
every process of the site takes, and releases both at ``COMMIT`` or ``ROLLBACK``. A writer that
waits on the file lock is woken by the kernel the moment it is released, where SQLite's own
wait sleeps in growing steps and loses every race to a process that writes back to back (a
worker running hundreds of turns kept the web process's sends waiting 50 ms each). A writer
that waits longer than the busy timeout for its process's turn gets the same
``OperationalError`` SQLite would give.

Connections are kept open between threads: a thread's connection, closed at the end of its
request (``CONN_MAX_AGE`` 0), goes back to a process-wide list of idle ones, and a thread that
needs one takes it from there. Under ASGI every request runs in a thread of its own, so without
it every request would open the file again, register Django's SQL functions, run the PRAGMAs and
have SQLite parse the whole schema and every statement anew: 1.5 ms of CPU per request, an
eighth of a web request's. A connection inside a transaction is closed, never kept, and a kept
one gets the settings' ``init_command`` again when it is taken (a thread may have changed a
PRAGMA of its own).

Each statement's text is turned from Django's ``%s`` placeholders into SQLite's ``?`` once, not
at every execution (Django runs a regular expression over it each time; the same few statements
make up a turn).
"""

from __future__ import annotations

import fcntl
import functools
import os
import sqlite3
import threading
from typing import Any

from django.db import OperationalError
from django.db.backends.sqlite3 import base

# One per process: every connection of every thread takes it for its write transaction.
WRITER = threading.Lock()
# The file each database's writers lock across processes, opened once per process: path -> fd.
_LOCK_FILES: dict[str, int] = {}
_LOCK_FILES_LOCK = threading.Lock()
# Statements longer than this (a bulk insert's) are converted each time rather than kept.
KEPT_STATEMENT_CHARS = 8192
# Idle connections kept per database file: at most this many (the rest are closed).
IDLE_CONNECTIONS_MAX = 32
_IDLE: dict[str, list[sqlite3.Connection]] = {}
_IDLE_LOCK = threading.Lock()


def idle_connections_close() -> None:
    """Close every kept idle connection (a process's shutdown; tests that remove a file)."""
    with _IDLE_LOCK:
        idle = [conn for conns in _IDLE.values() for conn in conns]
        _IDLE.clear()
    for conn in idle:
        conn.close()


def _lock_file(database: str) -> int | None:
    """The descriptor of ``<database>.writer`` (None for an in-memory database)."""
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    with _LOCK_FILES_LOCK:
        fd = _LOCK_FILES.get(database)
        if fd is None:
            fd = _LOCK_FILES[database] = os.open(f"{database}.writer", os.O_RDWR | os.O_CREAT, 0o600)
        return fd


@functools.lru_cache(maxsize=2048)
def _qmark(query: str) -> str:
    return base.FORMAT_QMARK_REGEX.sub("?", query).replace("%%", "%")


class SQLiteCursorWrapper(base.SQLiteCursorWrapper):
    """Django's cursor, with a statement's ``%s`` -> ``?`` conversion kept per text."""

    def convert_query(self, query: str, *, param_names: list[str] | None = None) -> str:
        if param_names is None and len(query) <= KEPT_STATEMENT_CHARS:
            return _qmark(query)
        return super().convert_query(query, param_names=param_names)


class DatabaseWrapper(base.DatabaseWrapper):
    holds_writer = False
    holds_file = None

    def create_cursor(self, name: str | None = None) -> SQLiteCursorWrapper:
        return self.connection.cursor(factory=SQLiteCursorWrapper)

    def get_connection_params(self) -> dict[str, Any]:
        params = super().get_connection_params()
        self.writer_timeout_s = float(params.get("timeout") or 5)
        return params

    def get_new_connection(self, conn_params: dict[str, Any]) -> sqlite3.Connection:
        if not self.is_in_memory_db():
            with _IDLE_LOCK:
                idle = _IDLE.get(str(self.settings_dict["NAME"]))
                conn = idle.pop() if idle else None
            if conn is not None:
                for command in self.init_commands:
                    if command := command.strip():
                        conn.execute(command)
                return conn
        return super().get_new_connection(conn_params)

    def _start_transaction_under_autocommit(self) -> None:
        if not self.holds_writer:
            if not WRITER.acquire(timeout=getattr(self, "writer_timeout_s", 5.0)):
                raise OperationalError("database is locked (this process's other writers held it "
                                       "longer than the busy timeout)")
            self.holds_writer = True
            fd = _lock_file(str(self.settings_dict["NAME"]))
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)  # the other processes' writer, if any, is short
                self.holds_file = fd
        try:
            super()._start_transaction_under_autocommit()
        except BaseException:
            self._release_writer()
            raise

    def _commit(self) -> None:
        try:
            super()._commit()
        finally:
            self._release_writer()

    def _rollback(self) -> None:
        try:
            super()._rollback()
        finally:
            self._release_writer()

    def _close(self) -> None:
        try:
            if not self._keep_idle():
                super()._close()
        finally:
            self._release_writer()

    def _keep_idle(self) -> bool:
        """Put this connection among the idle ones instead of closing it, when it is a file's and
        no transaction is open on it."""
        conn = self.connection
        if conn is None or conn.in_transaction or self.in_atomic_block or self.is_in_memory_db():
            return False
        with _IDLE_LOCK:
            idle = _IDLE.setdefault(str(self.settings_dict["NAME"]), [])
            if len(idle) >= IDLE_CONNECTIONS_MAX:
                return False
            idle.append(conn)
        return True

    def _release_writer(self) -> None:
        if self.holds_file is not None:
            fd, self.holds_file = self.holds_file, None
            fcntl.flock(fd, fcntl.LOCK_UN)
        if self.holds_writer:
            self.holds_writer = False
            WRITER.release()
