"""``update_returning``: an update that reads back what it wrote, in one statement, with the
values converted as the ORM reads them."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db.models import F

from agents.models import Conversation
from agentsite.db.returning import update_returning
from tests.helpers import work_counted
from traces.models import Trace

pytestmark = pytest.mark.django_db


@pytest.fixture
def trace(make_agent, alice):
    agent = make_agent(name="Returning")
    conversation = Conversation.objects.create(team=agent.team, agent=agent, created_by=alice)
    return Trace.objects.create(team=agent.team, conversation=conversation, agent=agent, user=alice,
                                cost_usd=Decimal("0.25"), event_seq=3, meta={"a": 1})


def test_the_row_comes_back_as_written_in_one_statement(trace):
    with work_counted() as work:
        row = update_returning(Trace.objects.filter(pk=trace.pk, status=trace.status),
                               {"cost_usd": F("cost_usd") + Decimal("0.0000000001"),
                                "event_seq": F("event_seq") + 2, "meta": {"b": [2]}},
                               ["event_seq", "cost_usd", "meta", "conversation_id"])
    assert work.queries == 1
    assert row == {"event_seq": 5, "cost_usd": Decimal("0.2500000001"), "meta": {"b": [2]},
                   "conversation_id": trace.conversation_id}
    trace.refresh_from_db()
    assert (trace.event_seq, trace.cost_usd, trace.meta) == (5, Decimal("0.2500000001"), {"b": [2]})


def test_nothing_matched_is_none_and_nothing_is_written(trace):
    assert update_returning(Trace.objects.filter(pk=trace.pk, status="finished-long-ago"),
                            {"event_seq": F("event_seq") + 1}, ["event_seq"]) is None
    assert Trace.objects.get(pk=trace.pk).event_seq == 3


def test_more_than_one_row_is_refused(trace):
    Trace.objects.create(team=trace.team, conversation=trace.conversation, agent=trace.agent, user=trace.user)
    with pytest.raises(ValueError, match="updated 2 rows"):
        update_returning(Trace.objects.filter(conversation=trace.conversation), {"event_seq": 9}, ["event_seq"])
