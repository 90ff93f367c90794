"""The inspector's "Fork from here": a form for one step of a trace, and starting the fork.

A trace the person may not see is a 404 (``traces.record.selectors``); one they see but whose
conversation is not theirs (and they are no admin) is a 403 from the service."""

from __future__ import annotations

from django.contrib import messages as flash
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from agents.turns.fork import fork_choices, fork_start
from agents.turns.replay import fork_point
from agentsite.access import team_required
from agentsite.models import Membership
from traces.models import Step, Trace
from traces.record.selectors import trace_can_act, trace_get_or_404


def _int_or_none(value: str | None) -> int | None:
    value = (value or "").strip()
    return int(value) if value.isdigit() else None


@team_required(Membership.Role.MEMBER, action="fork runs")
@require_http_methods(["GET", "POST"])
def trace_fork(request: HttpRequest, trace_uuid, seq: int) -> HttpResponse:
    trace = trace_get_or_404(request.membership, Trace.objects.select_related(
        "agent", "agent__provider", "conversation", "user_message"), uuid=trace_uuid)
    step = Step.objects.filter(trace=trace, seq=seq).first()
    if step is None:
        raise Http404("No such step.")
    if not trace_can_act(request.membership, trace):
        raise PermissionDenied("Only the conversation's owner or a team admin can fork its turns.")
    error = ""
    form = request.POST if request.method == "POST" else None
    if form is not None:
        prompt = form.get("system_prompt")
        edit_prompt = form.get("edit_system_prompt") == "on"
        try:
            fork = fork_start(
                trace=trace, seq=seq, membership=request.membership,
                provider=form.get("provider") or None, model=form.get("model") or None,
                agent_version=_int_or_none(form.get("agent_version")),
                system_prompt=prompt if edit_prompt and prompt is not None else None,
                message=form.get("message"),
                allow_new_tool_calls=form.get("allow_new_tool_calls") == "on")
        except ValidationError as exc:  # a rate limit (QuotaExceeded) too
            error = " ".join(exc.messages)
        else:
            flash.success(request, f"Forked from step {seq}. The new run is below.")
            return redirect("trace_detail", trace_uuid=fork.uuid)
    try:
        _, upto = fork_point(trace=trace, seq=seq)
    except ValueError as exc:
        upto, error = None, error or str(exc)
    choices = fork_choices(trace=trace) if trace.agent_id else None
    return render(request, "traces/fork.html", {
        "trace": trace, "step": step, "upto": upto, "choices": choices, "error": error,
        "form": form, "active": trace.is_active,
    }, status=400 if error and form is not None else 200)
