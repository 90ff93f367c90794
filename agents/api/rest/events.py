"""``/api/v1/traces/{id}/events``: a turn as it happens, as server-sent events (scope ``chat``
or ``traces:read``).

Each event is named after its payload: ``delta`` (text the model streamed: ``step``, ``offset``,
``text``), ``step`` (a step was recorded or changed: ``step``, ``status``), ``state`` (a
trajectory state after an iteration) and ``trace`` (the turn's status and running ``totals``),
the same payloads the inspector receives without their HTML; and ``approval`` for each tool call
that waits for a person's approval (``call_id``, ``tool``, ``arguments``, ``waiting_since``,
``expires_at``, ``decide_url``: ``agents.api.rest.approvals``), also when the stream opens on a
turn that waits already. The stream ends with ``end``,
carrying the turn's final status, answer, error, usage and cost; or with ``timeout`` when the
turn outlasts the agent's hard time limit and the wait for a worker. A finished turn answers
with its ``end`` at once. Comment lines keep a quiet connection open."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import Any

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from ninja import Router

from agents.api.auth import caller_of, scope_check
from agents.api.errors import errors
from agents.api.rest.traces import trace_for, usage_out
from agents.api.turn_stream import TurnTimeout, trace_events, with_keepalive
from agentsite.db import db_async
from agentsite.models import ApiKey
from traces.json_values import usd
from traces.models import Trace

router = Router(tags=["traces"])
Scope = ApiKey.Scope
# Beyond the agent's hard time limit: time for the queue and a worker's start.
WAIT_MARGIN_S = 60
# A trace without an agent any more: the longest a turn may run.
NO_AGENT_LIMIT_S = 3600 + 30
HEAVY = frozenset({"html"})


def sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'), default=str)}\n\n".encode()


def end_payload(trace: Trace) -> dict[str, Any]:
    return {"event": "end", "trace": str(trace.uuid), "status": trace.status,
            "answer": trace.answer if trace.status == Trace.Status.COMPLETED else None,
            "error": trace.error, "error_kind": trace.error_kind, "usage": usage_out(trace),
            "cost_usd": usd(trace.cost_usd), "duration_ms": trace.duration_ms, "iterations": trace.iterations}


async def event_stream(trace: Trace, *, timeout_s: float,
                       absolute: Callable[[str], str] = str) -> AsyncIterator[bytes]:
    """The trace's live payloads as SSE frames, lightened, until its ``end``; ``absolute``
    makes a path a URL (an approval's ``decide_url``)."""
    try:
        async with aclosing(with_keepalive(trace_events(trace, timeout_s=timeout_s))) as stream:
            async for payload in stream:
                if payload is None:
                    yield b": waiting\n\n"
                elif payload.get("event") == "end":
                    yield sse("end", end_payload(payload["trace"]))
                    return
                elif payload.get("event") == "approval":
                    path = payload.get("decide_url")
                    yield sse("approval", {**payload, "decide_url": absolute(path) if path else None})
                else:
                    light = {k: v for k, v in payload.items() if k not in HEAVY}
                    yield sse(str(light.get("event") or "message"), light)
    except TurnTimeout as exc:
        yield sse("timeout", {"event": "timeout", "trace": str(trace.uuid), "message": str(exc)})


def _trace(request: HttpRequest, trace_id: str) -> tuple[Trace, float]:
    caller = caller_of(request)
    if not caller.key.has_scope(Scope.TRACES):
        scope_check(request, Scope.CHAT)
    trace = trace_for(request.membership, trace_id)
    limit = trace.agent.hard_time_limit_s if trace.agent else NO_AGENT_LIMIT_S
    return trace, limit + WAIT_MARGIN_S


@router.get("/{trace_id}/events", response={200: None, **errors(404)}, summary="Follow a turn live",
            url_name="rest_trace_events",
            openapi_extra={"responses": {200: {
                "description": "Server-sent events (`event: delta|step|state|trace|approval`, then "
                               "`end` or `timeout`; each `data:` is a JSON object).",
                "content": {"text/event-stream": {"schema": {"type": "string"}}}}}})
async def trace_events_api(request: HttpRequest, trace_id: str) -> HttpResponse:
    """A turn's live events until it ends. Scope `chat` or `traces:read`."""
    trace, timeout_s = await db_async(_trace)(request, trace_id)
    response = StreamingHttpResponse(
        event_stream(trace, timeout_s=timeout_s, absolute=request.build_absolute_uri),
        content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response
