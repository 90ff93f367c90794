from __future__ import annotations

from django.urls import reverse

from agentsite.models import Membership


def test_team_admins_reach_the_admin_and_see_only_their_teams(client_for, alice, charlie, team_a, team_b):
    c = client_for(alice)
    assert c.get(reverse("admin:index")).status_code == 200
    listing = c.get(reverse("admin:agentsite_team_changelist"))
    assert listing.status_code == 200
    assert b"Team A" in listing.content and b"Team B" not in listing.content
    members = c.get(reverse("admin:agentsite_membership_changelist")).content
    assert b"alice" in members and b"charlie" not in members


def test_other_teams_objects_are_404_in_the_admin(client_for, alice, charlie, team_b):
    c = client_for(alice)
    response = c.get(reverse("admin:agentsite_team_change", args=[team_b.pk]))
    # Django's admin redirects to the index with a "doesn't exist" message for unknown ids.
    assert response.status_code in (302, 404)
    assert b"Team B" not in c.get(reverse("admin:index"), follow=True).content
    membership = Membership.objects.get(user=charlie)
    assert c.get(reverse("admin:agentsite_membership_change", args=[membership.pk])).status_code in (302, 404)


def test_members_and_viewers_never_reach_the_admin(client_for, alice, bob, vera):
    for user in (bob, vera):
        response = client_for(user).get(reverse("admin:index"))
        assert response.status_code == 302 and "/admin/login/" in response.url
        # ... where they get the app's 403 page saying who can edit, not Django's login form
        page = client_for(user).get(reverse("admin:index"), follow=True)
        html = page.content.decode()
        assert page.status_code == 403 and 'name="password"' not in html
        assert "your role does not include it" in html
        assert f"You are {Membership.objects.get(user=user).get_role_display().lower()} in Team A." in html
        assert "Ask alice (owner) to make you an admin" in html


def test_someone_signed_out_signs_in_on_the_apps_page_and_comes_back(client):
    response = client.get(reverse("admin:index"), follow=True)
    assert response.redirect_chain[-1][0].startswith(reverse("login") + "?next=")
    assert "/admin/" in response.redirect_chain[-1][0]


def test_team_admin_can_rename_their_team_in_the_admin(client_for, alice, team_a):
    c = client_for(alice)
    response = c.post(reverse("admin:agentsite_team_change", args=[team_a.pk]), {"name": "Renamed A",
                                                                                  "tool_policy_default": "ask"})
    assert response.status_code == 302
    team_a.refresh_from_db()
    assert team_a.name == "Renamed A"


def test_nav_shows_admin_only_to_admins(client_for, alice, bob):
    assert b'href="/admin/"' in client_for(alice).get(reverse("home")).content
    assert b'href="/admin/"' not in client_for(bob).get(reverse("home")).content


def test_team_changes_in_the_admin_and_member_changes_are_audited(client_for, alice, bob, team_a, charlie):
    from agentsite import services
    from agentsite.models import AuditEvent

    c = client_for(alice)
    c.post(reverse("admin:agentsite_team_change", args=[team_a.pk]), {"name": "Renamed A",
                                                                                  "tool_policy_default": "ask"})
    owner = Membership.objects.get(user=alice)
    services.membership_change_role(actor=owner, membership=Membership.objects.get(user=bob), role="admin")
    events = list(AuditEvent.objects.filter(team=team_a).order_by("id"))
    assert [(e.action, e.object_type) for e in events] == [("update", "agentsite.Team"), ("update", "agentsite.Membership")]
    assert events[0].changes == {"name": ("Team A", "Renamed A")} and events[0].actor_name == "alice"
    assert events[1].changes == {"role": ("member", "admin")}
    # Readable by the team's admins, editable by nobody, invisible to other teams.
    listing = c.get(reverse("admin:agentsite_auditevent_changelist"))
    assert listing.status_code == 200 and b"Renamed A" in listing.content
    assert c.post(reverse("admin:agentsite_auditevent_delete", args=[events[0].pk]), {"post": "yes"}).status_code == 403
    assert AuditEvent.objects.filter(pk=events[0].pk).exists()
    assert b"Renamed A" not in client_for(charlie).get(reverse("admin:agentsite_auditevent_changelist")).content


def test_an_audit_entry_reads_as_a_before_and_after_table_with_a_line_diff(client_for, alice, team_a):
    from agentsite.models import AuditEvent

    event = AuditEvent.objects.create(
        team=team_a, actor=alice, actor_name="alice", action="update", object_type="agents.Agent", object_id="1",
        object_repr="Helper", before={"name": "Helper", "system_prompt": "Be brief.\nUse tools.\n<b>x</b>"},
        after={"name": "Helper 2", "system_prompt": "Be brief.\nUse the calculator.\n<b>x</b>"})
    html = client_for(alice).get(reverse("admin:agentsite_auditevent_change", args=[event.pk])).content.decode()
    assert '<table class="audit-changes">' in html
    assert '<tr><th scope="row">name</th><td>Helper</td><td>Helper 2</td></tr>' in html
    assert '<del class="remove">- Use tools.</del>' in html and '<ins class="add">+ Use the calculator.</ins>' in html
    assert "&lt;b&gt;x&lt;/b&gt;" in html and "<b>x</b>" not in html
    listing = client_for(alice).get(reverse("admin:agentsite_auditevent_changelist")).content.decode()
    assert "name, system_prompt" in listing


def test_admin_pages_carry_the_project_stylesheet(client_for, alice):
    assert "css/admin.css" in client_for(alice).get(reverse("admin:index")).content.decode()
