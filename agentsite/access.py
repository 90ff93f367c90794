"""Team-scoped access: the one way views, consumers, admin pages, exports and tools reach objects.

Rules:
* An object of a team the user is not a member of does not exist for them: 404, never 403, so
  ids cannot be probed.
* Inside their own team, a role that is too low for an action is a 403 with a plain message.

The person's membership is the request's context, resolved once: per request by
``ActiveTeamMiddleware`` (``request.membership``, with its ``team``, ``role`` and ``user``
read with it), per API key by its authentication (``Caller.membership``), and per socket at
connect (``membership_for``, through ``database_sync_to_async``; again only when access may
have changed). Services and selectors take that membership and never look it up again.

Views use ``team_required(role)``; they then find ``request.team`` and ``request.membership``
set, and load objects with ``get_for_team_or_404(Model, request.team, ...)``.

Inside a team, what belongs to one person (a conversation, its traces, their memory) is seen by
that person, by the team's owners and admins, and by everyone in the team once it is shared:
``own_or_shared``. The apps apply it to their models (``agents.access``,
``traces.record.selectors``, ``memory.selectors``); see "Privacy inside a team" in
docs/architecture.md.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import models
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect

from .models import Membership, Team

M = TypeVar("M", bound=models.Model)
Role = Membership.Role

SESSION_KEY = "active_team"


def memberships_for(user: Any) -> models.QuerySet[Membership]:
    if not getattr(user, "is_authenticated", False):
        return Membership.objects.none()
    return Membership.objects.filter(user=user).select_related("team").order_by("team__name", "team_id")


def membership_for(user: Any, team: Team | int | None) -> Membership | None:
    """The user's membership of ``team``, or None. Works with a Team or its primary key."""
    if team is None or not getattr(user, "is_authenticated", False):
        return None
    team_id = team.pk if isinstance(team, Team) else team
    return Membership.objects.select_related("team").filter(user=user, team_id=team_id).first()


def request_membership(request: HttpRequest, team: Team | int) -> Membership | None:
    """The person's membership of ``team`` among those the request resolved already
    (``request.memberships``, set by ``ActiveTeamMiddleware``); None when they have none."""
    team_id = team.pk if isinstance(team, Team) else team
    return next((m for m in getattr(request, "memberships", ()) if m.team_id == team_id), None)


def team_for_user_or_404(user: Any, team_uuid: Any) -> tuple[Team, Membership]:
    """The team with this public id if the user belongs to it; otherwise 404."""
    try:
        membership = memberships_for(user).get(team__uuid=team_uuid)
    except (Membership.DoesNotExist, ValueError, TypeError, ValidationError) as exc:  # bad ids are 404 too
        raise Http404("No such team.") from exc
    return membership.team, membership


def scoped(queryset: models.QuerySet[M] | type[M], team: Team, *, field: str = "team") -> models.QuerySet[M]:
    """``queryset`` limited to ``team``'s objects. ``field`` is the path to the team."""
    qs = queryset._default_manager.all() if isinstance(queryset, type) else queryset
    return qs.filter(**{field: team})


def visible_to(queryset: models.QuerySet[M] | type[M], user: Any, *, field: str = "team") -> models.QuerySet[M]:
    """``queryset`` limited to the teams the user belongs to (for lists across teams)."""
    qs = queryset._default_manager.all() if isinstance(queryset, type) else queryset
    if not getattr(user, "is_authenticated", False):
        return qs.none()
    return qs.filter(**{f"{field}__memberships__user": user})


def get_for_team_or_404(
    queryset: models.QuerySet[M] | type[M], team: Team, *, field: str = "team", **lookup: Any
) -> M:
    """One object of ``team`` matching ``lookup``; an object of any other team is a 404."""
    try:
        return scoped(queryset, team, field=field).get(**lookup)
    except (models.ObjectDoesNotExist, ValueError, TypeError, ValidationError) as exc:
        raise Http404("Not found.") from exc


def get_for_user_or_404(
    queryset: models.QuerySet[M] | type[M], user: Any, *, field: str = "team", **lookup: Any
) -> M:
    """One object matching ``lookup`` in any team the user belongs to; otherwise 404."""
    try:
        return visible_to(queryset, user, field=field).distinct().get(**lookup)
    except (models.ObjectDoesNotExist, ValueError, TypeError, ValidationError) as exc:
        raise Http404("Not found.") from exc


def require_role(membership: Membership | None, minimum: str, action: str = "do this") -> Membership:
    """Raise 404 without a membership, 403 when the role is below ``minimum``."""
    if membership is None:
        raise Http404("Not found.")
    if not membership.has_role(minimum):
        label = Role(minimum).label.lower()
        raise PermissionDenied(f"You need to be a team {label} or above to {action}.")
    return membership


def team_required(minimum: str = Role.VIEWER, *, action: str = "see this page") -> Callable:
    """View decorator: logged in, an active team, and at least the ``minimum`` role in it.

    Without any team the user is sent to the page that explains how to get one."""

    def decorator(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @login_required
        @functools.wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            membership = getattr(request, "membership", None)
            if membership is None:
                return redirect("no_team")
            require_role(membership, minimum, action)
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


# -- inside a team: what belongs to one person ----------------------------------------------------
def sees_all_of_team(membership: Membership | None) -> bool:
    """Team owners and admins see every conversation, trace and memory entry of their team."""
    return membership is not None and membership.has_role(Role.ADMIN)


def viewer_standin(team_id: int, user_id: int, *, sees_all: bool) -> Membership:
    """A membership as the visibility rules (``own_or_shared``) read one: its team, its person
    and whether it sees the whole team. For a read compiled once per kind of viewer
    (``agentsite.db.prepared``)."""
    return Membership(team_id=team_id, user_id=user_id, role=Membership.Role.ADMIN if sees_all else Membership.Role.MEMBER)


def own_or_shared(membership: Membership | None, *, owner: str, shared: str) -> Q:
    """The filter for the rows ``membership`` may see among its team's rows that belong to one
    person (the user at lookup ``owner``) and are shown to the whole team when lookup ``shared``
    is true: every row for owners and admins; otherwise their own rows and the shared ones. A row
    whose owner is gone (no user) is for owners and admins only, shared or not. Callers limit
    the rows to the team first."""
    if membership is None:
        return Q(pk__in=[])
    if sees_all_of_team(membership):
        return Q()
    return Q(**{owner: membership.user_id}) | Q(**{shared: True, f"{owner}__isnull": False})


def may_act_for(membership: Membership | None, owner_id: int | None) -> bool:
    """Whether ``membership`` may act in what belongs to the user ``owner_id`` (send, stop,
    approve, manage): that person or the team's owners and admins, never a viewer."""
    if membership is None or not membership.can_chat:
        return False
    return (owner_id is not None and owner_id == membership.user_id) or sees_all_of_team(membership)


def visible_by_uuid(user: Any, model: type[models.Model], uuid: Any,
                    visible: Callable[[Membership], models.QuerySet]) -> bool:
    """Whether ``user`` may see the ``model`` row with this public id, by ``visible`` (the
    model's privacy rule: the rows a membership may see). For consumers, which get an id."""
    try:
        team_id = model._default_manager.filter(uuid=uuid).values_list("team_id", flat=True).first()
    except (ValueError, TypeError, ValidationError):
        return False
    membership = membership_for(user, team_id)
    return membership is not None and visible(membership).filter(uuid=uuid).exists()
