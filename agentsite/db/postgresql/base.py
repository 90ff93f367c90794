"""PostgreSQL: Django's back-end, whose pool checks a connection it hands out without a round
trip, and whose commits may go without waiting for the disk where a thread says so.

Commits. A transaction that has written waits, as it commits, until the server has flushed its
write-ahead log to disk (``synchronous_commit``): 0.2 ms on an idle local disk, 4-5 ms on one
another process writes to, more on a network disk; often more than everything else a short
write costs. A thread that calls ``agentsite.db.commit_lazily`` (a turn's database
thread, whose steps a turn can be resumed from as after a lost worker) has its transactions
committed with ``SET LOCAL synchronous_commit TO off`` (sent with the ``COMMIT``, one round
trip, as psycopg's own commit would take): at once, the server flushing them within
a fraction of a second (``wal_writer_delay``). A crash of the server, not of the process, may
lose those last few; never a part of one, and never one without the ones before it, as the log
is written in order. A transaction that calls ``agentsite.db.commit_durably`` (a turn's end)
waits, and with it every commit before it; one that calls ``agentsite.db.commit_unwaited`` (an
API turn's start, whose client hears of it from that end) does not.

psycopg's own check (``ConnectionPool.check_connection``, which Django gives the pool with
``CONN_HEALTH_CHECKS``) sends an empty query and waits for the server's answer: a round trip,
and a wake-up of the server's backend, each time a thread takes a connection, which a turn does
seven times and an API request twice. A session the server ended (``pg_terminate_backend``, a
failover, a restart, a PgBouncer that went away) does not end silently: the server sends its
last word (57P01 and the like) and closes the socket. So a connection at rest that has anything
to read, or an end of file, gets psycopg's check; one with nothing to read is handed out as it
is. A socket that went quiet without the server closing it (a network cut) is not found sooner
by either check: the round trip would wait as long.
"""

from __future__ import annotations

import select
from typing import Any

import psycopg
from django.db.backends.base.base import NO_DB_ALIAS
from django.db.backends.postgresql import base
from psycopg_pool import ConnectionPool


def connection_check(conn: psycopg.Connection) -> None:
    """Raise, as ``ConnectionPool.check_connection`` does, for a connection that is not fit to be
    handed out; the pool then discards it and takes or makes another."""
    if conn.closed or conn.broken:
        raise psycopg.OperationalError("the connection is closed")
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN | select.POLLPRI)
    if poller.poll(0):  # something came while it rested: the server's goodbye, or its end
        ConnectionPool.check_connection(conn)


class PoolCheck:
    """The check a pool runs (``connection_check``), which, when a connection fails it, has the
    pool try all its idle ones at once (``ConnectionPool.check``, which replaces the dead): a
    server that ended one session has mostly ended them all (a failover, a restart), and the
    pool would otherwise hand them out one by one, pausing longer after each failure (1, 2, 4,
    8 s ...): with ten dead connections a piece of work waited past the pool's timeout."""

    def __init__(self) -> None:
        self.pool: ConnectionPool | None = None

    def __call__(self, conn: psycopg.Connection) -> None:
        try:
            connection_check(conn)
        except psycopg.Error:
            if self.pool is not None:
                self.pool.check()
            raise


# One simple-protocol query: the setting and the commit in one round trip. psycopg's own
# ``commit()`` then finds the session idle and sends nothing.
LAZY_COMMIT = "SET LOCAL synchronous_commit TO off; COMMIT"


class DatabaseWrapper(base.DatabaseWrapper):
    # A wrapper belongs to one thread: these are that thread's.
    commit_waits = True  # False: ``agentsite.db.commit_lazily``
    # This transaction's own say, whatever ``commit_waits`` says: True waits
    # (``agentsite.db.commit_durably``), False does not (``agentsite.db.commit_unwaited``).
    commit_durable: bool | None = None

    def _commit(self) -> None:
        waits = self.commit_waits if self.commit_durable is None else self.commit_durable
        self.commit_durable = None
        if self.connection is not None and not waits:
            with self.wrap_database_errors:
                self.connection.execute(LAZY_COMMIT, prepare=False)
        super()._commit()

    def _rollback(self) -> None:
        self.commit_durable = None
        super()._rollback()

    @property
    def pool(self) -> ConnectionPool | None:
        # Django's own pool, made as Django makes it (``base.DatabaseWrapper.pool``) but with
        # ``PoolCheck`` when health checks are on; Django then keeps and serves it.
        options = self.settings_dict["OPTIONS"].get("pool")
        if (options and self.alias != NO_DB_ALIAS and self.alias not in self._connection_pools
                and self.settings_dict["CONN_HEALTH_CHECKS"]
                and self.settings_dict.get("CONN_MAX_AGE", 0) == 0):
            kwargs: dict[str, Any] = {**self.get_connection_params(), "autocommit": True}
            check = PoolCheck()
            made = ConnectionPool(kwargs=kwargs, open=False, configure=self._configure_connection,
                                  check=check, **({} if options is True else options))
            check.pool = made
            self._connection_pools.setdefault(self.alias, made)
        return super().pool
