"""``/api/v1/traces``: the record of every turn, as the inspector shows it (scope
``traces:read``). Who sees which trace is the inspector's rule (``traces.record.selectors``): a
team's owners and admins see all of its traces, others those of their own and of shared
conversations; any other trace is a 404.

A trace's reads carry an ``ETag`` made of its id and its event number, which grows with every
change the turn records: ``If-None-Match`` answers 304 while nothing changed."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.urls import reverse
from ninja import Field, Query, Router, Schema

from agents.api.auth import scope_check
from agents.api.errors import ApiError, errors
from agents.api.rest import compare as rest_compare
from agents.api.rest.common import AgentRef, agent_ref, etag_for, is_uuid, not_modified, with_etag
from agents.api.rest.pagination import PageParams, paginate
from agents.models import Agent
from agentsite.access import get_for_team_or_404
from agentsite.models import ApiKey, Membership
from traces.debug.audit import trace_audit
from traces.export.records import step_record, trace_export_chunks
from traces.json_values import usd
from traces.models import Step, StepPayload, Trace
from traces.record.selectors import (
    FEEDBACK_FILTERS,
    LIST_COLUMNS,
    STEP_COLUMNS,
    TraceFilters,
    trace_get_or_404,
    trace_list,
)

router = Router(tags=["traces"])
Scope = ApiKey.Scope
# A trace as lists show it: the inspector's columns, and what names its conversation and agent.
TRACE_COLUMNS = (*LIST_COLUMNS, "event_seq", "error_kind", "agent__name", "agent__uuid", "agent__slug",
                 "user__username", "user_message__text", "conversation__uuid")


class TokenUsage(Schema):
    input_tokens: int
    output_tokens: int
    cache_write_tokens: int
    cache_read_tokens: int
    reasoning_tokens: int = Field(description="The part of the output tokens spent on reasoning.")
    total_tokens: int


class TraceOut(Schema):
    id: str
    status: str = Field(description=f"One of: {', '.join(Trace.Status.values)}.")
    conversation: str
    agent: AgentRef
    user: str | None = Field(description="The username of the person the turn ran for.")
    message: str | None = Field(description="The user message the turn answers.")
    answer: str
    model: str
    provider: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    duration_ms: int | None
    iterations: int
    step_count: int
    usage: TokenUsage
    cost_usd: str = Field(description="A decimal string, in US dollars.")
    unpriced_calls: int = Field(description="Model requests without a price (counted as $0).")
    estimated_calls: int = Field(description="Model requests whose tokens are an estimate.")
    error: str
    error_kind: str


class TracePage(Schema):
    data: list[TraceOut]
    next_cursor: str | None


class StepOut(Schema):
    seq: int
    kind: str
    name: str
    iteration: int
    status: str
    success: bool | None
    started_at: datetime
    offset_ms: int = Field(description="Milliseconds from the trace's start.")
    duration_ms: float | None
    provider: str
    model: str
    call_id: str
    error: str
    usage: TokenUsage
    cost_usd: str | None
    price_match: str
    meta: dict[str, Any]


class StateOut(Schema):
    iteration: int
    fields: dict[str, Any]
    changed: list[str]


class TraceDetailOut(TraceOut):
    routing: dict[str, Any]
    inspector_url: str
    steps: list[StepOut]
    trajectory_states: list[StateOut]
    audit: dict[str, Any] | None = Field(
        description="For a cancelled, timed-out or interrupted turn, what the stop cut: the model "
                    "request in flight, tools abandoned, finished after the stop or never started, "
                    "approvals withdrawn, synthetic results, and whether anything ran after the stop "
                    "(with the evidence). Null for other statuses.")


class StepPayloadsOut(Schema):
    trace: str
    seq: int
    kind: str
    name: str
    payloads: dict[str, Any] = Field(description="By kind (request, response, arguments, output, message, "
                                                 "partial): JSON payloads parsed, others as text.")


class TraceQuery(PageParams):
    agent: str | None = Field(None, description="An agent's id or slug.")
    status: str | None = Field(None, description=f"One of: {', '.join(Trace.Status.values)}.")
    user: str | None = Field(None, description="A username.")
    model: str | None = None
    date_from: date | None = Field(None, description="Traces started on or after this day.")
    date_to: date | None = Field(None, description="Traces started on or before this day.")
    min_cost: str | None = Field(None, description="Only traces that cost at least this many dollars.")
    feedback: str | None = Field(None, description=f"One of: {', '.join(FEEDBACK_FILTERS)}.")
    q: str | None = Field(None, description="Text in the message, the answer or the error.")


def usage_out(row: Any) -> dict[str, int]:
    return {**row.usage_dict(), "total_tokens": row.total_tokens}


def trace_out(trace: Trace) -> dict[str, Any]:
    """A trace loaded with its agent, user, user message and conversation."""
    return {
        "id": str(trace.uuid), "status": trace.status, "conversation": str(trace.conversation.uuid),
        "agent": agent_ref(trace.agent), "user": trace.user.get_username() if trace.user else None,
        "message": trace.user_message.text if trace.user_message else None, "answer": trace.answer,
        "model": trace.model, "provider": trace.provider_name, "created_at": trace.created_at,
        "started_at": trace.started_at, "finished_at": trace.finished_at, "duration_ms": trace.duration_ms,
        "iterations": trace.iterations, "step_count": trace.step_count, "usage": usage_out(trace),
        "cost_usd": usd(trace.cost_usd), "unpriced_calls": trace.unpriced_calls,
        "estimated_calls": trace.estimated_calls, "error": trace.error, "error_kind": trace.error_kind,
    }


def step_out(step: Step) -> dict[str, Any]:
    return {
        "seq": step.seq, "kind": step.kind, "name": step.name, "iteration": step.iteration,
        "status": step.status, "success": step.success, "started_at": step.started_at,
        "offset_ms": step.offset_ms, "duration_ms": step.duration_ms, "provider": step.provider,
        "model": step.model, "call_id": step.call_id, "error": step.error, "usage": usage_out(step),
        "cost_usd": usd(step.cost_usd), "price_match": step.price_match,
        "meta": step.meta if isinstance(step.meta, dict) else {},
    }


def trace_for(membership: Membership, trace_id: str) -> Trace:
    """A trace the key's person may see, by its public id; any other is a 404."""
    return trace_get_or_404(
        membership, Trace.objects.select_related("agent", "conversation", "user", "user_message"),
        uuid=trace_id)


