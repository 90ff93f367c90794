"""No span lost: an ended turn stays owed to its team's receiver until the receiver accepted
every span of it, and is sent again from the database (``traces.export.delivery``) when the
receiver was down, when it went away in the middle of a turn, or after a restart; each span
once. Against a real OTLP/HTTP server in this process (``tests.otel.receiver``), the turns run
with the offline demo model."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from agents.chat.services import conversation_create
from agents.turns.approvals import approval_decide
from agents.turns.services import turn_start
from agents.turns.tasks import turn_run
from tests.approvals import waiting_approval
from tests.members import member_of
from tests.otel.receiver import OTLPReceiver, ReceivedSpan
from tests.otel.scenario import export_to_loopback
from traces.export import config as export_config
from traces.export import delivery, pipeline
from traces.models import ExportState, PendingExport, Trace, TraceExporter

pytestmark = pytest.mark.django_db(transaction=True)

DOWN = 1000  # answers 503 to this many requests: down for the test's length


@pytest.fixture(autouse=True)
def _loopback(settings):
    export_to_loopback(settings)
    settings.OTEL_EXPORT_TIMEOUT_S = 0.5  # a failing receiver is given up on at once


@pytest.fixture
def exporter(team_a, receiver):
    row = TraceExporter.objects.create(team=team_a, endpoint=receiver.endpoint)
    export_config.forget()
    pipeline.forget_configured()
    return row


def down(receiver: OTLPReceiver) -> None:
    receiver.fail_with(503, times=DOWN, retry_after="0")


def back(receiver: OTLPReceiver) -> None:
    with receiver._changed:
        receiver._failures.clear()


def later() -> timezone.datetime:
    """A moment past the grace and the pause after a failure: the catch-up's turn."""
    return timezone.now() + timedelta(hours=1)


def run(conversation, alice, text: str = "What is 6 * 7?") -> Trace:
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text=text)
    assert turn_run(trace.pk) == "completed"
    pipeline.PIPELINE.flush(10.0)
    return trace


def of(trace: Trace, spans: list[ReceivedSpan]) -> list[ReceivedSpan]:
    """The spans of one turn (its OpenTelemetry trace is its uuid)."""
    return [s for s in spans if s.trace_id == trace.uuid.hex]


def assert_whole_and_once(spans: list[ReceivedSpan], count: int) -> None:
    """``count`` spans, none twice, each with its parent among them (the root excepted)."""
    ids = [s.span_id for s in spans]
    assert len(ids) == len(set(ids)) == count, sorted(s.name for s in spans)
    roots = [s for s in spans if not s.parent_span_id]
    assert len(roots) == 1 and roots[0].name.startswith("invoke_agent")
    assert {s.parent_span_id for s in spans if s.parent_span_id} <= set(ids)


def test_a_turn_the_receiver_accepted_is_owed_no_more(exporter, receiver, conversation, alice,
                                                     sent_turns, use_redis):
    trace = run(conversation, alice)
    assert_whole_and_once(of(trace, receiver.wait_for(4)), 4)
    assert not PendingExport.objects.exists()
    assert ExportState.objects.get(team=trace.team).last_success_at is not None
    assert delivery.catch_up(later()) == {"delivered": 0, "owed": 0, "dropped": 0, "given_up": 0}


def test_turns_ended_while_the_receiver_was_down_arrive_once_it_is_back(
        exporter, receiver, conversation, alice, sent_turns, use_redis):
    down(receiver)
    first, second = run(conversation, alice), run(conversation, alice, "What is 2 + 2?")
    assert not receiver.spans
    assert set(PendingExport.objects.values_list("trace_id", flat=True)) == {first.pk, second.pk}
    state = ExportState.objects.get(team=first.team)
    assert "HTTP 503" in state.last_error and state.next_try_at > timezone.now()
    # Within the grace and the pause, the catch-up leaves them; a restart loses nothing.
    assert delivery.catch_up()["delivered"] == 0
    pipeline.PIPELINE.discard()
    back(receiver)
    assert delivery.catch_up(later()) == {"delivered": 2, "owed": 0, "dropped": 0, "given_up": 0}
    for trace in (first, second):
        assert_whole_and_once(of(trace, receiver.spans), 4)
    assert not PendingExport.objects.exists()
    state.refresh_from_db()
    assert state.failures == 0 and state.next_try_at is None and state.last_success_at is not None
    assert delivery.catch_up(later())["delivered"] == 0  # each span once


