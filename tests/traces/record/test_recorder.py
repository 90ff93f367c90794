"""The recorder: events become steps once, deltas are coalesced, payloads are scrubbed, and an
attempt that lost its trace writes nothing."""

from __future__ import annotations

import asyncio
import json

import pytest

from agents.runtime.builtin import builtin_tools
from agents.runtime.events import (
    LlmRequestFinished,
    LlmRequestStarted,
    LlmStreamRestarted,
    RecordingObserver,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnError,
)
from agents.runtime.loop import TurnConfig, run_turn
from agents.runtime.pricing import Usage
from agents.runtime.providers.demo import DemoProvider
from agents.turns.lifecycle import trace_claim
from agents.turns.services import turn_start
from agents.turns.turn_threads import TurnDb
from tests.helpers import listen, receive_all
from tests.members import member_of
from traces.models import Step, StepPayload, Trace, TrajectoryState
from traces.record.recorder import TraceRecorder

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def claimed(conversation, alice, sent_turns):
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="call the current_time tool 2 times")
    return trace_claim(trace_id=trace.pk, worker="test")


@pytest.fixture
def turn_db():
    db = TurnDb("test-db")
    yield db
    db.close()


def record(trace: Trace, db: TurnDb, events, **options) -> TraceRecorder:
    async def go() -> TraceRecorder:
        recorder = TraceRecorder(trace=trace, attempt=trace.attempts, db=db, **options)
        await recorder.start()
        for event in events:
            await recorder.emit(event)
        await recorder.flush()
        return recorder

    return asyncio.run(go())


def demo_events() -> list:
    observer = RecordingObserver()
    asyncio.run(run_turn(provider=DemoProvider(), config=TurnConfig(model="demo"), history=[],
                         user_message="call the current_time tool 2 times", tools=builtin_tools(),
                         observer=observer))
    return observer.events


def snapshot(trace: Trace) -> tuple:
    return (list(Step.objects.filter(trace=trace).order_by("seq").values_list(
                "seq", "kind", "status", "event_seq", "output_tokens", "meta")),
            list(TrajectoryState.objects.filter(trace=trace).values_list("iteration", "event_seq")),
            Trace.objects.get(pk=trace.pk).event_seq)


def test_a_second_attempt_adds_its_model_requests_beside_the_first_and_merges_its_tool_calls(
        claimed, turn_db):
    events = demo_events()
    record(claimed, turn_db, events)
    first = snapshot(claimed)
    assert [kind for _, kind, *_ in first[0]] == ["llm_request", "tool_call", "llm_request", "tool_call", "llm_request"]
    assert len(first[1]) == 2

    # a resumed attempt: the model is asked again (new steps, numbered on), a tool call with a
    # recorded id lands on its own row, and an unchanged trajectory state is not rewritten
    record(claimed, turn_db, events)

    keys = [s.meta["key"] for s in Step.objects.filter(trace=claimed).order_by("seq")]
    assert keys[:5] == [s[5]["key"] for s in first[0]]
    assert [k for k in keys[5:]] == ["llm:1:2", "llm:2:2", "llm:3:2"]
    assert sum(1 for k in keys if k.startswith("tool:")) == 2
    assert snapshot(claimed)[1] == first[1]


def test_one_recorder_given_an_event_twice_writes_it_once(claimed, turn_db):
    started = ToolStarted(iteration=1, call_id="call_1", name="calculator", arguments={"expression": "1+1"})
    finished = ToolFinished(iteration=1, call_id="call_1", name="calculator",
                            arguments={"expression": "1+1"}, success=True, output="2", duration_ms=1.5)
    record(claimed, turn_db, [started, finished, started, finished])

    step = Step.objects.get(trace=claimed)
    assert (step.seq, step.status, step.event_seq) == (1, "ok", 3)  # claim, start, finish
    assert Trace.objects.get(pk=claimed.pk).event_seq == 3


def test_payloads_are_scrubbed_and_sized(claimed, turn_db):
    secret = "password=hunter2hunter2"
    record(claimed, turn_db, [
        ToolStarted(iteration=1, call_id="c1", name="calculator", arguments={"note": secret}),
        ToolFinished(iteration=1, call_id="c1", name="calculator", arguments={}, success=True,
                     output=f"done, {secret}", output_preview=f"done, {secret}"),
    ])
    payloads = {p.kind: p for p in StepPayload.objects.filter(step__trace=claimed)}
    assert set(payloads) == {"arguments", "output"}
    for payload in payloads.values():
        assert "hunter2hunter2" not in payload.content and "[REDACTED]" in payload.content
        assert payload.size == len(payload.content.encode())
    assert json.loads(payloads["arguments"].content) == {"note": "password=[REDACTED]"}
    assert payloads["output"].content_type == "text/plain"
    assert "hunter2hunter2" not in json.dumps(Step.objects.get(trace=claimed).meta)


def test_deltas_are_coalesced_into_frames_and_the_first_goes_at_once(claimed, turn_db):
    channel = listen(claimed.group_name)
    sent: list[dict] = []

    async def go() -> None:
        recorder = TraceRecorder(trace=claimed, attempt=claimed.attempts, db=turn_db)
        await recorder.emit(LlmRequestStarted(iteration=1, provider="demo", model="demo", messages_count=1))
        await recorder.emit(TextDelta(iteration=1, text="Hel"))
        sent.extend(await receive_all(channel, quiet=0.01))  # the first piece is out before any other arrives
        for piece in ["lo", ", ", "wor", "ld"]:
            await recorder.emit(TextDelta(iteration=1, text=piece))
        await asyncio.sleep(0.08)  # one frame later, the rest goes as one
        await recorder.emit(TextDelta(iteration=1, text="!"))
        await recorder.emit(LlmRequestFinished(iteration=1, provider="demo", model="demo", success=True))
        sent.extend(await receive_all(channel, quiet=0.01))

    asyncio.run(go())
    deltas = [e for e in sent if e["event"] == "delta"]
    assert [(d["index"], d["text"]) for d in deltas] == [(0, "Hel"), (1, "lo, world"), (2, "!")]
    assert all(d["step"] == 1 for d in deltas)
    assert sent[-1]["event"] == "step" and sent[-1]["status"] == "ok"  # deltas go before the step ends


