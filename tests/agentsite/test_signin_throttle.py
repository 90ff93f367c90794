"""Sign-in throttling (django-axes): after AXES_FAILURE_LIMIT wrong passwords an account — and
an address — is locked out, even with the right password, with a page that says so; an admin
unlocks it."""

from __future__ import annotations

import pytest
from axes.models import AccessAttempt
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from agentsite.personas import persona_password

pytestmark = pytest.mark.django_db

LOGIN = reverse("login")


def attempt(client: Client, username: str, password: str, address: str = "203.0.113.5"):
    return client.post(LOGIN, {"username": username, "password": password}, REMOTE_ADDR=address)


def test_wrong_passwords_lock_the_account_even_for_the_right_one(alice, settings):
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert attempt(client, "alice", "wrong").status_code == 200
    locked = attempt(client, "alice", "wrong")
    assert locked.status_code == 429
    right = attempt(client, "alice", persona_password("alice"))
    body = right.content.decode()
    assert right.status_code == 429 and "_auth_user_id" not in client.session
    assert "Too many sign-in attempts" in body and f"{settings.AXES_COOLOFF_MINUTES} minutes" in body
    # from another address the account is still locked (per account) ...
    assert attempt(Client(), "alice", "wrong", address="198.51.100.7").status_code == 429
    # ... and an admin's unlock lets the right password in again
    call_command("axes_reset_username", "alice")
    call_command("axes_reset_ip", "198.51.100.7")
    assert not AccessAttempt.objects.filter(username="alice").exists()
    assert attempt(Client(), "alice", persona_password("alice"), address="198.51.100.7").status_code == 302


def test_one_address_trying_many_accounts_is_locked_too(alice, bob, vera, settings):
    settings.AXES_FAILURE_LIMIT = 3
    client = Client()
    for name in ("alice", "bob"):
        attempt(client, name, "wrong", address="192.0.2.9")
    assert attempt(client, "vera", "wrong", address="192.0.2.9").status_code == 429
    # another address, another account: unaffected
    assert attempt(Client(), "charlie", "wrong", address="192.0.2.10").status_code == 200