def test_a_receiver_lost_in_the_middle_of_a_turn_gets_the_rest_and_nothing_twice(
        exporter, receiver, make_agent, alice, sent_turns, use_redis, run_in_thread):
    agent = make_agent(name="Careful", approval=("calculator",))
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="What is 6 * 7?")
    worker = run_in_thread(trace.pk)
    step = waiting_approval(trace, what="the calculator waiting for approval")
    early = of(trace, receiver.wait_for(lambda spans: any(s.name == "chat demo" for s in spans), timeout_s=10))
    down(receiver)  # the collector goes away while the turn waits for a person
    approval_decide(trace=trace, call_id=step.call_id, approved=True, membership=member_of(alice, trace))
    worker.join(timeout=20)
    pipeline.PIPELINE.flush(10.0)
    assert of(trace, receiver.spans) == early  # nothing more came, the turn's own span neither
    pending = PendingExport.objects.get(trace=trace)
    assert pending.sent_steps and delivery.TURN_SPAN not in pending.sent_steps
    back(receiver)
    assert delivery.catch_up(later())["delivered"] == 1
    spans = of(trace, receiver.spans)
    assert {s.name for s in spans} >= {"chat demo", "execute_tool calculator", "invoke_agent Careful"}
    assert_whole_and_once(spans, len(spans))


def test_the_backlog_is_bounded_and_what_was_given_up_is_counted(
        exporter, receiver, conversation, alice, sent_turns, use_redis, settings):
    settings.OTEL_EXPORT_BACKLOG_MAX = 2
    down(receiver)
    oldest, *rest = [run(conversation, alice, f"What is {n} + 1?") for n in range(3)]
    back(receiver)
    assert delivery.catch_up(later()) == {"delivered": 2, "owed": 0, "dropped": 0, "given_up": 1}
    assert not of(oldest, receiver.spans)
    assert ExportState.objects.get(team=oldest.team).given_up == 1


def test_a_team_that_turned_export_off_is_owed_nothing(exporter, receiver, conversation, alice,
                                                      sent_turns, use_redis):
    down(receiver)
    run(conversation, alice)
    TraceExporter.objects.filter(pk=exporter.pk).update(enabled=False)
    export_config.forget()
    back(receiver)
    assert delivery.catch_up(later()) == {"delivered": 0, "owed": 0, "dropped": 1, "given_up": 0}
    assert not receiver.spans and not PendingExport.objects.exists()


def test_turns_of_a_team_without_export_are_not_kept(receiver, conversation, alice, sent_turns,
                                                     use_redis, team_b):
    TraceExporter.objects.create(team=team_b, endpoint=receiver.endpoint)  # another team's
    pipeline.forget_configured()
    run(conversation, alice)
    assert not PendingExport.objects.exists()


def test_one_sender_at_a_time_holds_an_owed_turn(exporter, receiver, conversation, alice,
                                                 sent_turns, use_redis):
    down(receiver)
    trace = run(conversation, alice)
    now = later()
    held = delivery.claim(trace.pk, now)
    assert held is not None and delivery.claim(trace.pk, now) is None
    assert delivery.catch_up(now)["delivered"] == 0  # the holder's
    back(receiver)
    lease_over = now + timedelta(seconds=delivery.lease_s() + 1)
    assert delivery.catch_up(lease_over)["delivered"] == 1  # a holder that went away lets go


def test_the_exporter_page_shows_how_delivery_goes(exporter, receiver, conversation, alice,
                                                  sent_turns, use_redis, client_for):
    down(receiver)
    run(conversation, alice)
    page = client_for(alice).get(reverse("admin:traces_traceexporter_change", args=[exporter.pk]))
    text = page.content.decode()
    assert "Owed: 1 ended turn(s)" in text and "it answered HTTP 503" in text
    assert "Last accepted: never" in text and "Failing (1 in a row)" in text
    back(receiver)
    delivery.catch_up(later())
    text = client_for(alice).get(reverse("admin:traces_traceexporter_change", args=[exporter.pk])).content.decode()
    assert "Owed: 0 ended turn(s)" in text and "Last accepted: never" not in text
