from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from agentsite import services
from agentsite.models import Invitation, Membership


def invite(client, role="member") -> str:
    """Create an invitation through the page and return the link's path."""
    response = client.post(reverse("invitation_create"), {"role": role, "email": "new@example.com"})
    assert response.status_code == 200, response.content[:500]
    match = re.search(rb'value="http://testserver(/invite/[^"]+/)"', response.content)
    assert match, "the page shows the link once"
    return match.group(1).decode()


def test_admin_creates_a_link_that_stores_only_a_hash(client_for, alice):
    link = invite(client_for(alice))
    token = link.split("/")[2]
    invitation = Invitation.objects.get()
    assert invitation.token_hash == Invitation.hash_token(token)
    assert token not in invitation.token_hash
    assert invitation.state == "pending" and invitation.created_by == alice
    # The members page never shows the link again.
    page = client_for(alice).get(reverse("members"))
    assert token.encode() not in page.content


def test_new_person_signs_up_through_the_link(client, client_for, alice):
    link = invite(client_for(alice), role="viewer")
    page = client.get(link)
    assert page.status_code == 200 and b"Join Team A" in page.content
    response = client.post(link, {"username": "nina", "email": "", "password1": "Ni-na-passphrase-9", "password2": "Ni-na-passphrase-9"})
    assert response.status_code == 302
    membership = Membership.objects.get(user__username="nina")
    assert membership.team.name == "Team A" and membership.role == "viewer"
    assert client.get(reverse("home")).status_code == 200  # logged in


def test_existing_user_joins_a_second_team(client_for, alice, charlie):
    link = invite(client_for(alice))
    c = client_for(charlie)
    assert b"Join Team A" in c.get(link).content
    assert c.post(link).status_code == 302
    assert set(Membership.objects.filter(user=charlie).values_list("team__name", flat=True)) == {"Team A", "Team B"}


def test_link_is_single_use(client, client_for, alice, charlie):
    link = invite(client_for(alice))
    assert client_for(charlie).post(link).status_code == 302
    again = client.get(link)
    assert again.status_code == 410
    assert b"already been used" in again.content
    # A sign-up attempt through the used link creates nothing.
    client.post(link, {"username": "late", "password1": "La-te-passphrase-9", "password2": "La-te-passphrase-9"})
    assert not Membership.objects.filter(user__username="late").exists()


def test_expired_link_is_refused(client, client_for, alice):
    link = invite(client_for(alice))
    Invitation.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    response = client.get(link)
    assert response.status_code == 410 and b"expired" in response.content


def test_revoked_link_is_refused(client, client_for, alice):
    c = client_for(alice)
    link = invite(c)
    invitation = Invitation.objects.get()
    assert c.post(reverse("invitation_revoke", args=[invitation.uuid])).status_code == 302
    assert client.get(link).status_code == 410


def test_unknown_link_is_404(client, db):
    assert client.get("/invite/not-a-real-token/").status_code == 404


def test_members_and_viewers_cannot_invite(client_for, bob, vera):
    for user in (bob, vera):
        assert client_for(user).post(reverse("invitation_create"), {"role": "member"}).status_code == 403
    assert not Invitation.objects.exists()


def test_admin_cannot_invite_an_owner(client_for, team_a, make_member):
    adam = make_member(team_a, "adam", "admin")
    response = client_for(adam).post(reverse("invitation_create"), {"role": "owner"})
    assert response.status_code == 400
    assert not Invitation.objects.exists()
    invite(client_for(adam), role="admin")  # up to their own role is fine


def test_two_acceptances_race_only_one_wins(alice, charlie, make_member, team_b):
    owner = Membership.objects.get(user=alice)
    issued = services.invitation_create(actor=owner, role="member")
    services.invitation_accept(token=issued.token, user=charlie)
    other = make_member(team_b, "dan")
    with pytest.raises(services.TeamActionError):
        services.invitation_accept(token=issued.token, user=other)
    assert Membership.objects.filter(team=owner.team).count() == 2
