from __future__ import annotations

from django.urls import reverse

from agentsite.models import Invitation, Membership


def m(user, team) -> Membership:
    return Membership.objects.get(user=user, team=team)


def test_everyone_in_the_team_sees_the_members(client_for, alice, bob, vera):
    for user in (alice, bob, vera):
        page = client_for(user).get(reverse("members"))
        assert page.status_code == 200
        for name in (b"alice", b"bob", b"vera"):
            assert name in page.content


def test_only_owners_see_role_controls_and_only_admins_the_invite_form(client_for, alice, bob, vera, team_a, make_member):
    adam = make_member(team_a, "adam", "admin")
    owner_page = client_for(alice).get(reverse("members")).content
    admin_page = client_for(adam).get(reverse("members")).content
    member_page = client_for(bob).get(reverse("members")).content
    assert b'name="role"' in owner_page and b"Remove" in owner_page
    assert b"Create invitation link" in admin_page and b">Remove<" not in admin_page
    assert b"Create invitation link" not in member_page and b">Remove<" not in member_page


def test_owner_changes_a_role(client_for, alice, bob, team_a):
    target = m(bob, team_a)
    response = client_for(alice).post(reverse("membership_role", args=[target.uuid]), {"role": "admin"})
    assert response.status_code == 302
    target.refresh_from_db()
    assert target.role == "admin"


def test_admin_and_member_cannot_change_roles(client_for, alice, bob, team_a, make_member):
    adam = make_member(team_a, "adam", "admin")
    target = m(bob, team_a)
    for user in (adam, bob):
        assert client_for(user).post(reverse("membership_role", args=[target.uuid]), {"role": "owner"}).status_code == 403
    target.refresh_from_db()
    assert target.role == "member"


def test_last_owner_cannot_step_down_or_leave(client_for, alice, team_a):
    own = m(alice, team_a)
    c = client_for(alice)
    response = c.post(reverse("membership_role", args=[own.uuid]), {"role": "member"}, follow=True)
    assert b"at least one owner" in response.content
    own.refresh_from_db()
    assert own.role == "owner"
    response = c.post(reverse("membership_remove", args=[own.uuid]), follow=True)
    assert b"last owner" in response.content
    assert Membership.objects.filter(pk=own.pk).exists()


def test_owner_removes_a_member_and_member_cannot_remove(client_for, alice, bob, vera, team_a):
    assert client_for(bob).post(reverse("membership_remove", args=[m(vera, team_a).uuid])).status_code == 403
    assert client_for(alice).post(reverse("membership_remove", args=[m(bob, team_a).uuid])).status_code == 302
    assert not Membership.objects.filter(user=bob).exists()


def test_a_member_can_leave(client_for, bob, alice, team_a):
    c = client_for(bob)
    response = c.post(reverse("membership_remove", args=[m(bob, team_a).uuid]))
    assert response.status_code == 302
    assert not Membership.objects.filter(user=bob, team=team_a).exists()
    assert c.get(reverse("home")).url == reverse("no_team")


def test_charlie_gets_404_for_team_a_objects(client_for, alice, bob, charlie, team_a):
    c = client_for(charlie)
    bob_in_a = m(bob, team_a)
    from agentsite import services

    invitation = services.invitation_create(actor=m(alice, team_a), role="member").invitation
    assert c.post(reverse("membership_role", args=[bob_in_a.uuid]), {"role": "viewer"}).status_code == 404
    assert c.post(reverse("membership_remove", args=[bob_in_a.uuid])).status_code == 404
    assert c.post(reverse("invitation_revoke", args=[invitation.uuid])).status_code == 404
    assert c.post(reverse("team_switch"), {"team": str(team_a.uuid)}).status_code == 404
    page = c.get(reverse("members")).content
    assert b"bob" not in page and b"Team A" not in page
    bob_in_a.refresh_from_db()
    assert bob_in_a.role == "member"
    assert Invitation.objects.get(pk=invitation.pk).state == "pending"


def test_team_switcher_keeps_the_active_team_in_the_session(client_for, alice, charlie, team_b, make_member):
    make_member(team_b, "alice", "viewer")
    c = client_for(alice)
    assert b"Members of Team A" in c.get(reverse("members")).content
    response = c.post(reverse("team_switch"), {"team": str(team_b.uuid), "next": "/team/members/"})
    assert response.status_code == 302 and response.url == "/team/members/"
    page = c.get(reverse("members")).content
    assert b"Members of Team B" in page and b"charlie" in page
    # As a viewer in B, alice has no owner controls there.
    assert b"Create invitation link" not in page


def test_switcher_ignores_offsite_next(client_for, alice, team_a):
    response = client_for(alice).post(reverse("team_switch"), {"team": str(team_a.uuid), "next": "https://evil.example/"})
    assert response.url == reverse("home")


def test_team_names_are_escaped(client_for, alice, team_a):
    team_a.name = '<script>alert(1)</script>'
    team_a.save()
    content = client_for(alice).get(reverse("members")).content
    assert b"<script>alert(1)</script>" not in content
    assert b"&lt;script&gt;alert(1)&lt;/script&gt;" in content


def test_create_a_team(client_for, bob):
    c = client_for(bob)
    response = c.post(reverse("team_create"), {"name": "Bob's lab"})
    assert response.status_code == 302
    assert Membership.objects.get(user=bob, team__name="Bob's lab").role == "owner"
    assert b"Members of Bob&#x27;s lab" in c.get(reverse("members")).content


def test_members_page_queries_are_bounded(client_for, alice, team_a, make_member, django_assert_max_num_queries):
    for i in range(30):
        make_member(team_a, f"user{i}", "member")
    c = client_for(alice)
    with django_assert_max_num_queries(12):
        assert c.get(reverse("members")).status_code == 200


def test_htmx_refresh_renders_only_the_member_list(client_for, alice):
    response = client_for(alice).get(reverse("members") + "?part=member-list", HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    assert response.content.lstrip().startswith(b'<section id="member-list"')
    assert b"<html" not in response.content


def test_unknown_partial_names_render_the_whole_page(client_for, alice):
    response = client_for(alice).get(reverse("members") + "?part=../../etc", HTTP_HX_REQUEST="true")
    assert response.status_code == 200 and b"<html" in response.content
