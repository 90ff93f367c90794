"""The home page: what a person can start (the team's agents and their starters), what they were
doing (recent conversations, running and recent turns), what it cost this week against the
budgets, and, while the team has only the offline demo model, how to connect a real one."""

from __future__ import annotations

from django.db.models import Count, Exists, OuterRef, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import path
from django.views.decorators.http import require_GET

from agents.chat import selectors
from agents.models import Provider
from agentsite.access import team_required
from agentsite.db.prepared import Prepared
from agentsite.live import list_version
from agentsite.models import Membership, Team
from traces.costs.budgets import request_budget_states
from traces.costs.selectors import recent_spend
from traces.record.selectors import recent_turns

RECENT = 6


@team_required()
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    """The page; with ``part=lists``, only its lists, read again when the person's lists
    changed or the page's socket opened: 204 when they show what the page has (``since``)."""
    team, membership = request.team, request.membership
    lists = _lists(request)
    if request.GET.get("part") == "lists":
        if request.GET.get("since") == lists["lists_version"]:
            return HttpResponse(status=204)
        return render(request, "home.html#lists", {**lists, "membership": membership})
    context = {
        "agents": selectors.agent_choices(team=team),
        **lists,
        **_team_facts(team),
        "membership_help": Membership.ROLE_HELP[membership.role],
    }
    return render(request, "home.html", context)


def _lists(request: HttpRequest) -> dict[str, object]:
    """What the page lists that turns change: recent conversations, running and recent turns,
    the week's spend and the budgets, with their version."""
    membership = request.membership
    recent = selectors.conversation_list(membership=membership, limit=RECENT)
    running, finished = recent_turns(membership, limit=RECENT)
    week_team, week_mine = recent_spend(team=request.team, user_id=request.user.pk)
    return {"recent": recent, "running": running, "finished": finished, "week_team": week_team,
            "week_mine": week_mine, "budgets": request_budget_states(request),
            "lists_version": list_version(recent, running, finished, [week_team, week_mine])}


def _team_facts(team: Team) -> dict[str, object]:
    """Whether the team has only the offline demo model, and how many members it has: one
    query, compiled once per process."""
    row = _facts_read.get(team.pk)
    return {"demo_only": not row["real_model"], "member_count": row["members"]}


def _facts(team_id: int) -> QuerySet[Team]:
    real = Provider.objects.filter(team=OuterRef("pk")).exclude(kind=Provider.Kind.DEMO)
    return (Team.objects.filter(pk=team_id).annotate(members=Count("memberships"), real_model=Exists(real))
            .values("members", "real_model"))


_facts_read = Prepared(_facts)


urlpatterns = [path("", home, name="home")]
