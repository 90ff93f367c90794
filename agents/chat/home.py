"""The home page: what a person can start (the team's agents and their starters), what they were
doing (recent conversations, running and recent turns), what it cost this week against the
budgets, and, while the team has only the offline demo model, how to connect a real one."""

from __future__ import annotations

from django.db.models import Count, Exists, OuterRef
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import path
from django.views.decorators.http import require_GET

from agents.chat import selectors
from agents.models import Provider
from agentsite.access import team_required
from agentsite.models import Membership, Team
from traces.budgets import request_budget_states
from traces.cost_selectors import recent_spend
from traces.selectors import recent_turns

RECENT = 6


@team_required()
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    team, membership = request.team, request.membership
    running, finished = recent_turns(membership, limit=RECENT)
    week_team, week_mine = recent_spend(team=team, user_id=request.user.pk)
    context = {
        "agents": selectors.agent_choices(team=team),
        "recent": selectors.conversation_list(membership=membership, limit=RECENT),
        "running": running,
        "finished": finished,
        "week_team": week_team,
        "week_mine": week_mine,
        "budgets": request_budget_states(request),
        **_team_facts(team),
        "membership_help": Membership.ROLE_HELP[membership.role],
    }
    return render(request, "home.html", context)


def _team_facts(team: Team) -> dict[str, object]:
    """Whether the team has only the offline demo model, and how many members it has: one
    query."""
    real = Provider.objects.filter(team=OuterRef("pk")).exclude(kind=Provider.Kind.DEMO)
    row = (Team.objects.filter(pk=team.pk)
           .annotate(members=Count("memberships"), real_model=Exists(real))
           .values("members", "real_model").get())
    return {"demo_only": not row["real_model"], "member_count": row["members"]}


urlpatterns = [path("", home, name="home")]
