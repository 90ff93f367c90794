"""The prompt-cache section of an opened model request in the inspector (loaded by htmx from
the step's panel; a plain page without htmx)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from agentsite.access import get_for_team_or_404, team_required

from ..models import Step, Trace
from ..record.selectors import trace_get_or_404
from .cache_selectors import step_cache_explanation


@team_required()
@require_GET
def step_cache(request: HttpRequest, trace_uuid: Any, seq: int) -> HttpResponse:
    trace = trace_get_or_404(request.membership, Trace.objects.all(), uuid=trace_uuid)
    step = get_for_team_or_404(Step.objects.select_related("price"), request.team,
                               field="trace__team", trace=trace, seq=seq)
    step.trace = trace
    template = "traces/_prompt_cache.html" if request.htmx else "traces/step_cache.html"
    return render(request, template, {"trace": trace, "step": step, "cache": step_cache_explanation(step)})
