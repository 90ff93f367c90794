"""Tokens a server did not report are estimates, and every place that shows tokens says so: the
step (server reported none vs stream cut off), the trace (a count of such requests, kept with
its totals), the ledger and the costs page ("includes N requests with estimated tokens"), the
trace list and the live totals. Never a silent figure."""

from __future__ import annotations

import asyncio
import json

import pytest
from django.urls import reverse

from agents.chat.live import step_fragment
from agents.runtime.events import LlmRequestFinished, LlmRequestStarted
from agents.runtime.pricing import Usage
from agents.turns.lifecycle import TurnOutcome, trace_claim, trace_close
from agents.turns.services import turn_start
from agents.turns.turn_threads import TurnDb
from tests.members import member_of
from traces.costs.rollups import estimated_calls_backfill, rollups_rebuild
from traces.models import ConversationCostRollup, CostRollup, Step, Trace
from traces.record import live
from traces.record.recorder import TraceRecorder

from .cost_helpers import ledger_rows

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def turn_db():
    db = TurnDb("test-db")
    yield db
    db.close()


def request(iteration: int, *, success: bool = True, estimated: bool = False, tokens=(700, 50),
            stop_reason: str | None = "stop") -> list:
    return [
        LlmRequestStarted(iteration=iteration, provider="demo", model="demo", messages_count=1),
        LlmRequestFinished(iteration=iteration, provider="demo", model="demo", success=success,
                           usage=Usage(input_tokens=tokens[0], output_tokens=tokens[1]),
                           usage_estimated=estimated, stop_reason=stop_reason if success else None,
                           error=None if success else "The connection was cut mid-answer."),
    ]


@pytest.fixture
def estimated_trace(conversation, alice, sent_turns, turn_db) -> Trace:
    """A finished trace of three model requests: one whose server reported no usage, one
    reported, one cut off mid-stream (both estimated ones flagged by the runtime)."""
    trace = trace_claim(trace_id=turn_start(conversation=conversation, membership=member_of(alice, conversation), text="hi").pk,
                        worker="test")

    async def go() -> None:
        recorder = TraceRecorder(trace=trace, attempt=trace.attempts, db=turn_db)
        await recorder.start()
        for event in [*request(1, estimated=True), *request(2, tokens=(900, 10)),
                      *request(3, success=False, estimated=True, tokens=(1000, 20))]:
            await recorder.emit(event)
        await recorder.flush()

    asyncio.run(go())
    trace_close(trace_id=trace.pk, attempt=trace.attempts,
                outcome=TurnOutcome(status="failed", error="The connection was cut mid-answer."))
    return Trace.objects.get(pk=trace.pk)


def test_the_trace_and_the_ledger_count_the_estimated_requests(estimated_trace):
    trace = estimated_trace
    first, second, cut = Step.objects.filter(trace=trace, kind="llm_request").order_by("seq")
    assert first.meta["usage_estimated"] is True and "usage_estimated" not in second.meta
    assert cut.meta["usage_estimated"] is True and cut.status == "error"
    assert trace.estimated_calls == 2 and trace.total_tokens == 700 + 50 + 900 + 10 + 1000 + 20
    row = CostRollup.objects.get(team=trace.team)
    assert (row.calls, row.estimated_calls) == (3, 2)
    assert ConversationCostRollup.objects.get(team=trace.team).estimated_calls == 2
    # the ledger rebuilt from the steps says the same
    before = ledger_rows()
    rollups_rebuild(team_id=trace.team_id)
    assert ledger_rows() == before


def test_the_migration_backfill_counts_the_steps_already_flagged(estimated_trace):
    Trace.objects.update(estimated_calls=0)
    CostRollup.objects.update(estimated_calls=0)
    ConversationCostRollup.objects.update(estimated_calls=0)
    estimated_calls_backfill(models=(Trace, Step, CostRollup, ConversationCostRollup))
    assert Trace.objects.get(pk=estimated_trace.pk).estimated_calls == 2
    assert list(CostRollup.objects.values_list("calls", "estimated_calls")) == [(3, 2)]
    assert list(ConversationCostRollup.objects.values_list("estimated_calls", flat=True)) == [2]


def test_the_trace_page_flags_each_estimated_step_and_the_trace(estimated_trace, client_for, alice, charlie):
    trace = estimated_trace
    c = client_for(alice)
    page = c.get(reverse("trace_detail", args=[trace.uuid])).content.decode()
    assert '<span class="flag estimated">2 estimated</span>' in page
    assert "Includes 2 model requests with estimated tokens" in page
    first, second, cut = Step.objects.filter(trace=trace, kind="llm_request").order_by("seq")
    row = page[page.index(f'id="step-{first.seq}"'):page.index(f'id="step-{second.seq}"')]
    assert 'title="Tokens estimated: the server reported no usage">≈ 700 → 50' in row
    row = page[page.index(f'id="step-{second.seq}"'):page.index(f'id="step-{cut.seq}"')]
    assert "estimated" not in row and "≈" not in row
    row = page[page.index(f'id="step-{cut.seq}"'):]
    assert 'title="Tokens estimated: the stream was cut off before the provider reported usage">≈ 1k → 20' in row

    detail = c.get(reverse("step_detail", args=[trace.uuid, first.seq])).content.decode()
    assert "≈ input 700" in detail and "Tokens estimated: the server reported no usage" in detail
    listing = c.get(reverse("traces")).content.decode()
    assert "≈ 2.7k" in listing and '<span class="flag estimated">estimated</span>' in listing

    exported = json.loads(b"".join(c.get(reverse("trace_export", args=[trace.uuid])).streaming_content))
    assert exported["usage_estimated_requests"] == 2
    assert [s["meta"].get("usage_estimated", False) for s in exported["steps"]][:3] == [True, False, True]

    assert client_for(charlie).get(reverse("trace_detail", args=[trace.uuid])).status_code == 404


def test_the_costs_page_says_how_many_requests_have_estimated_tokens(estimated_trace, client_for, alice, charlie):
    page = client_for(alice).get(reverse("costs")).content.decode()
    assert "includes 2 requests with estimated tokens" in page
    assert '<span class="flag estimated">2 estimated</span>' in page  # the break-down rows
    assert "≈ 2.7k" in page
    # charlie's team has no such requests
    assert "estimated tokens" not in client_for(charlie).get(reverse("costs")).content.decode()


def test_live_totals_and_the_chats_step_fragment_carry_the_flag(estimated_trace):
    assert live.trace_totals(estimated_trace)["estimated_calls"] == 2
    first, second, _ = Step.objects.filter(trace=estimated_trace, kind="llm_request").order_by("seq")
    first.trace = second.trace = estimated_trace
    assert step_fragment(first)["estimated"] is True and step_fragment(second)["estimated"] is False


def test_the_outcome_of_each_answer_is_recorded_on_its_step(conversation, alice, sent_turns, turn_db):
    trace = trace_claim(trace_id=turn_start(conversation=conversation, membership=member_of(alice, conversation), text="hi").pk,
                        worker="test")

    async def go() -> TraceRecorder:
        recorder = TraceRecorder(trace=trace, attempt=trace.attempts, db=turn_db)
        await recorder.start()
        for event in [*request(1, stop_reason="tool_calls"), *request(2, stop_reason="max_tokens"),
                      *request(3, success=False)]:
            await recorder.emit(event)
        return recorder

    recorder = asyncio.run(go())
    metas = [s.meta for s in Step.objects.filter(trace=trace).order_by("seq")]
    assert [m.get("outcome") for m in metas] == ["tool_use", "length", None]
    assert recorder.last_outcome == "length"  # a failed request does not change it
