"""``/api/v1/agents``: the team's agents, for choosing one to talk to (by its id or slug, also
the ``model`` of ``/v1/chat/completions``) and for naming it in trace and cost filters.

Any valid key may read them, whatever its scopes: an agent's name and model are what every
scope's answers already mention (traces and costs name their agent)."""

from __future__ import annotations

from datetime import datetime

from django.http import HttpRequest
from ninja import Query, Router, Schema

from agents.api.errors import errors
from agents.api.rest.common import agent_get_or_404
from agents.api.rest.pagination import PageParams, paginate
from agents.models import Agent
from agentsite.access import scoped

router = Router(tags=["agents"])


class AgentOut(Schema):
    id: str
    slug: str
    name: str
    description: str
    model: str
    allowed_models: list[str]
    suggested_prompts: list[str]
    turn_time_limit_s: int
    created_at: datetime
    updated_at: datetime


class AgentPage(Schema):
    data: list[AgentOut]
    next_cursor: str | None


def agent_out(agent: Agent) -> dict:
    return {
        "id": str(agent.uuid), "slug": agent.slug, "name": agent.name, "description": agent.description,
        "model": agent.model,
        "allowed_models": [str(m) for m in agent.allowed_models or [] if str(m).strip()],
        "suggested_prompts": [str(p) for p in agent.suggested_prompts or [] if str(p).strip()],
        "turn_time_limit_s": agent.turn_time_limit_s,
        "created_at": agent.created_at, "updated_at": agent.updated_at,
    }


@router.get("", response={200: AgentPage, **errors(400)}, summary="List the team's agents")
def agent_list(request: HttpRequest, page: Query[PageParams]) -> dict:
    """The agents of the key's team, newest first. Any scope."""
    rows, next_cursor = paginate(scoped(Agent, request.team), page)
    return {"data": [agent_out(a) for a in rows], "next_cursor": next_cursor}


@router.get("/{agent_id}", response={200: AgentOut, **errors(404)}, summary="Read an agent")
def agent_detail(request: HttpRequest, agent_id: str) -> dict:
    """One agent of the team, by its id or its slug; another team's is a 404. Any scope."""
    return agent_out(agent_get_or_404(request.team, agent_id))
