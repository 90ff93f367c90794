"""A turn's W3C trace context, as its tool calls send it on (``agents.runtime.tracecontext``):
each call's ``traceparent`` names the span its step is exported as (``traces.export.ids``), in
the caller's trace when the turn came with one (``Trace.meta["traceparent"]``), else in the
turn's own; the caller's ``tracestate`` goes with it unchanged."""

from __future__ import annotations

from collections.abc import Callable

from traces.export.ids import parse_traceparent, tool_traceparent
from traces.models import Trace


def turn_traceparent_for(trace: Trace, *, sampled: bool = True) -> Callable[[int, str], str]:
    """(iteration, call id) -> the ``traceparent`` of that tool call of ``trace``: the span
    its step is exported as, in the trace of the caller's ``traceparent`` when the turn was
    sent with one (``meta["traceparent"]``), else in the trace's own. ``sampled``: the flag
    it carries, whether the turn's spans are exported."""
    trace_uuid = trace.uuid
    parent = parse_traceparent((trace.meta or {}).get("traceparent"))

    def traceparent_for(iteration: int, call_id: str) -> str:
        return tool_traceparent(trace_uuid, parent, iteration, call_id, sampled=sampled)

    return traceparent_for


def turn_tracestate(trace: Trace) -> str:
    """The caller's ``tracestate``, sent on with each call's ``traceparent``: only with the
    caller's own ``traceparent`` (a turn in its own trace has no vendor state to carry)."""
    meta = trace.meta or {}
    return str(meta.get("tracestate") or "") if parse_traceparent(meta.get("traceparent")) else ""
