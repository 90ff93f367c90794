"""A turn's stored record, read for its spans (``spans`` builds them): its finished steps with
their payloads, a model request's retries (events of its span, or spans of their own when
recorded after it ended) and, with content on, every message the request sent; the steps a turn
left open, ended with it; the turn's own span with its states and events. The live export
(``pipeline``) and the backfill (``turn_spans``) read it the same way."""

from __future__ import annotations

import json
from typing import Any

from django.utils import timezone
from opentelemetry.sdk.trace import ReadableSpan

from ..models import Step, StepPayload, Trace, TrajectoryState
from ..record.request_history import conversation_of
from .config import ExportConfig
from .spans import Turn, root_span, step_end, step_key, step_spans

OPEN = (Step.Status.RUNNING, Step.Status.WAITING)
DONE = (Step.Status.OK, Step.Status.ERROR)
EVENT_KINDS = (Step.Kind.RESUME, Step.Kind.ERROR)


def payload_value(row: StepPayload) -> Any:
    if row.content_type == "application/json":
        try:
            return json.loads(row.content)
        except ValueError:
            return row.content
    return row.content


def retry_request_seq(step: Step) -> int | None:
    """The model request a retry or restart step belongs to (from its recorder key)."""
    meta = step.meta or {}
    if meta.get("restarted_step"):
        return int(meta["restarted_step"])
    kind, _, rest = step_key(step).partition(":")
    number = rest.split(":", 1)[0]
    return int(number) if kind == "retry" and number.isdigit() and int(number) else None


def trace_for_export(trace_id: int) -> Trace | None:
    return (Trace.objects.select_related("agent", "conversation", "team", "api_key")
            .filter(pk=trace_id).first())


def _payloads(step: Step) -> dict[str, Any]:
    return {p.kind: payload_value(p) for p in step.payloads.all()
            if p.kind != StepPayload.Kind.PARTIAL}


def _is_event_of(retry: Step, request: Step | None) -> bool:
    """A retry recorded while its model request was open is an event of that request's span;
    one recorded after it ended is a span of its own (same rule for live and backfill)."""
    return request is not None and (request.status in OPEN or retry.started_at <= step_end(request))


def _request_payloads(trace: Trace, up_to_seq: int) -> list[dict[str, Any]]:
    rows = (StepPayload.objects.filter(step__trace=trace, step__kind=Step.Kind.LLM_REQUEST,
                                       step__seq__lte=up_to_seq, kind=StepPayload.Kind.REQUEST)
            .order_by("step__seq"))
    return [v for v in (payload_value(r) for r in rows) if isinstance(v, dict)]


class Record:
    """The stored record of one turn, read for its spans: what several steps of the turn need
    (its retries) is read once."""

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.trace = turn.trace
        self._retries: list[Step] | None = None

    def retries(self) -> list[Step]:
        if self._retries is None:
            self._retries = list(Step.objects.filter(trace=self.trace, kind=Step.Kind.RETRY))
        return self._retries

    def steps(self, **filters: Any) -> list[Step]:
        return list(Step.objects.filter(trace=self.trace, **filters).select_related("price")
                    .prefetch_related("payloads").order_by("seq"))

    def spans_of(self, step: Step) -> list[ReadableSpan]:
        """The spans of one finished step."""
        turn = self.turn
        payloads = _payloads(step)
        if step.kind == Step.Kind.LLM_REQUEST:
            retries = [r for r in self.retries()
                       if retry_request_seq(r) == step.seq and _is_event_of(r, step)]
            history = specs = None
            if turn.policy.on:
                request = payloads.get(StepPayload.Kind.REQUEST) or {}
                names = request.get("tools") if isinstance(request, dict) else None
                history, specs = conversation_of(_request_payloads(self.trace, step.seq), names)
            return step_spans(turn, step, payloads=payloads, retries=retries, history=history,
                              tool_specs=specs)
        if step.kind == Step.Kind.RETRY:
            request_seq = retry_request_seq(step)
            request = (Step.objects.filter(trace=self.trace, seq=request_seq).first()
                       if request_seq else None)
            if _is_event_of(step, request):
                return []
            key = (request.meta or {}).get("key") if request is not None else None
            return step_spans(turn, step, payloads=payloads, request_key=key)
        return step_spans(turn, step, payloads=payloads)

    def end_spans(self) -> list[ReadableSpan]:
        """The turn's own span, and the spans of steps it left open."""
        trace = self.trace
        spans: list[ReadableSpan] = []
        for step in self.steps(status__in=OPEN):
            spans.extend(self.spans_of(cut_off(step, trace)))
        states = TrajectoryState.objects.filter(trace=trace).order_by("iteration")
        events = Step.objects.filter(trace=trace, kind__in=EVENT_KINDS).order_by("seq")
        spans.append(root_span(self.turn, states=states, steps=events))
        return spans


def cut_off(step: Step, trace: Trace) -> Step:
    """A step the turn left open (stopped, timed out, its worker gone), or closed by the turn's
    end without a duration (``steps_interrupt``): it ends with the turn."""
    end = trace.finished_at or timezone.now()
    step.duration_ms = max((end - step.started_at).total_seconds() * 1000, 0)
    step.status = Step.Status.ERROR
    step.error = step.error or f"The turn ended ({trace.status}) before this step finished."
    return step


def turn_spans(trace: Trace, config: ExportConfig) -> list[ReadableSpan]:
    """Every span of an ended turn (the backfill)."""
    record = Record(Turn(trace, config))
    spans: list[ReadableSpan] = []
    for step in record.steps(status__in=DONE):
        spans.extend(record.spans_of(step))
    return spans + record.end_spans()
