"""Read queries about turns in flight."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.chat.services import conversation_create
from agents.turns.selectors import running_turns_time_left
from agents.turns.services import turn_start
from tests.members import member_of
from traces.models import Trace

pytestmark = pytest.mark.django_db


def running(trace: Trace, *, worker: str, started_s_ago: float, now) -> None:
    Trace.objects.filter(pk=trace.pk).update(status="running", worker=worker,
                                             started_at=now - timedelta(seconds=started_s_ago))


def test_the_time_left_of_a_worker_s_turns_counts_from_their_first_start(make_agent, alice, sent_turns):
    now = timezone.now()
    quick = make_agent(name="Quick", turn_time_limit_s=60)
    slow = make_agent(name="Slow", turn_time_limit_s=600)
    traces = [turn_start(conversation=conversation_create(agent=agent, membership=member_of(alice, agent.team)),
                         membership=member_of(alice, agent.team), text="hello") for agent in (quick, slow, slow)]
    running(traces[0], worker="dev-7@box", started_s_ago=10, now=now)
    running(traces[1], worker="dev-7@box", started_s_ago=100, now=now)
    running(traces[2], worker="dev-70@box", started_s_ago=0, now=now)  # another runner's

    assert running_turns_time_left(worker_prefix="dev-7@", now=now) == (2, 600 + 30 - 100)
    assert running_turns_time_left(worker_prefix="nobody@", now=now) == (0, 0.0)

    # A trace whose agent is gone may run as long as the longest limit of any agent.
    Trace.objects.filter(pk=traces[0].pk).update(agent=None)
    assert running_turns_time_left(worker_prefix="dev-7@", now=now) == (2, 600 + 30 - 10)
