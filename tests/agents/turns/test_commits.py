"""What of a turn waits for the disk as it commits, against a real PostgreSQL: its steps do not
(``agentsite.db.commit_lazily`` on its database thread), its end does, and a person's message
does before it is accepted. Asked of the server itself (``SHOW synchronous_commit`` as each
transaction commits). On SQLite (``synchronous=NORMAL`` in WAL: no commit waits) these skip."""

from __future__ import annotations

import threading

import psycopg
import pytest
from django.db import connection, transaction
from django.test import RequestFactory

from agents.api.openai_schemas import ChatCompletionIn
from agents.api.openai_start import chat_start
from agents.turns.services import turn_start
from agents.turns.tasks import turn_run
from agents.turns.turn_threads import TurnDb
from agentsite.api_keys import api_key_authenticate, api_key_create
from agentsite.db import commit_durably, commit_lazily
from agentsite.models import Team
from tests.members import member_of
from traces.models import Trace

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'", reason="PostgreSQL's synchronous_commit"),
]


@pytest.fixture
def commits(monkeypatch) -> list[tuple[str, str]]:
    """(thread name, the server's ``synchronous_commit`` as it was asked to commit) of every
    commit from here on, in order."""
    seen: list[tuple[str, str]] = []
    real_commit, real_execute = psycopg.Connection.commit, psycopg.Connection.execute

    def note(conn: psycopg.Connection) -> None:
        with conn.cursor() as cursor:
            mode = cursor.execute("SHOW synchronous_commit", prepare=False).fetchone()[0]
        seen.append((threading.current_thread().name, mode))

    def commit(conn: psycopg.Connection) -> None:
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            note(conn)
        real_commit(conn)

    def execute(conn: psycopg.Connection, query, params=None, **kwargs):
        # A commit sent as a query (with what precedes it in the same round trip): what the
        # server was told before it, then the commit.
        text = query.strip() if isinstance(query, str) and params is None else ""
        if text.upper().endswith("COMMIT"):
            before = text[:-len("COMMIT")].strip().rstrip(";")
            if before:
                real_execute(conn, before, **kwargs)
            note(conn)
            return real_execute(conn, "COMMIT", **kwargs)
        return real_execute(conn, query, params, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "commit", commit)
    monkeypatch.setattr(psycopg.Connection, "execute", execute)
    return seen


def in_a_thread(fn) -> None:
    """``fn`` in a thread of its own (whose connection, and what it was told, are its own)."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - raised again in the test
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run, name="own")
    thread.start()
    thread.join(30)
    if errors:
        raise errors[0]


def write(durably: bool = False) -> None:
    with transaction.atomic():
        if durably:
            commit_durably()
        Team.objects.create(name="a write")


def test_a_thread_told_to_commit_lazily_does_so_until_a_transaction_asks_to_wait(commits):
    def work() -> None:
        write()  # a thread waits by default
        commit_lazily()
        write()
        write(durably=True)
        write()  # the next one is lazy again
        with pytest.raises(ZeroDivisionError), transaction.atomic():
            commit_durably()
            Team.objects.create(name="rolled back")
            raise ZeroDivisionError
        write()  # nor does a rolled-back transaction's wish carry over
        commit_lazily(False)
        write()

    in_a_thread(work)
    assert [mode for _, mode in commits] == ["on", "off", "on", "off", "off", "on"]
    assert Team.objects.filter(name="a write").count() == 6


def test_a_turns_steps_commit_lazily_its_end_and_the_message_wait(
        conversation, alice, sent_turns, use_redis, commits):
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation),
                       text="What is 17 * 23?")
    assert commits == [("MainThread", "on")]  # the person's message, before it is accepted
    commits.clear()

    assert turn_run(trace.pk) == "completed"
    threads = {name for name, _ in commits}
    assert len(threads) == 1 and next(iter(threads)).startswith("turn-db")
    modes = [mode for _, mode in commits]
    assert len(modes) >= 4  # its claim, how it was set up, its steps, its end
    assert modes[-1] == "on" and set(modes[:-1]) == {"off"}
    trace.refresh_from_db()
    assert trace.status == Trace.Status.COMPLETED and "391" in trace.answer


@pytest.fixture
def api_start(alice, team_a, make_agent):
    """Start a turn as ``POST /v1/chat/completions`` does (its key checked, then stored)."""
    agent = make_agent(name="Plain", tools=())
    _, secret = api_key_create(membership=member_of(alice, team_a), name="ci", scopes=["chat"])

    def start() -> Trace:
        caller = api_key_authenticate(secret)
        request = RequestFactory().post("/v1/chat/completions")
        request.auth, request.user = caller, caller.user
        request.team, request.membership = caller.team, caller.membership
        body = ChatCompletionIn(model=agent.slug, messages=[{"role": "user", "content": "Hello"}])
        return chat_start(request, body).trace

    return start


def test_an_api_turns_start_does_not_wait_its_end_does(api_start, sent_turns, use_redis, commits):
    # Its client hears of the turn only from its answer (or its stream), whose commit waits
    # for the disk and, the server's log being written in order, flushes the start with it.
    trace = api_start()
    assert commits == [("MainThread", "off")]
    commits.clear()
    assert turn_run(trace.pk) == "completed"
    assert [mode for _, mode in commits][-1] == "on"


def test_every_commit_of_a_turn_waits_when_the_settings_say_so(
        conversation, alice, sent_turns, use_redis, commits, settings, api_start):
    settings.DATABASE_STEPS_WAIT_FOR_DISK = True
    TurnDb.close_idle()  # threads made under the other setting
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation),
                       text="What is 17 * 23?")
    assert turn_run(trace.pk) == "completed"
    assert turn_run(api_start().pk) == "completed"  # an API turn's start too
    assert {mode for _, mode in commits} == {"on"}
    TurnDb.close_idle()
