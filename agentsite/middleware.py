from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from .access import SESSION_KEY, memberships_for
from .auth_backend import memberships_read_with


class ActiveTeamMiddleware:
    """Sets ``request.team`` and ``request.membership`` from the team kept in the session.

    The session holds the active team's public id; when it is missing or the user no longer
    belongs to that team, the first of the user's teams is used. ``request.memberships`` lists
    all of them for the team switcher."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request.team = None
        request.membership = None
        request.memberships = []
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            memberships = memberships_read_with(user)
            if memberships is None:
                memberships = list(memberships_for(user))
            request.memberships = memberships
            wanted = request.session.get(SESSION_KEY)
            chosen = next((m for m in memberships if str(m.team.uuid) == wanted), None)
            if chosen is None and memberships:
                chosen = memberships[0]
                request.session[SESSION_KEY] = str(chosen.team.uuid)
            if chosen is not None:
                request.membership = chosen
                request.team = chosen.team
        return self.get_response(request)


class ContentSecurityPolicyMiddleware:
    """No inline scripts, no third-party origins: model and tool output cannot run code or load
    remote content even if something were rendered unescaped."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.policy = getattr(settings, "CONTENT_SECURITY_POLICY", "")

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if self.policy and "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = self.policy
        return response