def trace_etag(trace: Trace) -> str:
    return etag_for(trace.uuid.hex, trace.event_seq)


def _filters(request: HttpRequest, query: TraceQuery) -> TraceFilters:
    params = {name: value for name, value in query.dict(exclude={"cursor", "limit"}).items() if value is not None}
    for name in ("date_from", "date_to"):
        if name in params:
            params[name] = params[name].isoformat()
    agent = params.get("agent", "")
    if agent and not is_uuid(agent):
        # An agent's slug stands for its id (an unknown one matches nothing, as on the page).
        found = Agent.objects.filter(team=request.team, slug=agent).values_list("uuid", flat=True).first()
        params["agent"] = str(found) if found else agent
    filters, problems = TraceFilters.from_query(params)
    if problems:
        param, message = next(iter(problems.items()))
        raise ApiError(400, message, param=param, code="invalid_value")
    return filters


@router.get("", response={200: TracePage, **errors(400)}, summary="List traces")
def trace_list_api(request: HttpRequest, query: Query[TraceQuery]) -> dict[str, Any]:
    """The traces the key's person may see, newest first, with the inspector's filters. Scope
    `traces:read`."""
    scope_check(request, Scope.TRACES)
    rows = (trace_list(membership=request.membership, filters=_filters(request, query))
            .select_related("conversation").only(*TRACE_COLUMNS))
    page, next_cursor = paginate(rows, query)
    return {"data": [trace_out(t) for t in page], "next_cursor": next_cursor}


