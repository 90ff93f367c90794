from __future__ import annotations

from django.urls import reverse


def test_login_page_renders_and_logs_in(client, alice):
    page = client.get(reverse("login"))
    assert page.status_code == 200
    assert b'name="username"' in page.content

    response = client.post(reverse("login"), {"username": "alice", "password": "alice-pass-123"})
    assert response.status_code == 302 and response.url == reverse("home")
    home = client.get(reverse("home"))
    assert home.status_code == 200
    assert b"Team A" in home.content


def test_wrong_password_is_refused_with_a_clear_message(client, alice):
    response = client.post(reverse("login"), {"username": "alice", "password": "nope"})
    assert response.status_code == 200
    assert b"did not match" in response.content
    assert "_auth_user_id" not in client.session


def test_logout_is_a_post_and_ends_the_session(client_for, alice):
    c = client_for(alice)
    assert c.get(reverse("home")).status_code == 200
    response = c.post(reverse("logout"))
    assert response.status_code == 302
    assert c.get(reverse("home")).status_code == 302  # back to login


def test_pages_require_login(client):
    for name in ("home", "members", "team_create", "password_change"):
        response = client.get(reverse(name))
        assert response.status_code == 302
        assert response.url.startswith(reverse("login"))


def test_password_change(client_for, alice):
    c = client_for(alice)
    response = c.post(
        reverse("password_change"),
        {"old_password": "alice-pass-123", "new_password1": "a-new-Long-passphrase-42", "new_password2": "a-new-Long-passphrase-42"},
    )
    assert response.status_code == 302
    alice.refresh_from_db()
    assert alice.check_password("a-new-Long-passphrase-42")


def test_open_signup_is_off_by_default(client, db):
    assert client.get(reverse("signup")).status_code == 404


def test_open_signup_when_enabled_creates_an_owned_team(client, db, settings):
    settings.OPEN_SIGNUP = True
    response = client.post(
        reverse("signup"),
        {"username": "dora", "email": "", "password1": "Corr3ct-horse-battery", "password2": "Corr3ct-horse-battery"},
    )
    assert response.status_code == 302
    from agentsite.models import Membership

    membership = Membership.objects.get(user__username="dora")
    assert membership.role == "owner"
    assert client.get(reverse("home")).status_code == 200


def test_user_without_team_is_sent_to_explanation(client_for, django_user_model):
    loner = django_user_model.objects.create_user("loner", password="x-pass-123456")
    c = client_for(loner)
    response = c.get(reverse("home"))
    assert response.status_code == 302 and response.url == reverse("no_team")
    assert b"not in a team" in c.get(reverse("no_team")).content
