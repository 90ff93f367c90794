"""Password reset by e-mail: there when an e-mail backend is configured (EMAIL_URL), absent
otherwise; the link works once and sets a password that signs in."""

from __future__ import annotations

import re

import pytest
from django.core import mail
from django.test import Client
from django.urls import reverse

pytestmark = pytest.mark.django_db


def test_without_email_there_is_no_link_and_no_page(client, settings):
    settings.PASSWORD_RESET_BY_EMAIL = False
    assert "Forgot your password?" not in client.get(reverse("login")).content.decode()
    assert client.get(reverse("password_reset")).status_code == 404


def test_the_emailed_link_sets_a_new_password_once(client, alice, settings):
    settings.PASSWORD_RESET_BY_EMAIL = True
    alice.email = "alice@example.com"
    alice.save()
    assert "Forgot your password?" in client.get(reverse("login")).content.decode()
    response = client.post(reverse("password_reset"), {"email": "alice@example.com"})
    assert response.status_code == 302 and len(mail.outbox) == 1
    link = re.search(r"https?://[^/]+(/accounts/reset/\S+/)", mail.outbox[0].body).group(1)
    assert "alice" in mail.outbox[0].body
    form_page = client.get(link, follow=True)
    assert form_page.status_code == 200 and "Choose a new password" in form_page.content.decode()
    done = client.post(form_page.redirect_chain[-1][0], {"new_password1": "a-new-Long-pass-42",
                                                         "new_password2": "a-new-Long-pass-42"})
    assert done.status_code == 302
    fresh = Client()
    assert fresh.post(reverse("login"), {"username": "alice", "password": "a-new-Long-pass-42"}).status_code == 302
    again = client.get(link, follow=True).content.decode()
    assert "has been used or has expired" in again


def test_an_unknown_address_gets_the_same_answer_and_no_mail(client, settings):
    settings.PASSWORD_RESET_BY_EMAIL = True
    response = client.post(reverse("password_reset"), {"email": "nobody@example.com"})
    assert response.status_code == 302 and mail.outbox == []
