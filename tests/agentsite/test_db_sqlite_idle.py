"""SQLite connections kept open between threads: a connection closed at a request's end goes to
the process's idle ones and the next thread takes it instead of opening the file again."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from django.db import connection

from agentsite.db.sqlite3 import base

pytestmark = [pytest.mark.django_db,
              pytest.mark.skipif("connection.vendor != 'sqlite'", reason="SQLite's idle connections")]


@pytest.fixture
def file_database(tmp_path: Path):
    """A wrapper factory for a SQLite file of this test's own, with the site's options."""
    settings = {**connection.settings_dict, "NAME": str(tmp_path / "idle.sqlite3"), "TEST": {}}
    made: list[base.DatabaseWrapper] = []

    def wrapper() -> base.DatabaseWrapper:
        made.append(base.DatabaseWrapper(dict(settings), alias="idle-test"))
        return made[-1]

    yield wrapper
    for each in made:
        if each.connection is not None and not each.in_atomic_block:
            each.close()
    base.idle_connections_close()


def _with_table(wrapper: base.DatabaseWrapper, table: str) -> base.DatabaseWrapper:
    """``wrapper`` connected, with an empty table ``table``."""
    wrapper.ensure_connection()
    with wrapper.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {table} (value INTEGER)")
    return wrapper


def test_a_closed_connection_is_taken_by_the_next_thread_instead_of_opening_the_file(file_database):
    first = _with_table(file_database(), "kept")
    raw = first.connection
    first.close()
    assert first.connection is None

    taken = []

    def next_request() -> None:
        second = file_database()
        second.ensure_connection()
        taken.append(second.connection)
        with second.cursor() as cursor:
            cursor.execute("INSERT INTO kept VALUES (1)")
        second.close()

    thread = threading.Thread(target=next_request)
    thread.start()
    thread.join(10)
    assert taken == [raw]


def test_two_wrappers_in_use_at_once_never_share_a_connection(file_database):
    first, second = file_database(), file_database()
    first.ensure_connection()
    second.ensure_connection()
    assert first.connection is not second.connection
    kept = first.connection
    first.close()
    third = file_database()
    third.ensure_connection()
    assert third.connection is kept and third.connection is not second.connection


def test_a_connection_closed_inside_a_transaction_is_not_kept(file_database):
    first = _with_table(file_database(), "open_tx")
    raw = first.connection
    with first.cursor() as cursor:
        cursor.execute("BEGIN")
        cursor.execute("INSERT INTO open_tx VALUES (1)")
    assert raw.in_transaction
    first.close()
    second = file_database()
    second.ensure_connection()
    assert second.connection is not raw
    with second.cursor() as cursor:  # the open transaction's row was never committed
        cursor.execute("SELECT count(*) FROM open_tx")
        assert cursor.fetchone() == (0,)


def test_a_kept_connection_gets_the_settings_pragmas_again(file_database):
    first = file_database()
    first.ensure_connection()
    first.connection.execute("PRAGMA busy_timeout = 50")  # a thread's own change
    first.close()
    second = file_database()
    second.ensure_connection()
    assert second.connection.execute("PRAGMA busy_timeout").fetchone() == (20000,)
    assert second.connection.execute("PRAGMA foreign_keys").fetchone() == (1,)


def test_at_most_so_many_idle_connections_are_kept(file_database, monkeypatch):
    monkeypatch.setattr(base, "IDLE_CONNECTIONS_MAX", 2)
    wrappers = [file_database() for _ in range(4)]
    for each in wrappers:
        each.ensure_connection()
    raws = [each.connection for each in wrappers]
    for each in wrappers:
        each.close()
    kept = base._IDLE[wrappers[0].settings_dict["NAME"]]
    assert kept == raws[:2]
    with pytest.raises(Exception, match="closed"):
        raws[3].execute("SELECT 1")
