"""A trace as plain JSON: the skeleton with every payload (for download and offline analysis)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ..debug.audit import trace_audit
from ..json_values import iso as _iso
from ..json_values import usd
from ..models import Step, Trace


def trace_record(trace: Trace) -> dict[str, Any]:
    return {
        "format": "agentsite.trace/1",
        "uuid": str(trace.uuid),
        "status": trace.status,
        "agent": trace.agent.name if trace.agent_id else None,
        "agent_version": trace.agent_version,
        "conversation": str(trace.conversation.uuid),
        "user": trace.user.get_username() if trace.user_id else None,
        "user_message": trace.user_message.text if trace.user_message_id else None,
        "answer": trace.answer,
        "routing": trace.routing,
        "provider": trace.provider_name,
        "model": trace.model,
        "usage": trace.usage_dict(),
        # model requests whose usage is the runtime's estimate (each step's meta says which)
        "usage_estimated_requests": trace.estimated_calls,
        "cost_usd": usd(trace.cost_usd),
        "duration_ms": trace.duration_ms,
        "iterations": trace.iterations,
        "created_at": _iso(trace.created_at),
        "started_at": _iso(trace.started_at),
        "finished_at": _iso(trace.finished_at),
        "error": trace.error,
        "error_kind": trace.error_kind,
    }


def _payload_value(content: str, content_type: str) -> Any:
    if content_type == "application/json":
        try:
            return json.loads(content)
        except ValueError:
            return content
    return content


def step_record(step: Step) -> dict[str, Any]:
    return {
        "seq": step.seq,
        "kind": step.kind,
        "name": step.name,
        "iteration": step.iteration,
        "status": step.status,
        "success": step.success,
        "started_at": _iso(step.started_at),
        "offset_ms": step.offset_ms,
        "duration_ms": step.duration_ms,
        "provider": step.provider,
        "model": step.model,
        "call_id": step.call_id,
        "usage": step.usage_dict(),
        "cost_usd": usd(step.cost_usd),
        "error": step.error,
        "meta": step.meta,
        "payloads": {p.kind: _payload_value(p.content, p.content_type) for p in step.payloads.all()},
    }


def trace_export_chunks(trace: Trace) -> Iterator[str]:
    """The whole trace as one JSON document, in pieces (a step at a time, so a trace of any
    size streams in bounded memory): its record, its steps with their payloads, its trajectory
    states. The inspector's download and the API's export."""
    head = json.dumps(trace_record(trace), ensure_ascii=False)
    yield head[:-1] + ', "steps": ['
    steps = trace.steps.order_by("seq").prefetch_related("payloads").iterator(chunk_size=500)
    for index, step in enumerate(steps):
        yield ("," if index else "") + json.dumps(step_record(step), ensure_ascii=False)
    states = [{"iteration": s.iteration, "fields": s.fields, "changed": s.changed}
              for s in trace.trajectory_states.order_by("iteration")]
    yield '], "trajectory_states": ' + json.dumps(states, ensure_ascii=False)
    # What a stop cut (null unless the turn was cancelled, timed out or interrupted).
    yield ', "audit": ' + json.dumps(trace_audit(trace), ensure_ascii=False) + "}"
