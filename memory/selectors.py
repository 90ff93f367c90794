"""Read queries for the memory pages, and who sees which entry:

* agent memory (``scope=agent``): everyone in the team;
* user memory: that person, and the team's owners and admins;
* conversation memory: whoever may see the conversation (its owner, the team's admins, and
  everyone once it is shared; ``agents.access``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Q, QuerySet

from agents.models import Agent
from agentsite.access import get_for_team_or_404, own_or_shared, sees_all_of_team
from agentsite.models import Membership, Team

from .models import MemoryEntry


@dataclass
class MemoryFilters:
    agent: Agent | None = None
    member: Membership | None = None
    scope: str = ""
    text: str = ""

    @property
    def active(self) -> bool:
        return bool(self.agent or self.member or self.scope or self.text)

    @classmethod
    def from_query(cls, query: Any, *, team: Team) -> MemoryFilters:
        """Filters from the query string; an agent or member of another team is a 404."""
        agent_uuid, member_uuid = query.get("agent", ""), query.get("member", "")
        agent = get_for_team_or_404(Agent, team, uuid=agent_uuid) if agent_uuid else None
        member = (get_for_team_or_404(Membership.objects.select_related("user"), team,
                                      uuid=member_uuid) if member_uuid else None)
        scope = query.get("scope", "")
        return cls(agent=agent, member=member,
                   scope=scope if scope in MemoryEntry.Scope.values else "",
                   text=(query.get("q") or "").strip()[:200])


def memory_visibility(membership: Membership | None) -> Q:
    """The filter for the memory entries ``membership`` may see (of its team)."""
    if sees_all_of_team(membership):
        return Q()
    if membership is None:
        return Q(pk__in=[])
    Scope = MemoryEntry.Scope
    return (Q(scope=Scope.AGENT)
            | Q(scope=Scope.USER, user_id=membership.user_id)
            | (Q(scope=Scope.CONVERSATION)
               & own_or_shared(membership, owner="conversation__created_by", shared="conversation__shared")))


def memory_visible(membership: Membership | None) -> QuerySet[MemoryEntry]:
    """The memory entries of ``membership``'s team that it may see."""
    if membership is None:
        return MemoryEntry.objects.none()
    return MemoryEntry.objects.filter(team_id=membership.team_id).filter(memory_visibility(membership))


def memory_entries(*, membership: Membership, filters: MemoryFilters) -> QuerySet[MemoryEntry]:
    """The memory entries ``membership`` may see for the page, newest first, with what each
    row shows."""
    qs = (memory_visible(membership)
          .select_related("agent", "user", "conversation", "source_trace")
          .only("uuid", "scope", "key", "content", "category", "updated_at", "agent__name",
                "agent__uuid", "user__username", "conversation__uuid", "conversation__title",
                "source_trace__uuid"))
    if filters.agent is not None:
        qs = qs.filter(agent=filters.agent)
    if filters.member is not None:
        qs = qs.filter(user_id=filters.member.user_id)
    if filters.scope:
        qs = qs.filter(scope=filters.scope)
    if filters.text:
        qs = qs.filter(Q(key__icontains=filters.text) | Q(content__icontains=filters.text))
    return qs.order_by("-updated_at", "-id")


def memory_filter_choices(*, team: Team) -> dict[str, list[tuple[str, str]]]:
    agents = [(str(u), n) for u, n in Agent.objects.filter(team=team).order_by("name")
              .values_list("uuid", "name")]
    members = [(str(u), n) for u, n in Membership.objects.filter(team=team)
               .order_by("user__username").values_list("uuid", "user__username")]
    return {"agents": agents, "members": members, "scopes": list(MemoryEntry.Scope.choices)}
