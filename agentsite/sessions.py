"""The site's session store: Django's database sessions, whose read (every signed-in request
makes it) is built and compiled once per process (``agentsite.db.prepared``) instead of at every
request. Everything else is Django's ``db`` store: set ``SESSION_ENGINE = "agentsite.sessions"``.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.contrib.sessions.backends.db import SessionStore as DbSessionStore
from django.contrib.sessions.models import Session
from django.core.exceptions import SuspiciousOperation
from django.db.models import QuerySet
from django.utils import timezone

from agentsite.db.prepared import Prepared


def _current(session_key: str, now: datetime) -> QuerySet[Session]:
    return Session.objects.filter(session_key=session_key, expire_date__gt=now)


_current_read = Prepared(_current)


class SessionStore(DbSessionStore):
    def _get_session_from_db(self) -> Session | None:
        key = self.session_key
        try:
            if not isinstance(key, str):
                raise Session.DoesNotExist
            return _current_read.get(key, timezone.now())
        except (Session.DoesNotExist, SuspiciousOperation) as exc:
            if isinstance(exc, SuspiciousOperation):
                logging.getLogger(f"django.security.{exc.__class__.__name__}").warning(str(exc))
            self._session_key = None
            return None
