"""The database as the platform uses it: SQLite writers of one process take turns, and pooled
PostgreSQL connections go back to their pool as soon as a piece of work is done."""

from __future__ import annotations

import sqlite3
import threading
import time

import psycopg
import pytest
from django.apps import apps
from django.core.management.color import no_style
from django.core.management.sql import sql_flush
from django.db import OperationalError, connection, connections, transaction
from psycopg_pool import ConnectionPool

from agentsite.db import connection_lost, connection_release, releasing
from agentsite.db.postgresql.base import PoolCheck, connection_check
from agentsite.models import Team
from traces.models import Step

pytestmark = pytest.mark.django_db(transaction=True)
sqlite_only = pytest.mark.skipif("connection.vendor != 'sqlite'", reason="SQLite's one writer per process")
pooled_only = pytest.mark.skipif("not getattr(connection, 'pool', None)",
                                 reason="PostgreSQL with a connection pool (DATABASE_URL)")


@sqlite_only
def test_writers_of_one_process_take_turns_and_none_is_told_the_database_is_locked():
    inside, most, errors = [0], [0], []
    lock = threading.Lock()

    def writer(index: int) -> None:
        try:
            # SQLite itself would give up after 50 ms of waiting for the file's lock: the writers
            # of this process never meet there, they wait their turn before it.
            connection.ensure_connection()
            connection.connection.execute("PRAGMA busy_timeout = 50")
            for round_ in range(5):
                with transaction.atomic():
                    with lock:
                        inside[0] += 1
                        most[0] = max(most[0], inside[0])
                    Team.objects.create(name=f"writer {index}.{round_}")
                    time.sleep(0.01)  # a transaction that takes a while: the others wait their turn
                    with lock:
                        inside[0] -= 1
        except Exception as exc:  # noqa: BLE001 - what the test reports
            errors.append(repr(exc))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(24)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert most[0] == 1  # one write transaction at a time in this process
    assert Team.objects.filter(name__startswith="writer ").count() == 24 * 5


@sqlite_only
def test_a_failed_write_transaction_lets_the_next_writer_in():
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        Team.objects.create(name="rolled back")
        1 / 0  # noqa: B018 - the transaction fails and rolls back
    done = []
    thread = threading.Thread(target=lambda: (Team.objects.create(name="next"), done.append(1),
                                              connections.close_all()))
    thread.start()
    thread.join(10)
    assert done == [1] and not Team.objects.filter(name="rolled back").exists()


@pooled_only
def test_a_pooled_connection_goes_back_after_a_piece_of_work_but_not_inside_a_transaction():
    pool = connection.pool
    releasing(lambda: Team.objects.count())()
    assert connection.connection is None  # given back to the pool
    with transaction.atomic():
        Team.objects.count()
        connection_release()
        assert connection.connection is not None  # a transaction keeps its connection
    connection_release()
    assert connection.connection is None
    assert pool.get_stats()["pool_max"] >= 1


