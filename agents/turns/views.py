"""The inspector's actions on a running turn: stop it, decide on a tool call that waits for
approval. The inspector's pages post here; the chat has its own stop (``/stop``).

A trace the person may not see is a 404 (``traces.record.selectors``); one they see but whose
conversation is not theirs (and they are no admin) is a 403 from the service."""

from __future__ import annotations

from django.contrib import messages as flash
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_POST

from agents.turns.approvals import approval_decide
from agents.turns.services import turn_cancel
from agentsite.access import team_required
from agentsite.models import Membership
from agentsite.redirects import redirect_back
from traces.models import Trace
from traces.record.selectors import trace_get_or_404


def _trace(request: HttpRequest, trace_uuid) -> Trace:
    return trace_get_or_404(request.membership, Trace.objects.select_related("conversation"),
                            uuid=trace_uuid)


@team_required(Membership.Role.MEMBER, action="stop turns")
@require_POST
def trace_cancel(request: HttpRequest, trace_uuid) -> HttpResponse:
    """Stop a turn. The page learns the outcome from the live events (or on reload)."""
    trace = turn_cancel(trace=_trace(request, trace_uuid), membership=request.membership)
    if request.htmx:
        return HttpResponse(status=204)
    flash.info(request, "Stopping the turn." if trace.is_active else f"The turn is {trace.get_status_display().lower()}.")
    return redirect_back(request, "trace_detail", trace_uuid=trace.uuid)


@team_required(Membership.Role.MEMBER, action="approve tool calls")
@require_POST
def approval_decision(request: HttpRequest, trace_uuid, call_id: str) -> HttpResponse:
    trace = _trace(request, trace_uuid)
    approved = request.POST.get("approved") in {"1", "true", "yes"}
    try:
        approval_decide(trace=trace, call_id=call_id, approved=approved,
                        membership=request.membership)
    except ValidationError as exc:
        if request.htmx:
            return HttpResponse(" ".join(exc.messages), status=409)
        flash.error(request, " ".join(exc.messages))
        return redirect_back(request, "trace_detail", trace_uuid=trace.uuid)
    if request.htmx:
        return HttpResponse(status=204)
    return redirect_back(request, "trace_detail", trace_uuid=trace.uuid)
