"""The database as the platform uses it: SQLite with one writer per process
(``agentsite.db.sqlite3``), and PostgreSQL connections taken from a bounded pool per process
and given back as soon as a piece of work is done (``connection_release``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.db import connections

T = TypeVar("T")


def connection_release() -> None:
    """Give this thread's database connections back to their pool, where connections are pooled
    (PostgreSQL with ``DATABASE_POOL_MAX``), unless a transaction is open: a thread that waits
    between its queries (a turn waiting on its model, a request streaming a turn) then holds no
    connection meanwhile, and a process never holds more than its pool's size, whatever its
    threads. Without a pool (SQLite), nothing."""
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and getattr(conn, "pool", None) and not conn.in_atomic_block:
            conn.close()


def releasing(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn``, giving its thread's connection back afterwards (``connection_release``)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        finally:
            connection_release()

    return wrapper


def db_async(fn: Callable[..., T]) -> Callable[..., Any]:
    """``sync_to_async(fn)`` giving the thread's connection back when ``fn`` is done: for async
    views that stay open (a streamed turn), whose request thread would otherwise hold its
    connection until the stream ends."""
    return sync_to_async(releasing(fn))
