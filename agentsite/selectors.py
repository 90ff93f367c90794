from __future__ import annotations

from django.db.models import QuerySet

from .models import ApiKey, Invitation, Membership, Team


def team_members(team: Team) -> QuerySet[Membership]:
    return (
        Membership.objects.filter(team=team)
        .select_related("user")
        .order_by("user__username")
    )


def team_pending_invitations(team: Team) -> QuerySet[Invitation]:
    return Invitation.objects.pending().filter(team=team).select_related("created_by")


def api_keys_visible(membership: Membership) -> QuerySet[ApiKey]:
    """The team's keys ``membership`` may see and manage: all of them for admins and owners,
    otherwise the person's own."""
    keys = ApiKey.objects.filter(team_id=membership.team_id)
    if not membership.can_configure:
        keys = keys.filter(user_id=membership.user_id)
    return keys.select_related("user", "created_by").order_by("-created_at", "-id")
