from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied
from django.http import Http404

from agentsite.access import (
    get_for_team_or_404,
    get_for_user_or_404,
    membership_for,
    require_role,
    team_for_user_or_404,
    visible_to,
)
from agentsite.models import Invitation, Membership


def test_objects_of_another_team_are_404(alice, charlie, team_a, team_b):
    a_membership = Membership.objects.get(user=alice)
    assert get_for_team_or_404(Membership, team_a, uuid=a_membership.uuid) == a_membership
    with pytest.raises(Http404):
        get_for_team_or_404(Membership, team_b, uuid=a_membership.uuid)
    with pytest.raises(Http404):
        get_for_team_or_404(Membership, team_a, uuid="not-a-uuid")
    with pytest.raises(Http404):
        get_for_user_or_404(Membership, charlie, uuid=a_membership.uuid)


def test_visible_to_spans_all_of_a_users_teams(alice, charlie, team_a, team_b, make_member):
    make_member(team_b, "alice", "viewer")
    Invitation.objects.create(team=team_a, token_hash="a" * 64)
    Invitation.objects.create(team=team_b, token_hash="b" * 64)
    assert visible_to(Invitation, alice).count() == 2
    assert list(visible_to(Invitation, charlie).values_list("team__name", flat=True)) == ["Team B"]


def test_team_lookup_and_roles(alice, bob, charlie, team_a):
    team, membership = team_for_user_or_404(alice, team_a.uuid)
    assert team == team_a and membership.role == "owner"
    with pytest.raises(Http404):
        team_for_user_or_404(charlie, team_a.uuid)
    with pytest.raises(Http404):
        require_role(membership_for(charlie, team_a), "viewer")
    with pytest.raises(PermissionDenied):
        require_role(membership_for(bob, team_a), "admin", "edit agents")
    assert require_role(membership_for(bob, team_a), "member").user == bob


def test_role_ladder(alice, team_a, make_member):
    roles = {r: make_member(team_a, f"u-{r}", r) for r in ("viewer", "member", "admin", "owner")}
    m = {r: Membership.objects.get(user=u) for r, u in roles.items()}
    assert [m[r].can_chat for r in roles] == [False, True, True, True]
    assert [m[r].can_configure for r in roles] == [False, False, True, True]
    assert [m[r].can_manage_members for r in roles] == [False, False, False, True]
