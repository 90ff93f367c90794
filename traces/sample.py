"""Generated traces of any size, for benchmarks and page tests (not a stand-in for real runs:
every row is a valid trace row, written through the ORM in bulk)."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from .models import Step, StepPayload, Trace, TrajectoryState


@transaction.atomic
def make_sample_trace(*, conversation, user, steps: int, payload_chars: int = 2_000) -> Trace:
    """A completed trace of ``steps`` steps: alternating model requests and tool calls, with a
    request/response or arguments/output payload each and a trajectory state per iteration."""
    started = timezone.now() - timedelta(seconds=steps)
    question = conversation.messages.create( role="user", text="Generated question", blocks=[{"type": "text", "text": "Generated question"}], author=user)
    trace = Trace.objects.create(
        team=conversation.team, conversation=conversation, agent=conversation.agent, user=user, user_message=question,
        status=Trace.Status.COMPLETED, model="demo", provider_name="Demo", provider_kind="demo",
        started_at=started, finished_at=started + timedelta(milliseconds=steps * 40), duration_ms=steps * 40,
        iterations=steps // 2, step_count=steps, event_seq=steps + steps // 2,
        input_tokens=steps * 120, output_tokens=steps * 30, cost_usd=Decimal("0.01") * steps,
        answer="Generated answer",
    )
    filler = "x" * payload_chars
    rows = []
    for seq in range(1, steps + 1):
        llm = seq % 2 == 1
        rows.append(Step(
            trace=trace, seq=seq, kind=Step.Kind.LLM_REQUEST if llm else Step.Kind.TOOL_CALL,
            name="demo" if llm else "calculator", iteration=(seq + 1) // 2, status=Step.Status.OK, success=True,
            started_at=started + timedelta(milliseconds=seq * 40), offset_ms=seq * 40, duration_ms=35.0,
            model="demo" if llm else "", provider="Demo" if llm else "", call_id="" if llm else f"call_{seq}",
            input_tokens=240 if llm else 0, output_tokens=60 if llm else 0,
            cost_usd=Decimal("0.02") if llm else None, event_seq=seq,
            meta={"tools_available": ["calculator", "current_time"], "tool_calls": [{"name": "calculator"}]} if llm
            else {"output_preview": "84"},
        ))
    Step.objects.bulk_create(rows, batch_size=1000)
    ids = dict(Step.objects.filter(trace=trace).values_list("seq", "id"))
    payloads = []
    for seq, step_id in ids.items():
        kinds = ("request", "response") if seq % 2 == 1 else ("arguments", "output")
        for kind in kinds:
            content = json.dumps({"kind": kind, "seq": seq, "text": filler})
            payloads.append(StepPayload(step_id=step_id, kind=kind, content=content, size=len(content)))
    StepPayload.objects.bulk_create(payloads, batch_size=1000)
    TrajectoryState.objects.bulk_create(
        [TrajectoryState(trace=trace, iteration=i, event_seq=steps + i,
                         fields={"iteration": i, "objective": "Generated question", "evidence": [f"calculator: {i}"],
                                 "uncertainties": [], "failures": [], "next_plan": "Continue.",
                                 "tool_calls": [{"id": f"call_{i}", "name": "calculator", "arguments": "{}", "success": True}]},
                         changed=["evidence"])
         for i in range(1, steps // 2 + 1)],
        batch_size=1000,
    )
    return trace