@pooled_only
def test_many_threads_share_a_pool_of_few_connections():
    pool = connection.pool
    errors: list[str] = []

    def work() -> None:
        try:
            for _ in range(5):
                releasing(lambda: Team.objects.count())()
                time.sleep(0.01)  # waiting between queries holds no connection
        except Exception as exc:  # noqa: BLE001 - what the test reports
            errors.append(repr(exc))

    threads = [threading.Thread(target=work) for _ in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert pool.get_stats().get("pool_size", 0) <= pool.max_size


@pooled_only
def test_the_pool_hands_out_a_resting_connection_without_a_round_trip_and_tries_one_the_server_ended(monkeypatch):
    assert isinstance(connection.pool._check, PoolCheck)
    params = {k: v for k, v in connection.get_connection_params().items() if k != "cursor_factory"}
    round_trips: list[object] = []
    original = ConnectionPool.check_connection
    monkeypatch.setattr(ConnectionPool, "check_connection",
                        staticmethod(lambda conn: (round_trips.append(conn), original(conn))))
    with psycopg.connect(**params, autocommit=True) as resting, \
            psycopg.connect(**params, autocommit=True) as other:
        connection_check(resting)  # alive, nothing to read: handed out as it is
        assert round_trips == []
        other.execute("SELECT pg_terminate_backend(%s, 5000)", [resting.info.backend_pid])
        with pytest.raises(psycopg.OperationalError):
            connection_check(resting)  # the server's goodbye waits on its socket: tried, and fails
        assert round_trips == [resting]
    with pytest.raises(psycopg.OperationalError, match="closed"):
        connection_check(resting)


@pooled_only
def test_a_full_pool_whose_connections_the_server_all_ended_serves_the_next_piece_of_work():
    """A failover with every connection of the pool at rest: the pool tries them all at once
    (``PoolCheck``); one by one it paused 1, 2, 4, 8 ... s between them, past its timeout."""
    pool = connection.pool
    held = threading.Barrier(pool.max_size)

    def hold() -> None:
        releasing(lambda: (Team.objects.count(), held.wait(30)))()

    threads = [threading.Thread(target=hold) for _ in range(pool.max_size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert pool.get_stats()["pool_size"] == pool.max_size
    params = {k: v for k, v in connection.get_connection_params().items() if k != "cursor_factory"}
    with psycopg.connect(**params, autocommit=True) as own:
        ended = own.execute("SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity "
                            "WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchone()[0]
    assert ended >= pool.max_size
    assert releasing(lambda: Team.objects.count())() >= 0  # not PoolTimeout after 30 s


def _django_error(cause: BaseException, kind: type[Exception] = OperationalError) -> Exception:
    """A database error as Django raises it: its own class, the driver's error as its cause."""
    try:
        raise kind(str(cause)) from cause
    except kind as exc:
        return exc


@pytest.mark.parametrize("cause", [
    psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
    psycopg.errors.CrashShutdown("terminating connection because of crash of another server process"),
    psycopg.errors.CannotConnectNow("the database system is starting up"),
    psycopg.errors.ConnectionFailure("connection failure"),
    psycopg.OperationalError("server closed the connection unexpectedly"),
    psycopg.OperationalError("consuming input failed: EOF detected"),
])
def test_a_session_the_server_ended_is_a_lost_connection_though_the_connection_looks_open(cause):
    """psycopg raises the server's last word (57P01 from ``pg_terminate_backend``) before it has
    read the end of the socket: the connection's state still says open then, so the error
    itself must tell (a turn then fails for good instead of being handed back)."""
    assert connection_lost(_django_error(cause))


@pytest.mark.parametrize("cause", [
    psycopg.errors.SerializationFailure("could not serialize access"),
    psycopg.errors.LockNotAvailable("could not obtain lock"),
    psycopg.errors.QueryCanceled("canceling statement due to statement timeout"),
    sqlite3.OperationalError("database is locked"),
])
def test_a_query_that_failed_on_a_working_connection_is_not_a_lost_connection(cause):
    connection.ensure_connection()  # the connection the query failed on, still open
    assert not connection_lost(_django_error(cause))


def test_only_database_errors_can_mean_a_lost_connection():
    assert not connection_lost(_django_error(psycopg.errors.AdminShutdown("x"), kind=ValueError))


def test_the_flush_between_transactional_tests_empties_every_table_with_rows_that_refer_to_each_other(sample_trace):
    """The flush that runs between ``transaction=True`` tests (on PostgreSQL a ``DELETE`` of each
    table instead of one ``TRUNCATE``, tests/conftest.py) leaves no row behind, whatever the
    order of the tables and the foreign keys between them."""
    assert Step.objects.filter(trace=sample_trace).count() == 12
    connection.ops.execute_sql_flush(sql_flush(no_style(), connection))
    left = {model._meta.label: model._base_manager.count() for model in apps.get_models()
            if model._meta.managed and not model._meta.proxy}
    assert {label: n for label, n in left.items() if n} == {}


@sqlite_only
def test_a_statement_converted_once_runs_with_each_calls_own_values():
    """SQLite's ``%s`` -> ``?`` conversion is kept per statement text: the same text runs again
    with other values, a literal ``%%`` stays a ``%``, and a statement too long to keep is
    converted each time the same way."""
    with connection.cursor() as cursor:
        for value in ("a", "b", "%s"):
            cursor.execute("SELECT %s || '%%'", [value])
            assert cursor.fetchone() == (f"{value}%",)
        long = "SELECT %s IN (" + ", ".join(["%s"] * 3000) + ") || '%%'"  # not kept: too long
        for value, listed in ((7, 7), (8, 7)):
            cursor.execute(long, [value, *[listed] * 3000])
            assert cursor.fetchone() == (f"{int(value == listed)}%",)
