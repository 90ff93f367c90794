"""The database as the platform uses it: SQLite with one writer per process
(``agentsite.db.sqlite3``), and PostgreSQL connections taken from a bounded pool per process
and given back as soon as a piece of work is done (``connection_release``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, connections

T = TypeVar("T")


class ConnectionLost(OperationalError):
    """The database connection broke while a piece of work used it (a failover, a PgBouncer
    restart, ``pg_terminate_backend``, a network cut): nothing of that piece of work's open
    transaction was kept, and the same work on a new connection may well succeed. A turn is
    handed back and continues from its last recorded step; a request is answered 503."""


DATABASE_LOST_MESSAGE = ("The connection to the database broke while this request was handled; "
                         "nothing of it was kept. Send it again in a moment.")


# PostgreSQL's SQLSTATEs for a session the server ended: class 08 (connection exception), and
# admin shutdown (``pg_terminate_backend``, a failover), crash shutdown, cannot connect now.
_LOST_SQLSTATES = frozenset({"57P01", "57P02", "57P03"})


def _lost_by_its_error(exc: BaseException) -> bool:
    """Whether the driver's error under ``exc`` says the session is gone. psycopg raises the
    server's last word (``AdminShutdown``, 57P01) before it has noticed that the socket closed,
    so the connection can still look open then; its own errors for a connection that went away
    carry no SQLSTATE at all."""
    cause = exc.__cause__ or exc.__context__
    if cause is None or not type(cause).__module__.startswith("psycopg"):
        return False
    sqlstate = getattr(cause, "sqlstate", None)
    if sqlstate:
        return sqlstate.startswith("08") or sqlstate in _LOST_SQLSTATES
    return True


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a database call of this thread, means its connection broke
    (rather than a query that failed on a working connection): by the driver's error, or by
    the state the connection was left in."""
    if isinstance(exc, ConnectionLost):
        return True
    if not isinstance(exc, OperationalError | InterfaceError):
        return False
    if _lost_by_its_error(exc):
        return True
    for conn in connections.all(initialized_only=True):
        if conn.vendor == "sqlite":  # in process: it does not lose its connection
            continue
        raw = conn.connection
        if raw is None or getattr(raw, "closed", False) or getattr(raw, "broken", False):
            return True
    return False


def connection_release() -> None:
    """Give this thread's database connections back to their pool, where connections are pooled
    (PostgreSQL with ``DATABASE_POOL_MAX``), unless a transaction is open: a thread that waits
    between its queries (a turn waiting on its model, a request streaming a turn) then holds no
    connection meanwhile, and a process never holds more than its pool's size, whatever its
    threads. Without a pool (SQLite), nothing."""
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and getattr(conn, "pool", None) and not conn.in_atomic_block:
            try:
                conn.close()
            except DatabaseError:  # a broken one: the pool discards it (and Django forgets it)
                pass


def commit_lazily(lazily: bool = True) -> None:
    """This thread's transactions commit without waiting for the disk (PostgreSQL: see
    ``agentsite.db.postgresql``), or wait again (``lazily`` False). Elsewhere nothing: SQLite in
    WAL with ``synchronous=NORMAL`` does not wait for the disk as it commits anyway."""
    for conn in connections.all():
        if hasattr(conn, "commit_waits"):
            conn.commit_waits = not lazily


def commit_durably() -> None:
    """The transaction open in this thread waits for the disk as it commits, and with it every
    commit before it, whatever ``commit_lazily`` said: what a client is told has happened."""
    for conn in connections.all(initialized_only=True):
        if hasattr(conn, "commit_durable") and conn.in_atomic_block:
            conn.commit_durable = True


def commit_unwaited() -> None:
    """The transaction open in this thread commits without waiting for the disk, whatever its
    thread's default: for writes nobody is told of before a later commit that waits, which
    flushes them first (an API turn's start, whose client hears of it from its end). Unless
    ``DATABASE_STEPS_WAIT_FOR_DISK``, which has every write of a turn wait."""
    if settings.DATABASE_STEPS_WAIT_FOR_DISK:
        return
    for conn in connections.all(initialized_only=True):
        if hasattr(conn, "commit_durable") and conn.in_atomic_block and conn.commit_durable is None:
            conn.commit_durable = False


def releasing(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn``, giving its thread's connection back afterwards (``connection_release``); a
    connection that broke under it raises ``ConnectionLost``."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        except (OperationalError, InterfaceError) as exc:
            if not isinstance(exc, ConnectionLost) and connection_lost(exc):
                raise ConnectionLost(str(exc)) from exc
            raise
        finally:
            connection_release()

    return wrapper


def rereading(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn``, a read that changes nothing, done once more on a new connection when its
    connection broke under it (the pool hands out a live one)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        except (OperationalError, InterfaceError) as exc:
            if not connection_lost(exc):
                raise
            for conn in connections.all(initialized_only=True):
                if conn.vendor != "sqlite":
                    try:
                        conn.close()
                    except DatabaseError:
                        pass
            return fn(*args, **kwargs)

    return wrapper


def db_async(fn: Callable[..., T]) -> Callable[..., Any]:
    """``sync_to_async(fn)`` giving the thread's connection back when ``fn`` is done: for async
    views that stay open (a streamed turn), whose request thread would otherwise hold its
    connection until the stream ends."""
    return sync_to_async(releasing(fn))
