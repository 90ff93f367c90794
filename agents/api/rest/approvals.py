"""``/api/v1/traces/{id}/approvals`` and ``…/stop``: what a person does to a running turn in the
chat or the inspector, from code. List the tool calls that wait for approval, approve or deny
one (with a reason the model reads), stop the turn.

The rules are the browser's, checked by the same services (``agents.turns.services``): a trace
the key's person may not see is a 404 (another team's, a teammate's private conversation); one
they see but may not act in (a viewer, a teammate's shared conversation they are not admin of)
is a 403. Listing takes the scope ``chat`` or ``traces:read``; deciding and stopping ``chat``.
The streams tell a waiting call as it comes: the ``approval`` event of ``…/events`` and the
``agentsite.approval`` chunk of a streamed ``/v1/chat/completions``, with the same fields as
this list."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.http import HttpRequest
from django.urls import reverse
from ninja import Field, Router, Schema

from agents.api.auth import caller_of, scope_check
from agents.api.errors import ApiError, errors
from agents.api.rest.traces import trace_for
from agents.api.turn_stream import approvals_waiting
from agents.turns.approvals import APPROVAL_REASON_MAX_CHARS, approval_decide
from agents.turns.services import turn_cancel
from agentsite.models import ApiKey
from traces.models import Trace

router = Router(tags=["traces"])
Scope = ApiKey.Scope


class ApprovalOut(Schema):
    call_id: str = Field(description="The tool call's id (the model's).")
    tool: str = Field(description="The tool's name.")
    arguments: dict[str, Any] = Field(description="What the model called it with (as recorded: "
                                                  "credentials scrubbed, a very long value cut).")
    waiting_since: datetime | None
    expires_at: datetime | None = Field(description="When the wait ends as a denial (the agent's "
                                                    "approval timeout).")
    timeout_s: int | None
    decide_url: str | None = Field(description="Where to POST the decision (null for a call id "
                                               "no URL can carry: decide it in the inspector).")


class ApprovalList(Schema):
    trace: str
    status: str = Field(description=f"The turn's status, one of: {', '.join(Trace.Status.values)}.")
    data: list[ApprovalOut]


class DecisionIn(Schema):
    approved: bool
    reason: str = Field("", max_length=APPROVAL_REASON_MAX_CHARS,
                        description="Why, in a line: the model reads it with a denial; the "
                                    "approval step records it either way.")


class DecisionOut(Schema):
    trace: str
    call_id: str
    approved: bool
    reason: str
    events_url: str = Field(description="The turn's live events: it goes on once the worker has "
                                        "the decision (within a fraction of a second).")


class StopOut(Schema):
    trace: str
    status: str = Field(description="The turn's status after the request: `cancelled` for a turn "
                                    "that had not started, still `running` for one whose worker "
                                    "was told to stop, or the status it had already ended with.")
    stopping: bool = Field(description="The running turn's worker was told to stop: it ends "
                                       "`cancelled` in a moment (follow `events_url`).")
    events_url: str
    trace_url: str


def _url(request: HttpRequest, name: str, trace: Trace) -> str:
    return request.build_absolute_uri(reverse(name, args=[trace.uuid.hex]))


def approval_out(request: HttpRequest, payload: dict[str, Any]) -> dict[str, Any]:
    """An ``approval`` payload of ``agents.api.turn_stream`` with its URL made absolute."""
    path = payload.get("decide_url")
    return {**payload, "decide_url": request.build_absolute_uri(path) if path else None}


@router.get("/{trace_id}/approvals", response={200: ApprovalList, **errors(404)},
            summary="List the tool calls that wait for approval", url_name="rest_approval_list")
def approval_list(request: HttpRequest, trace_id: str) -> dict[str, Any]:
    """The turn's tool calls that wait for a person's approval now, oldest first (none once it
    has ended). Scope `chat` or `traces:read`."""
    if not caller_of(request).key.has_scope(Scope.TRACES):
        scope_check(request, Scope.CHAT)
    trace = trace_for(request.membership, trace_id)
    waiting = approvals_waiting(trace) if trace.status == Trace.Status.RUNNING else []
    return {"trace": trace.uuid.hex, "status": trace.status,
            "data": [approval_out(request, payload) for payload in waiting]}


@router.post("/{trace_id}/approvals/{call_id}", response={200: DecisionOut, **errors(400, 404, 409, 503)},
             summary="Approve or deny a tool call", url_name="rest_approval_decide")
def approval_decide_api(request: HttpRequest, trace_id: str, call_id: str, body: DecisionIn) -> dict[str, Any]:
    """Approve or deny a tool call that waits for approval: the worker running the turn gets the
    decision at once and the call runs, or the model reads the denial (with `reason`). A call
    that does not wait (any more) is a 409; a decision that could not be handed to the worker a
    503 (try again). Scope `chat`; the conversation's owner or a team admin (else 403)."""
    caller = scope_check(request, Scope.CHAT)
    trace = trace_for(caller.membership, trace_id)
    try:
        approval_decide(trace=trace, call_id=call_id, approved=body.approved,
                        membership=caller.membership, reason=body.reason)
    except ValidationError as exc:
        message = " ".join(exc.messages)
        if exc.code == "undelivered":
            raise ApiError(503, message, code="decision_undelivered", headers={"Retry-After": "1"}) from exc
        raise ApiError(409, message, code="approval_not_waiting") from exc
    return {"trace": trace.uuid.hex, "call_id": call_id, "approved": body.approved,
            "reason": " ".join(body.reason.split()), "events_url": _url(request, "api:rest_trace_events", trace)}


@router.post("/{trace_id}/stop", response={200: StopOut, **errors(404)}, summary="Stop a turn",
             url_name="rest_trace_stop")
def trace_stop(request: HttpRequest, trace_id: str) -> dict[str, Any]:
    """Stop a turn, as the chat's Stop button does: a queued turn ends `cancelled` at once, a
    running one's worker is told and ends it within a moment (a call waiting for approval is
    withdrawn); a turn that has ended stays as it is. Scope `chat`; the conversation's owner or a
    team admin (else 403)."""
    caller = scope_check(request, Scope.CHAT)
    trace = turn_cancel(trace=trace_for(caller.membership, trace_id), membership=caller.membership)
    return {"trace": trace.uuid.hex, "status": trace.status,
            "stopping": trace.status == Trace.Status.RUNNING and trace.cancel_requested_at is not None,
            "events_url": _url(request, "api:rest_trace_events", trace),
            "trace_url": _url(request, "api:rest_trace_detail", trace)}
