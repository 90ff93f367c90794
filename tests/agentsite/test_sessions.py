"""The site's session store reads a session with a query compiled once per process: it reads
what Django's database store reads (a live session's data; nothing for an expired one or an
unknown key, which the next save replaces with a new key)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.sessions.backends.db import SessionStore as DjangoStore
from django.contrib.sessions.models import Session
from django.utils import timezone

from agentsite.sessions import SessionStore
from tests.helpers import work_counted

pytestmark = pytest.mark.django_db


def test_a_live_session_is_read_in_one_query_as_djangos_store_reads_it():
    made = SessionStore()
    made["team"] = "a"
    made.save()

    for _ in range(2):
        with work_counted() as work:
            assert SessionStore(made.session_key)["team"] == "a"
        assert len(work.sql) == 1
    assert dict(SessionStore(made.session_key).load()) == dict(DjangoStore(made.session_key).load())


def test_an_expired_session_or_an_unknown_key_reads_as_empty_and_gets_a_new_key():
    made = SessionStore()
    made["team"] = "a"
    made.save()
    Session.objects.filter(session_key=made.session_key).update(
        expire_date=timezone.now() - timedelta(seconds=1))

    for key in (made.session_key, "x" * 32, None):
        store = SessionStore(key)
        assert store.load() == {}
        assert store.session_key is None
        store["team"] = "b"
        store.save()
        assert store.session_key not in (None, made.session_key)
