"""What the REST routers share: the documented errors (``agents.api.errors``), public ids,
references to an agent, and conditional reads (ETag / If-None-Match)."""

from __future__ import annotations

import uuid
from typing import Any

from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from ninja import Schema

from agents.models import Agent
from agentsite.access import get_for_team_or_404
from agentsite.models import Team


class AgentRef(Schema):
    id: str | None
    slug: str | None = None
    name: str | None = None


def agent_ref(agent: Agent | None) -> dict[str, Any]:
    if agent is None:
        return {"id": None, "slug": None, "name": None}
    return {"id": str(agent.uuid), "slug": agent.slug or None, "name": agent.name}


def is_uuid(value: str) -> bool:
    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True


def agent_lookup(value: str) -> Q:
    """An agent named by its public id (a UUID, with or without dashes) or by its slug."""
    return Q(uuid=value) if is_uuid(value) else Q(slug=value)


def agent_get_or_404(team: Team, value: str, queryset: QuerySet[Agent] | None = None) -> Agent:
    """One of ``team``'s agents by UUID or slug; any other (another team's) is a 404."""
    qs = Agent.objects.all() if queryset is None else queryset
    return get_for_team_or_404(qs.filter(agent_lookup(value)), team)


# -- conditional reads ----------------------------------------------------------------------------
def etag_for(*parts: Any) -> str:
    return '"' + "-".join(str(p) for p in parts) + '"'


def not_modified(request: HttpRequest, etag: str) -> HttpResponse | None:
    """A 304 when the client's ``If-None-Match`` holds ``etag`` (or ``*``), else None."""
    header = request.headers.get("If-None-Match", "")
    if not header:
        return None
    tags = {t.strip().removeprefix("W/") for t in header.split(",")}
    if etag in tags or "*" in tags:
        response = HttpResponse(status=304)
        response["ETag"] = etag
        return response
    return None


def with_etag(response: HttpResponse, etag: str) -> HttpResponse:
    response["ETag"] = etag
    response["Cache-Control"] = "private, no-cache"
    return response
