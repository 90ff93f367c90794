"""SQLite with one writer per process: Django's back-end, with write transactions taken in turn.

SQLite lets one connection write at a time. In WAL mode readers never wait, but writers that
meet (a web process's requests and a worker's turns, each thread with its own connection) wait
on the file's lock by polling it in growing sleeps, and once the busy timeout passes the loser
gets "database is locked". Under a burst of hundreds of requests the polling is unfair: some
writers lose every round while others get through.

So each process takes its write transactions one at a time: ``BEGIN IMMEDIATE`` (the settings'
``transaction_mode``) waits for a process-wide lock first, in arrival order as far as the
threads are scheduled, and releases it at ``COMMIT`` or ``ROLLBACK``. Transactions are short,
so the queue moves fast; only writers of different processes still meet at the file's lock,
two or three at a time instead of hundreds, well inside the busy timeout. A writer that waits
longer than the busy timeout for its turn gets the same ``OperationalError`` SQLite would give.
"""

from __future__ import annotations

import threading
from typing import Any

from django.db import OperationalError
from django.db.backends.sqlite3 import base

# One per process: every connection of every thread takes it for its write transaction.
WRITER = threading.Lock()


class DatabaseWrapper(base.DatabaseWrapper):
    holds_writer = False

    def get_connection_params(self) -> dict[str, Any]:
        params = super().get_connection_params()
        self.writer_timeout_s = float(params.get("timeout") or 5)
        return params

    def _start_transaction_under_autocommit(self) -> None:
        if not self.holds_writer:
            if not WRITER.acquire(timeout=getattr(self, "writer_timeout_s", 5.0)):
                raise OperationalError("database is locked (this process's other writers held it "
                                       "longer than the busy timeout)")
            self.holds_writer = True
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
            super()._close()
        finally:
            self._release_writer()

    def _release_writer(self) -> None:
        if self.holds_writer:
            self.holds_writer = False
            WRITER.release()
