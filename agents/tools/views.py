"""The Try-it page of a tool: run it once with arguments typed as JSON and see what a model
would get back, with the time it took.

Only a team's admins and owners reach it (a member gets a 403, anyone outside the team a 404).
The tool runs through ``agents.tools.services.tool_try``: the code path of a turn, with the
same argument checks, SSRF guard, limits and credential scrubbing. The output is untrusted and
shown escaped."""

from __future__ import annotations

import json

from django.conf import settings
from django.contrib import admin
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from agents.models import Tool
from agents.tools.forms import ToolTryForm
from agents.tools.services import sample_arguments, tool_try
from agentsite.access import get_for_user_or_404, request_membership, require_role
from agentsite.models import Membership

Role = Membership.Role


def _tool(request: HttpRequest, tool_uuid) -> Tool:
    tools = Tool.objects.select_related("team")
    if request.user.is_superuser:
        return get_object_or_404(tools, uuid=tool_uuid)
    tool = get_for_user_or_404(tools, request.user, uuid=tool_uuid)
    require_role(request_membership(request, tool.team_id), Role.ADMIN, "try tools")
    return tool


@login_required
@require_http_methods(["GET", "POST"])
def tool_try_view(request: HttpRequest, tool_uuid) -> HttpResponse:
    tool = _tool(request, tool_uuid)
    result = None
    if request.method == "POST":
        form = ToolTryForm(request.POST, tool=tool)
        if form.is_valid():
            result = tool_try(tool=tool, arguments=form.cleaned_data["arguments"],
                              user=request.user, agent=form.cleaned_data["agent"],
                              timezone=settings.TIME_ZONE)
    else:
        initial = {"arguments": json.dumps(sample_arguments(tool.parameters), indent=2,
                                           ensure_ascii=False)}
        form = ToolTryForm(initial=initial, tool=tool)
    context = {
        **admin.site.each_context(request),
        "title": f"Try {tool.name}",
        "tool": tool,
        "form": form,
        "result": result,
        "change_url": reverse("admin:agents_tool_change", args=[tool.pk]),
    }
    return render(request, "admin/agents/tool_try.html", context)
