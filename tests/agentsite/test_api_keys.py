"""The API keys page: a new key's secret is shown once (only its hash is kept); everyone sees
their own keys and admins all of the team's; team keys are for admins, a viewer's keys only
read; a key is revoked by its owner or an admin; another team's key does not exist. And the
per-person limits on the members page, set by admins and audited."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from agentsite.api_keys import api_key_create
from agentsite.models import ApiKey, AuditEvent, Membership
from tests.members import member_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def adam(team_a, make_member):
    return make_member(team_a, "adam", "admin")


def create(client, **fields):
    data = {"name": "nightly report", "kind": "personal", "scopes": ["chat", "traces:read"]}
    data.update(fields)
    # The form redirects to the page that shows the secret (a reload shows it no more).
    return client.post(reverse("api_key_create"), data, follow=True)


def key_of(user, team, name: str = "script", **fields) -> ApiKey:
    fields.setdefault("scopes", ["traces:read"])
    key, _secret = api_key_create(membership=member_of(user, team), name=name, **fields)
    return key


# -- the secret is shown once ------------------------------------------------------------------------
def test_a_new_key_is_shown_once_and_only_its_hash_is_kept(client_for, alice, team_a, agent):
    c = client_for(alice)
    response = create(c)
    assert response.status_code == 200 and response.redirect_chain == [(reverse("api_keys"), 302)]
    secret = response.context["new_secret"]
    page = response.content.decode()
    assert secret.startswith("ask_") and page.count(secret) == 3  # the field and the two snippets
    assert "it will not be shown again" in page
    assert "no-store" in response["Cache-Control"]
    assert 'data-copy="#new-key-secret"' in page
    # ready to paste: the site's base URL and one of the team's agents
    assert "curl http://testserver/v1/chat/completions" in page
    assert 'base_url="http://testserver/v1"' in page and f'"model": "{agent.slug}"' in page
    key = ApiKey.objects.get(team=team_a)
    assert key.key_hash == hashlib.sha256(secret.encode()).hexdigest()
    assert secret.startswith(key.prefix) and key.prefix != secret
    assert (key.user, key.created_by, key.kind, key.scopes) == (alice, alice, "personal", ["chat", "traces:read"])
    stored = [str(v) for v in ApiKey.objects.filter(pk=key.pk).values().get().values()]
    assert not any(secret in value for value in stored)
    event = AuditEvent.objects.get(team=team_a, object_type="agentsite.ApiKey", action="create")
    assert event.after["key_hash"] == "set" and secret not in str(event.after)
    # never again: the list shows the prefix only
    listing = c.get(reverse("api_keys")).content.decode()
    assert secret not in listing and f"{key.prefix}…" in listing and "nightly report" in listing


def test_a_key_without_the_chat_scope_gets_no_chat_snippet(client_for, vera):
    response = create(client_for(vera), scopes=["costs:read"])
    assert response.status_code == 200
    page = response.content.decode()
    assert response.context["new_secret"] in page and "chat/completions" not in page


def test_the_name_and_every_other_value_are_escaped(client_for, alice):
    response = create(client_for(alice), name='<img src=x onerror="alert(1)">')
    page = response.content.decode()
    assert "<img src=x" not in page and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in page


def test_expiry_and_limits_are_kept(client_for, bob, team_a, settings):
    day = timezone.localdate() + timedelta(days=30)
    assert create(client_for(bob), expires_on=day.isoformat(), rpm_limit="30", tpm_limit="9000",
                  require_end_user="on").status_code == 200
    key = ApiKey.objects.get(user=bob)
    assert key.require_end_user
    expires = timezone.localtime(key.expires_at)
    assert expires.date() == day and (expires + timedelta(microseconds=1)).date() == day + timedelta(days=1)
    assert (key.rpm_limit, key.tpm_limit, key.state) == (30, 9000, "active")


@pytest.mark.parametrize(("fields", "message"), [
    ({"scopes": []}, "Choose at least one scope"),
    ({"name": "   "}, "This field is required"),
    ({"expires_on": "2001-01-01"}, "The expiry date is in the past."),
    ({"rpm_limit": "0"}, "greater than or equal to 1"),
])
def test_a_bad_form_says_what_to_fix(client_for, bob, fields, message):
    response = create(client_for(bob), **fields)
    assert response.status_code == 400 and message in response.content.decode()
    assert not ApiKey.objects.exists()


# -- who may make which key -------------------------------------------------------------------------
def test_a_member_cannot_create_a_team_key_and_an_admin_can(client_for, bob, adam, team_a):
    assert create(client_for(bob), kind="team").status_code == 403
    assert not ApiKey.objects.exists()
    assert b'name="kind" value="team"' not in client_for(bob).get(reverse("api_keys")).content
    assert b'name="kind" value="team"' in client_for(adam).get(reverse("api_keys")).content
    assert create(client_for(adam), kind="team", scopes=["chat", "config:admin"]).status_code == 200
    key = ApiKey.objects.get()
    assert (key.kind, key.user, key.scopes) == ("team", adam, ["chat", "config:admin"])


def test_a_member_cannot_give_a_key_the_configuration_scope(client_for, bob):
    assert create(client_for(bob), scopes=["config:admin"]).status_code == 403
    assert not ApiKey.objects.exists()


def test_a_viewer_is_offered_and_given_read_scopes_only(client_for, vera):
    c = client_for(vera)
    page = c.get(reverse("api_keys")).content.decode()
    assert 'value="traces:read"' in page and 'value="costs:read"' in page
    assert 'value="chat"' not in page and 'value="config:admin"' not in page
    assert "can read traces and costs but not chat" in page
    assert create(c, scopes=["chat"]).status_code == 403
    assert create(c, scopes=["traces:read", "costs:read"]).status_code == 200
    assert ApiKey.objects.get(user=vera).scopes == ["costs:read", "traces:read"]


# -- who sees which key -------------------------------------------------------------------------------
def test_people_see_their_own_keys_and_admins_all_of_the_team(client_for, alice, bob, adam, vera, team_a, team_b,
                                                              charlie, django_assert_max_num_queries):
    key_of(alice, team_a, "alice tool", kind="team")
    key_of(bob, team_a, "bob script")
    key_of(vera, team_a, "vera dashboard")
    key_of(charlie, team_b, "charlie thing")
    bob_page = client_for(bob).get(reverse("api_keys")).content.decode()
    assert "bob script" in bob_page and "alice tool" not in bob_page and "vera dashboard" not in bob_page
    c = client_for(adam)
    with django_assert_max_num_queries(8):
        admin_page = c.get(reverse("api_keys")).content.decode()
    assert all(name in admin_page for name in ("alice tool", "bob script", "vera dashboard"))
    assert "Acts as" in admin_page and "Team key" in admin_page
    assert "charlie thing" not in admin_page
    assert "alice tool" not in client_for(charlie).get(reverse("api_keys")).content.decode()


def test_the_list_shows_each_keys_state(client_for, alice, team_a):
    key_of(alice, team_a, "old", expires_at=timezone.now() + timedelta(seconds=1))
    ApiKey.objects.filter(name="old").update(expires_at=timezone.now() - timedelta(days=1))
    gone = key_of(alice, team_a, "gone")
    ApiKey.objects.filter(pk=gone.pk).update(revoked_at=timezone.now())
    key_of(alice, team_a, "live", rpm_limit=5)
    page = client_for(alice).get(reverse("api_keys")).content.decode()
    assert page.count(">Expired<") == 1 and page.count(">Revoked<") == 1 and page.count(">Active<") == 1
    assert "5 requests a minute" in page
    assert page.count(">Revoke<") == 2  # not for the revoked one


# -- revoking -------------------------------------------------------------------------------------------
def revoke(client, key):
    return client.post(reverse("api_key_revoke", args=[key.uuid]))


def test_the_keys_owner_revokes_it(client_for, bob, team_a):
    key = key_of(bob, team_a)
    response = revoke(client_for(bob), key)
    assert response.status_code == 302 and response.url == reverse("api_keys")
    key.refresh_from_db()
    assert key.state == "revoked"
    assert AuditEvent.objects.filter(object_type="agentsite.ApiKey", action="update", actor=bob).exists()
    assert revoke(client_for(bob), key).status_code == 302  # twice does nothing
    assert AuditEvent.objects.filter(object_type="agentsite.ApiKey", action="update").count() == 1


def test_an_admin_revokes_anyones_key_and_a_member_nobody_elses(client_for, alice, bob, vera, adam, team_a):
    alices = key_of(alice, team_a, kind="team")
    bobs = key_of(bob, team_a)
    assert revoke(client_for(bob), alices).status_code == 404
    assert revoke(client_for(vera), bobs).status_code == 404
    alices.refresh_from_db()
    bobs.refresh_from_db()
    assert alices.state == bobs.state == "active"
    assert revoke(client_for(adam), bobs).status_code == 302
    assert revoke(client_for(adam), alices).status_code == 302
    assert not ApiKey.objects.filter(revoked_at__isnull=True).exists()


def test_another_teams_key_is_not_found(client_for, alice, team_a, charlie):
    key = key_of(alice, team_a)
    c = client_for(charlie)
    assert revoke(c, key).status_code == 404
    assert c.post(reverse("api_key_revoke", args=["00000000-0000-0000-0000-000000000000"])).status_code == 404
    key.refresh_from_db()
    assert key.state == "active"


def test_the_team_menu_links_the_page(client_for, vera):
    assert reverse("api_keys").encode() in client_for(vera).get(reverse("members")).content


# -- per-person limits on the members page ------------------------------------------------------------
def limits(client, membership, rpm="", tpm=""):
    return client.post(reverse("membership_limits", args=[membership.uuid]), {"rpm_limit": rpm, "tpm_limit": tpm})


def test_an_admin_sets_and_clears_a_persons_limits_with_an_audit_trail(client_for, adam, bob, team_a):
    target = Membership.objects.get(user=bob, team=team_a)
    c = client_for(adam)
    assert limits(c, target, "20", "50000").status_code == 302
    target.refresh_from_db()
    assert (target.rpm_limit, target.tpm_limit) == (20, 50000)
    event = AuditEvent.objects.get(object_type="agentsite.Membership", action="update")
    assert event.actor == adam and event.changes == {"rpm_limit": (None, 20), "tpm_limit": (None, 50000)}
    assert "20 requests · 50,000 tokens a minute" in c.get(reverse("members")).content.decode()
    assert limits(c, target).status_code == 302
    target.refresh_from_db()
    assert (target.rpm_limit, target.tpm_limit) == (None, None)


def test_a_bad_limit_changes_nothing_and_says_why(client_for, alice, bob, team_a):
    target = Membership.objects.get(user=bob, team=team_a)
    response = client_for(alice).post(reverse("membership_limits", args=[target.uuid]),
                                      {"rpm_limit": "-3", "tpm_limit": "10"}, follow=True)
    assert "were not changed" in response.content.decode()
    target.refresh_from_db()
    assert (target.rpm_limit, target.tpm_limit) == (None, None)


def test_only_admins_set_limits_and_see_the_form(client_for, alice, bob, vera, adam, team_a, charlie):
    target = Membership.objects.get(user=vera, team=team_a)
    assert limits(client_for(bob), target, "1").status_code == 403
    assert limits(client_for(vera), target, "1").status_code == 403
    assert limits(client_for(charlie), target, "1").status_code == 404
    target.refresh_from_db()
    assert target.rpm_limit is None
    assert b'name="rpm_limit"' not in client_for(bob).get(reverse("members")).content
    assert b'name="rpm_limit"' in client_for(adam).get(reverse("members")).content
    assert b'name="rpm_limit"' in client_for(alice).get(reverse("members")).content


# -- resolving a key ------------------------------------------------------------------------------
def test_a_key_is_resolved_in_one_query_and_any_change_to_it_or_its_person_counts_at_once(
        bob, team_a, django_assert_num_queries):
    from agentsite.api_keys import ApiKeyRefused, api_key_authenticate

    key, secret = api_key_create(membership=member_of(bob, team_a), name="ci", scopes=["chat", "traces:read"])
    assert api_key_authenticate(secret).membership.role == "member"
    with django_assert_num_queries(1):  # the key's row, its team, person and membership: one read
        caller = api_key_authenticate(secret)
    assert (caller.user, caller.team, caller.key.pk) == (bob, team_a, key.pk)

    ApiKey.objects.filter(pk=key.pk).update(scopes=["traces:read"])
    assert api_key_authenticate(secret).key.scopes == ["traces:read"]
    Membership.objects.filter(team=team_a, user=bob).update(role="viewer", rpm_limit=7)
    caller = api_key_authenticate(secret)
    assert (caller.membership.role, caller.membership.rpm_limit) == ("viewer", 7)
    bob.is_active = False
    bob.save()
    with pytest.raises(ApiKeyRefused, match="no longer in the team"):
        api_key_authenticate(secret)
    bob.is_active = True
    bob.save()
    ApiKey.objects.filter(pk=key.pk).update(revoked_at=timezone.now())
    with pytest.raises(ApiKeyRefused, match="revoked"):
        api_key_authenticate(secret)
