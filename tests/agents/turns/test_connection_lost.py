"""A PostgreSQL connection that breaks under a running turn (a failover, a PgBouncer restart,
``pg_terminate_backend``), against the real server: the pool hands out live connections in
place of the terminated ones, so the turn goes on; a write whose own connection broke hands the
turn back, and the next attempt continues from its last recorded step. No step is left
running. On SQLite (in process: no connection to lose) these skip."""

from __future__ import annotations

import json

import psycopg
import pytest
from django.conf import settings
from django.db import connection
from django.test import Client

from agents.api import openai_start
from agents.turns.services import turn_start
from agents.turns.tasks import turn_run
from agentsite.api_keys import api_key_create
from agentsite.auth_backend import MembershipBackend
from agentsite.db import connection_release
from tests.members import member_of
from traces.models import Step, Trace
from traces.record import services as trace_services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("not getattr(connection, 'pool', None)",
                       reason="PostgreSQL with its connection pool (DATABASE_POOL_MAX)"),
]


@pytest.fixture(autouse=True)
def _own_connection_released():
    """The test thread's connection may have been terminated with the rest: whatever the test's
    outcome, it goes back (the pool discards a broken one), so the next test gets a live one."""
    yield
    connection_release()


def terminate_other_backends() -> int:
    """What a failover does to this database's sessions: every one but the caller's own
    (a connection of its own, outside Django's) is terminated by the server, which this waits
    for (up to 5 s each): ``pg_terminate_backend`` without a timeout returns once it has sent
    the signal, and a session handed out before its process has ended fails on its next
    statement (handed back, as the next test shows), not the one this test is about."""
    params = connection.get_connection_params()
    with psycopg.connect(**{k: v for k, v in params.items() if k != "cursor_factory"},
                         autocommit=True) as own:
        return own.execute(
            "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchone()[0]


def record_then(monkeypatch, nth: int, action):
    """Run ``action`` on the database thread at the turn's ``nth`` step write."""
    original = trace_services.step_record
    calls = {"n": 0}

    def step_record(**kwargs):
        calls["n"] += 1
        if calls["n"] == nth:
            action()
        return original(**kwargs)

    monkeypatch.setattr(trace_services, "step_record", step_record)
    return calls


def settled(trace: Trace) -> None:
    assert not Step.objects.filter(trace=trace, status=Step.Status.RUNNING).exists()


def test_a_turn_goes_on_when_every_connection_of_the_database_is_terminated(
        conversation, alice, sent_turns, use_redis, monkeypatch):
    killed: list[int] = []
    record_then(monkeypatch, 2, lambda: killed.append(terminate_other_backends()))
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="What is 17 * 23?")
    assert turn_run(trace.pk) == "completed"
    assert killed and killed[0] >= 1
    connection_release()  # this thread's connection was terminated too: it goes, a live one comes
    trace.refresh_from_db()
    assert trace.status == Trace.Status.COMPLETED and "391" in trace.answer
    assert trace.attempts == 1  # not even handed back: the pool replaced the dead connections
    settled(trace)


def test_a_write_whose_connection_breaks_hands_the_turn_back_and_it_continues(
        conversation, alice, sent_turns, use_redis, monkeypatch):

    def own_connection_terminated():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    calls = record_then(monkeypatch, 3, own_connection_terminated)
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="What is 17 * 23?")
    assert turn_run(trace.pk) == "handed_back"
    trace.refresh_from_db()
    assert trace.status == Trace.Status.QUEUED
    assert trace.meta["resume"]["reason"] == "database connection lost"
    assert sent_turns.count(trace.pk) == 2  # queued again for a worker

    assert turn_run(trace.pk) == "completed"  # the next attempt continues from what is recorded
    trace.refresh_from_db()
    assert trace.status == Trace.Status.COMPLETED and "391" in trace.answer
    assert trace.attempts == 2 and calls["n"] > 3
    assert trace.steps.filter(kind="resume").exists()
    settled(trace)


def test_a_turn_resumed_too_often_fails_with_the_error_rather_than_loop(
        conversation, alice, sent_turns, use_redis, monkeypatch):
    monkeypatch.setattr(settings, "TURN_MAX_RESUMES", 0)

    def own_connection_terminated():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    record_then(monkeypatch, 3, own_connection_terminated)
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="What is 17 * 23?")
    assert turn_run(trace.pk) == "failed"
    trace.refresh_from_db()
    assert trace.status == Trace.Status.FAILED and trace.attempts == 1
    settled(trace)


def test_a_connection_that_breaks_while_the_turn_is_set_up_hands_it_back(
        conversation, alice, sent_turns, use_redis, monkeypatch):
    """The setup reports its own errors as the turn's ("could not be set up"); a lost
    connection is not one of them."""
    from agents.turns import execution

    own_connection_dies_before(execution, "turn_setup_build", monkeypatch)
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="What is 17 * 23?")
    assert turn_run(trace.pk) == "handed_back"
    trace.refresh_from_db()
    assert trace.status == Trace.Status.QUEUED and trace.meta["excused_resumes"] == 1
    monkeypatch.undo()
    assert turn_run(trace.pk) == "completed"
    settled(trace)


# -- the web --------------------------------------------------------------------------------------
def own_connection_dies_before(owner, name: str, monkeypatch) -> None:
    """``owner.name`` (of a module or a class) first has the server terminate the connection
    it is about to use."""
    original = getattr(owner, name)

    def dying(*args, **kwargs):
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        with psycopg.connect(**{k: v for k, v in connection.get_connection_params().items()
                                if k != "cursor_factory"}, autocommit=True) as own:
            own.execute("SELECT pg_terminate_backend(%s)", [connection.connection.info.backend_pid])
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, dying)


def test_a_page_whose_connection_breaks_is_answered_503_and_the_next_one_works(
        client_for, alice, monkeypatch):
    client = client_for(alice)
    client.raise_request_exception = False
    # the first read of the request after its session: the person with their teams
    own_connection_dies_before(MembershipBackend, "get_user", monkeypatch)
    broken = client.get("/")
    assert broken.status_code == 503 and broken["Retry-After"] == "1"
    assert "Send it again" in broken.content.decode()
    monkeypatch.undo()
    connection_release()
    assert client.get("/").status_code == 200


def test_an_api_request_whose_connection_breaks_is_answered_503_in_openais_shape(
        agent, alice, team_a, monkeypatch):
    secret = api_key_create(membership=member_of(alice, team_a), name="t", scopes=["chat"])[1]
    own_connection_dies_before(openai_start, "turn_prepare", monkeypatch)
    response = Client(HTTP_AUTHORIZATION=f"Bearer {secret}").post(
        "/v1/chat/completions", json.dumps({"model": agent.slug, "messages": [
            {"role": "user", "content": "hi"}]}), content_type="application/json")
    assert response.status_code == 503 and response["Retry-After"] == "1"
    assert response.json()["error"]["code"] == "database_unavailable"
    assert not Trace.objects.exists()  # nothing of it was kept