# Before "/{trace_id}", which would take "compare" for an id.
rest_compare.register(router)


@router.get("/{trace_id}", response={200: TraceDetailOut, 304: None, **errors(404)}, summary="Read a trace",
            url_name="rest_trace_detail")
def trace_detail_api(request: HttpRequest, trace_id: str, response: HttpResponse) -> Any:
    """One trace with a summary of each step (no payloads: see `.../steps/{seq}/payload`) and
    its trajectory states. Scope `traces:read`."""
    scope_check(request, Scope.TRACES)
    trace = trace_for(request.membership, trace_id)
    etag = trace_etag(trace)
    unchanged = not_modified(request, etag)
    if unchanged is not None:
        return unchanged
    with_etag(response, etag)
    steps = trace.steps.only(*STEP_COLUMNS).order_by("seq")
    states = trace.trajectory_states.order_by("iteration")
    return {
        **trace_out(trace), "routing": trace.routing if isinstance(trace.routing, dict) else {},
        "inspector_url": request.build_absolute_uri(reverse("trace_detail", args=[trace.uuid])),
        "steps": [step_out(s) for s in steps],
        "trajectory_states": [{"iteration": s.iteration, "fields": s.fields if isinstance(s.fields, dict) else {},
                               "changed": list(s.changed or [])} for s in states],
        "audit": trace_audit(trace),
    }


@router.get("/{trace_id}/steps/{seq}/payload", response={200: StepPayloadsOut, 304: None, **errors(400, 404)},
            summary="Read a step's payloads")
def step_payload_api(request: HttpRequest, trace_id: str, seq: int, response: HttpResponse,
                     kind: str | None = None) -> Any:
    """The full request and response of a model request, or the arguments and output of a tool
    call (``kind``: only that one). Scope `traces:read`."""
    scope_check(request, Scope.TRACES)
    trace = trace_for(request.membership, trace_id)
    if kind is not None and kind not in StepPayload.Kind.values:
        raise ApiError(400, f"Unknown payload kind; the kinds are {', '.join(StepPayload.Kind.values)}.",
                       param="kind", code="invalid_value")
    step = get_for_team_or_404(Step.objects.all(), request.team, field="trace__team", trace=trace, seq=seq)
    # A running model request's streamed text is saved without a new event number: only a
    # finished step's payloads are final.
    final = step.status not in (Step.Status.RUNNING, Step.Status.WAITING)
    etag = etag_for(trace.uuid.hex, trace.event_seq, seq, kind or "all")
    if final:
        unchanged = not_modified(request, etag)
        if unchanged is not None:
            return unchanged
        with_etag(response, etag)
    payloads = step_record(step)["payloads"]
    if kind is not None:
        payloads = {k: v for k, v in payloads.items() if k == kind}
    return {"trace": str(trace.uuid), "seq": step.seq, "kind": step.kind, "name": step.name, "payloads": payloads}


@router.get("/{trace_id}/export", response={200: dict[str, Any], 304: None, **errors(404)},
            summary="Export a trace",
            openapi_extra={"responses": {200: {"description": (
                "The whole trace as the inspector's download gives it (format `agentsite.trace/1`): "
                "its record, every step with its payloads, and its trajectory states.")}}})
def trace_export_api(request: HttpRequest, trace_id: str) -> HttpResponse:
    """The trace as JSON, streamed step by step (with an ETag once the turn has ended). Scope
    `traces:read`."""
    scope_check(request, Scope.TRACES)
    trace = trace_for(request.membership, trace_id)
    response = StreamingHttpResponse(trace_export_chunks(trace), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="trace-{trace.uuid}.json"'
    if trace.is_active:
        # Its streamed text is saved without a new event number: no validator until it ends.
        return response
    etag = trace_etag(trace)
    return not_modified(request, etag) or with_etag(response, etag)

