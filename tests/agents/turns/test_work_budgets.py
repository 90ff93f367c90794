"""Budgets of work, as counts that hold on any machine: the database statements and Redis round
trips of a turn's start, of a turn of the demo model, and of a further model request with a
tool call. A change that makes a unit of work dearer fails here the day it lands; its time is
the benchmarks' to judge (``make bench``). Counted warm: the process has read the team's
configuration and prices once already, as a running site has."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import RequestFactory

from agents.api.openai_schemas import ChatCompletionIn
from agents.api.openai_start import chat_start
from agents.turns.tasks import turn_run
from agentsite.api_keys import api_key_authenticate, api_key_create
from tests.helpers import work_counted
from tests.members import member_of
from traces.models import Trace
from traces.record import streaming

pytestmark = pytest.mark.django_db(transaction=True)

# The web process's part of an API turn: the key's row, the team's stamp, the budgets' and the
# conversation's, message's and trace's writes.
START_QUERIES = 6
# A turn of the demo model without tools: claim (the trace read with its person's role), setup
# (stamp, memory, branch, history), its record (configured, the model request's two writes, the
# answer's payload, the close). The trace's writes read back what they moved in the same
# statement (UPDATE ... RETURNING), the close's included.
# Redis: its announcements (one round trip each to a group nobody watches), the text's frames
# and its end signal. PostgreSQL adds the conversation's row lock at the claim and the close
# (SQLite's writers take their turns without one).
TURN_QUERIES, TURN_REDIS = 20, 9
ROW_LOCKS = 2
# A further iteration with one tool call: the call's three writes, a model request's, the
# trajectory state's.
ITERATION_QUERIES, ITERATION_REDIS = 17, 6


@pytest.fixture
def api(make_agent, alice, team_a, sent_turns, use_redis, monkeypatch):
    """Start an API turn and run it, counting each part's work. Text deltas go out when a
    model request ends (no 55 ms frames: their number would depend on the machine's speed), and
    the process's cancel watch, which polls on its own clock for every turn at once, is not
    counted."""
    monkeypatch.setattr(streaming, "DELTA_FRAME_S", 3600.0)
    _, secret = api_key_create(membership=member_of(alice, team_a), name="ci", scopes=["chat"])

    def run(agent, text: str):
        with work_counted() as start:
            caller = api_key_authenticate(secret)
            request = RequestFactory().post("/v1/chat/completions")
            request.auth, request.user = caller, caller.user
            request.team, request.membership = caller.team, caller.membership
            body = ChatCompletionIn(model=agent.slug, messages=[{"role": "user", "content": text}])
            trace = chat_start(request, body).trace
        with work_counted(ignore_threads=("cancel-watch",)) as turn:
            assert turn_run(trace.pk) == "completed"
        kinds = list(Trace.objects.get(pk=trace.pk).steps.order_by("seq").values_list("kind", flat=True))
        return start, turn, kinds

    return run


def test_an_api_turns_start_and_a_plain_turn_stay_within_their_budgets(api, make_agent):
    plain = make_agent(name="Plain", tools=())
    api(plain, "Hello there")  # the process reads the configuration and prices once
    start, turn, kinds = api(plain, "Hello again")
    assert kinds == ["llm_request"]
    assert start.queries <= START_QUERIES and start.redis == 0, start.sql
    assert turn.queries <= TURN_QUERIES + (ROW_LOCKS if connection.vendor == "postgresql" else 0), turn.sql
    assert turn.redis <= TURN_REDIS
    # No configuration row is read again (only the stamp says nothing changed).
    assert not [q for q in turn.sql if "UNION ALL" not in q
                and ('FROM "agents_routingrule"' in q or 'FROM "agents_hook"' in q)]


def test_each_model_request_and_tool_call_stays_within_its_budget(api, make_agent):
    plain, tooled = make_agent(name="Plain", tools=()), make_agent(name="Tooled")
    api(plain, "Hello there")
    api(tooled, "What is 1 * 1?")
    _, plain_turn, _ = api(plain, "Hello again")
    _, tool_turn, kinds = api(tooled, "What is 17 * 23?")
    assert kinds == ["llm_request", "tool_call", "llm_request"]
    assert tool_turn.queries - plain_turn.queries <= ITERATION_QUERIES, tool_turn.sql
    assert tool_turn.redis - plain_turn.redis <= ITERATION_REDIS
