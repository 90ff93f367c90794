"""The signed-in person of a request is read with their teams in one query."""

from __future__ import annotations

from unittest import mock

import pytest
from django.contrib.auth import BACKEND_SESSION_KEY, base_user, get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from agentsite.auth_backend import MembershipBackend, memberships_read_with
from agentsite.models import Membership

pytestmark = pytest.mark.django_db


def test_the_person_and_their_memberships_are_one_query(alice, django_assert_num_queries):
    with django_assert_num_queries(1):
        user = MembershipBackend().get_user(alice.pk)
    assert user == alice
    read = memberships_read_with(user)
    assert read == list(Membership.objects.filter(user=alice).order_by("team__name", "team_id"))
    assert all(m.user is user for m in read)


def test_a_page_does_not_read_the_person_again(client_for, alice):
    client = client_for(alice)
    with CaptureQueriesContext(connection) as queries:
        assert client.get(reverse("home")).status_code == 200
    person_reads = [q["sql"] for q in queries
                    if q["sql"].startswith('SELECT "auth_user"."id", "auth_user"."password"')]
    assert person_reads == []  # read with the memberships, joined


def test_an_inactive_person_is_not_signed_in_and_a_person_in_no_team_is(alice):
    loner = get_user_model().objects.create_user("loner", password="x" * 12)
    assert MembershipBackend().get_user(loner.pk) == loner
    alice.is_active = False
    alice.save(update_fields=["is_active"])
    assert MembershipBackend().get_user(alice.pk) is None


def test_a_session_signed_in_with_djangos_backend_stays_signed_in(alice):
    client = Client()
    client.force_login(alice, backend="django.contrib.auth.backends.ModelBackend")
    assert client.session[BACKEND_SESSION_KEY] == "django.contrib.auth.backends.ModelBackend"
    assert client.get(reverse("home")).status_code == 200
    assert client.get(reverse("home")).wsgi_request.user == alice


def test_a_wrong_password_is_checked_once(alice):
    checked = mock.Mock(wraps=base_user.check_password)
    client = Client()
    with mock.patch.object(base_user, "check_password", checked):
        client.post(reverse("login"), {"username": "alice", "password": "wrong password!"})
    assert checked.call_count == 1 and "_auth_user_id" not in client.session
    client.post(reverse("login"), {"username": "alice", "password": "alice-pass-123"})
    assert client.session[BACKEND_SESSION_KEY] == "agentsite.auth_backend.MembershipBackend"
