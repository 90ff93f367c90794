"""A message sent while the broker is down is accepted, shown as queued and sent by the reaper
once Redis answers; the reaper sends again at once what a Redis restart lost. Against a real
Redis (one of its own, restarted in the test) and an address where nothing listens."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse

from agents.models import Message
from agents.turns.reaper import LOST_AFTER_S, RESEND_AFTER_S, trace_reap
from agents.turns.services import turn_start
from tests.members import member_of
from traces.models import Trace

pytestmark = pytest.mark.django_db(transaction=True)


def send(client, conversation, text: str = "What is 2 + 2?"):
    return client.post(reverse("message_send", args=[conversation.uuid]), {"text": text},
                       HTTP_HX_REQUEST="true")


def test_a_message_sent_while_redis_is_down_is_kept_and_shown_as_queued(
        client_for, alice, charlie, conversation, broker):
    c = client_for(alice)

    # (answered at once, not after seconds of retries: `make chaos`, "message while down")
    response = send(c, conversation)

    assert response.status_code == 200 and "Queued…" in response.content.decode()
    trace = Trace.objects.get()
    assert (trace.status, trace.enqueued_at) == ("queued", None)  # for the reaper to send
    assert Message.objects.get(trace=trace).text == "What is 2 + 2?"
    page = c.get(reverse("conversation", args=[conversation.uuid]))
    assert page.status_code == 200 and "Queued…" in page.content.decode()
    assert send(client_for(charlie), conversation).status_code == 404


def test_the_reaper_sends_it_as_soon_as_redis_answers(client_for, alice, conversation, broker):
    send(client_for(alice), conversation)
    trace = Trace.objects.get()

    # still down: the reaper's send fails at once and leaves the trace for its next run
    assert trace_reap().dispatched == []
    assert Trace.objects.get(pk=trace.pk).enqueued_at is None

    broker.start()
    assert trace_reap().dispatched == [trace.pk]
    assert broker.turn_tasks() == [trace.pk]
    assert Trace.objects.get(pk=trace.pk).enqueued_at is not None
    assert trace_reap().dispatched == []  # sent once, not on every run


def test_a_send_that_fails_ends_the_reapers_run(make_agent, alice, broker, caplog):
    from agents.chat.services import conversation_create

    agent = make_agent()
    traces = [turn_start(conversation=conversation_create(agent=agent, membership=member_of(alice, agent.team)),
                         membership=member_of(alice, agent.team), text=f"What is {n} + {n}?") for n in range(3)]
    assert Trace.objects.filter(enqueued_at__isnull=True).count() == 3
    caplog.clear()

    assert trace_reap().dispatched == []
    # one try, not one per trace: a broker that hangs would hold the reaper that long each
    assert caplog.text.count("could not send the turn task") == 1

    broker.start()
    assert sorted(trace_reap().dispatched) == sorted(t.pk for t in traces)


def test_what_a_redis_restart_lost_is_sent_again_at_once(conversation, alice, broker):
    broker.start()
    trace_reap()  # the reapers look at the broker every few seconds
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="What is 2 + 2?")
    assert broker.turn_tasks() == [trace.pk]
    assert trace_reap().dispatched == []

    broker.restart()
    # a turn of another conversation waits in the queue: not the empty-queue rule
    broker.client().rpush("turns", "another turn's task")

    assert trace_reap().dispatched == [trace.pk]  # not after RESEND_AFTER_S
    assert broker.turn_tasks() == [trace.pk]
    assert trace_reap().dispatched == []  # sent since Redis restarted: not lost again


def test_a_task_neither_queued_nor_claimed_after_seconds_is_sent_again(conversation, alice, broker):
    broker.start()
    trace_reap()
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="What is 2 + 2?")
    broker.client().delete("turns")  # lost on the way, though Redis did not restart
    sent_at = Trace.objects.get(pk=trace.pk).enqueued_at

    assert trace_reap(now=sent_at + timedelta(seconds=LOST_AFTER_S - 1)).dispatched == []
    assert trace_reap(now=sent_at + timedelta(seconds=LOST_AFTER_S + 1)).dispatched == [trace.pk]
    assert broker.turn_tasks() == [trace.pk]


def test_a_task_waiting_in_the_queue_is_sent_again_only_after_two_minutes(conversation, alice,
                                                                          broker):
    broker.start()
    trace_reap()
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="What is 2 + 2?")
    sent_at = Trace.objects.get(pk=trace.pk).enqueued_at  # no worker takes it: it waits

    assert trace_reap(now=sent_at + timedelta(seconds=RESEND_AFTER_S - 1)).dispatched == []
    assert trace_reap(now=sent_at + timedelta(seconds=RESEND_AFTER_S + 1)).dispatched == [trace.pk]
