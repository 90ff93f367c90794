"""Signing in and the signed-in person of a request, with their teams in the same query.

Every page needs the person and their memberships (``ActiveTeamMiddleware``): Django's
``ModelBackend`` reads the person, then the middleware their memberships, two queries per
request. This backend reads the memberships with the person joined (one query) and hands the
middleware the list; a person in no team is read the usual way.

Sessions signed in before this backend existed name Django's, which stays listed after it so
they stay signed in; a failed password check here ends the sign-in (``PermissionDenied``)
instead of running the same check again in Django's backend.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.backends import ModelBackend
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet

from .db.prepared import Prepared
from .models import Membership

# The attribute that carries the memberships read with the person.
MEMBERSHIPS_ATTR = "_memberships"


class MembershipBackend(ModelBackend):
    def authenticate(self, request: Any, username: str | None = None, password: str | None = None,
                     **kwargs: Any) -> Any:
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is None and username is not None and password is not None:
            raise PermissionDenied  # the password was checked once; no other backend checks it
        return user

    def get_user(self, user_id: Any) -> Any:
        # Every signed-in request reads this: compiled once per process.
        memberships = _memberships_with_user(user_id) if type(user_id) is int else list(  # noqa: E721
            _memberships_query(user_id))
        if not memberships:
            return super().get_user(user_id)
        user = memberships[0].user
        if not self.user_can_authenticate(user):
            return None
        for membership in memberships:
            membership.user = user
        setattr(user, MEMBERSHIPS_ATTR, memberships)
        return user


def _memberships_query(user_id: int) -> QuerySet[Membership]:
    return Membership.objects.filter(user_id=user_id).select_related("user", "team").order_by("team__name", "team_id")


_memberships_with_user = Prepared(_memberships_query)


def memberships_read_with(user: Any) -> list[Membership] | None:
    """The memberships read with ``user`` when they were signed in (None: not read)."""
    return getattr(user, MEMBERSHIPS_ATTR, None)
