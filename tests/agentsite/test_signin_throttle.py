"""Sign-in throttling (django-axes): after AXES_FAILURE_LIMIT wrong passwords an account is
locked out, even with the right password, with a page that says so, while others at the same
address are not; behind a trusted reverse proxy the forwarded address counts; an admin unlocks
it."""

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


def test_one_persons_failures_do_not_lock_out_others_at_the_same_address(alice, bob, settings):
    # An office, or everyone behind one reverse proxy, shares an address.
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT):
        attempt(client, "alice", "wrong", address="192.0.2.9")
    assert attempt(client, "alice", persona_password("alice"), address="192.0.2.9").status_code == 429
    assert attempt(Client(), "bob", persona_password("bob"), address="192.0.2.9").status_code == 302


def proxied(username: str, password: str, forwarded: str):
    """A sign-in through a reverse proxy on this host that appends to X-Forwarded-For."""
    return Client().post(LOGIN, {"username": username, "password": password},
                         REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR=forwarded)


def test_behind_a_trusted_proxy_the_forwarded_address_is_counted(alice, settings):
    settings.TRUSTED_PROXIES = 1
    for _ in range(settings.AXES_FAILURE_LIMIT):
        # what the client wrote itself (left of the proxy's entry) changes every time: ignored
        proxied("alice", "wrong", f"10.9.9.{_}, 203.0.113.5")
    recorded = set(AccessAttempt.objects.values_list("ip_address", flat=True))
    assert recorded == {"203.0.113.5"}
    assert proxied("alice", persona_password("alice"), "203.0.113.5").status_code == 429


def test_without_a_trusted_proxy_the_header_is_ignored(alice, settings):
    settings.TRUSTED_PROXIES = 0
    proxied("alice", "wrong", "203.0.113.5")
    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {"127.0.0.1"}
