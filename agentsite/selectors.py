from __future__ import annotations

from django.db.models import QuerySet

from .models import Invitation, Membership, Team


def team_members(team: Team) -> QuerySet[Membership]:
    return (
        Membership.objects.filter(team=team)
        .select_related("user")
        .order_by("user__username")
    )


def team_member_count(team: Team) -> int:
    return Membership.objects.filter(team=team).count()


def team_pending_invitations(team: Team) -> QuerySet[Invitation]:
    return Invitation.objects.pending().filter(team=team).select_related("created_by")
