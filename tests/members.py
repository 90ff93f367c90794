"""A person's membership as a request resolves it (``request.membership``): what the services
that act for a person take. For tests that call those services directly."""

from __future__ import annotations

from typing import Any

from agents.access import Acting, conversation_act_check
from agentsite.models import Membership, Team


def member_of(user: Any, team: Any) -> Membership | None:
    """``user``'s membership of ``team`` (a Team, or anything of one: a conversation, a trace),
    with the person and the team read with it; None when they have none."""
    team_id = team.pk if isinstance(team, Team) else team.team_id
    return (Membership.objects.select_related("user", "team")
            .filter(user=user, team_id=team_id).first())


def acting_of(user: Any, conversation: Any) -> Acting:
    """``user``'s membership with ``conversation``, as the access rules check that it may send
    there (PermissionDenied otherwise): what ``turn_send`` and ``chat_command`` take."""
    return conversation_act_check(member_of(user, conversation), conversation, "send messages in it")
