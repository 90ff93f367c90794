"""What an agent remembers: a team's memory entries, filtered by agent, person, scope and text.

Everyone in the team reads agent memory (it shapes every answer); a person's user memory is
theirs and the team admins' to read; conversation memory follows its conversation
(``memory.selectors``). Another team's agent or member in the filters is a 404."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from agentsite.access import sees_all_of_team, team_required

from . import selectors

PAGE_SIZE = 50


@team_required()
@require_GET
def memory_list(request: HttpRequest) -> HttpResponse:
    filters = selectors.MemoryFilters.from_query(request.GET, team=request.team)
    paginator = Paginator(selectors.memory_entries(membership=request.membership, filters=filters), PAGE_SIZE)
    page = paginator.get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "page": page,
        "entries": page.object_list,
        "filters": filters,
        "choices": selectors.memory_filter_choices(team=request.team),
        "query": query.urlencode(),
        "can_manage": request.membership.can_configure or request.user.is_superuser,
        "sees_all": sees_all_of_team(request.membership),
    }
    template = "memory/memory_list.html"
    if request.htmx and request.htmx.target == "results":
        template += "#results"
    return render(request, template, context)