def test_an_attempt_that_lost_its_trace_writes_nothing_more(claimed, turn_db):
    lost = []
    Trace.objects.filter(pk=claimed.pk).update(status="interrupted")  # the reaper took it

    recorder = record(claimed, turn_db, [
        ToolStarted(iteration=1, call_id="c1", name="calculator", arguments={}),
        ToolStarted(iteration=1, call_id="c2", name="calculator", arguments={}),
    ], on_lost=lambda: lost.append(True))

    assert recorder.lost and lost == [True]
    assert not Step.objects.filter(trace=claimed).exists()


def test_a_detached_recorder_writes_nothing_more_and_reports_no_loss(claimed, turn_db):
    """A turn handed back (its worker is stopping): what the cancellation causes is not kept."""
    lost = []

    async def go() -> None:
        recorder = TraceRecorder(trace=claimed, attempt=claimed.attempts, db=turn_db,
                                 on_lost=lambda: lost.append(True))
        await recorder.start()
        await recorder.emit(ToolStarted(iteration=1, call_id="c1", name="calculator", arguments={}))
        recorder.detach()
        await recorder.emit(ToolFinished(iteration=1, call_id="c1", name="calculator", arguments={},
                                         success=False, output="Cancelled.", error="cancelled"))
        await recorder.emit(ToolStarted(iteration=1, call_id="c2", name="calculator", arguments={}))
        recorder.lose()

    asyncio.run(go())
    assert lost == []
    assert list(Step.objects.filter(trace=claimed).values_list("call_id", "status")) == [("c1", "running")]


def test_a_cut_off_stream_is_recorded_with_its_estimated_tokens_and_flagged(claimed, turn_db):
    estimated = Usage(input_tokens=700, output_tokens=12)
    record(claimed, turn_db, [
        LlmRequestStarted(iteration=1, provider="demo", model="demo", messages_count=1),
        LlmRequestFinished(iteration=1, provider="demo", model="demo", success=False, error="cancelled",
                           usage=estimated, usage_estimated=True),
        LlmRequestStarted(iteration=2, provider="demo", model="demo", messages_count=1),
        LlmRequestFinished(iteration=2, provider="demo", model="demo", success=False, error="503"),
    ])
    cut, failed = Step.objects.filter(trace=claimed, kind="llm_request").order_by("seq")
    assert (cut.input_tokens, cut.output_tokens, cut.success) == (700, 12, False)
    assert cut.meta["usage_estimated"] is True
    assert failed.total_tokens == 0 and "usage_estimated" not in failed.meta


def test_a_restarted_answer_is_a_retry_step_with_the_void_text_and_is_announced(claimed, turn_db):
    channel = listen(claimed.group_name)
    sent: list[dict] = []
    reason = "The answer from “primary” broke off (connection failed) and starts over on “backup”."

    async def go() -> None:
        recorder = TraceRecorder(trace=claimed, attempt=claimed.attempts, db=turn_db)
        await recorder.start()
        for event in [
            LlmRequestStarted(iteration=1, provider="primary", model="m1", messages_count=1),
            TextDelta(iteration=1, text="Half an "),
            LlmStreamRestarted(iteration=1, reason=reason, partial_text="Half an ",
                               provider="primary", model="m1", next_provider="backup",
                               next_model="m2"),
            TextDelta(iteration=1, text="The whole answer."),
            LlmRequestFinished(iteration=1, provider="primary", model="m2", success=True),
        ]:
            await recorder.emit(event)
        await recorder.flush()
        sent.extend(await receive_all(channel, quiet=0.05))

    asyncio.run(go())

    llm, restart = Step.objects.filter(trace=claimed).order_by("seq")
    assert (restart.kind, restart.status, restart.error) == ("retry", "error", reason)
    assert restart.meta["restart"] is True and restart.meta["restarted_step"] == llm.seq
    assert (restart.meta["next_provider"], restart.meta["failover"]) == ("backup", True)
    assert StepPayload.objects.get(step=restart, kind="output").content == "Half an "
    assert llm.provider == "backup"  # the fallback answered and is priced
    # Live: the void text goes out first, then the restart that voids it, then the new text.
    order = [(p["event"], p.get("text") or p.get("restarted_step")) for p in sent
             if p["event"] == "delta" or p.get("restarted_step")]
    assert order == [("delta", "Half an "), ("step", llm.seq), ("delta", "The whole answer.")]
    notice = next(p for p in sent if p.get("restarted_step"))
    assert notice["notice"] == reason


def test_a_provider_errors_details_are_in_the_trace_not_in_its_message(claimed, turn_db):
    details = "provider=primary model=m1 attempt 1/3: retryable; error=Could not connect"
    record(claimed, turn_db, [TurnError(message="The model provider “primary” could not be "
                                                "reached. Try again in a minute.",
                                        error_kind="provider", details=details)])

    step = Step.objects.get(trace=claimed, kind="error")
    assert "attempt" not in step.error
    assert StepPayload.objects.get(step=step, kind="output").content == details
