from __future__ import annotations

import sys
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.templatetags.static import static
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views import defaults
from django.views.decorators.http import require_http_methods, require_POST

from . import selectors, services
from .access import SESSION_KEY, get_for_team_or_404, team_for_user_or_404, team_required
from .db import DATABASE_LOST_MESSAGE, connection_lost
from .forms import InvitationForm, LimitsForm, RoleForm, SignupForm, TeamForm
from .models import Invitation, Membership

Role = Membership.Role


def _safe_next(request: HttpRequest, fallback: str = "home") -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(target, {request.get_host()}, require_https=request.is_secure()):
        return target
    return reverse(fallback)


def favicon(request: HttpRequest) -> HttpResponse:
    """Browsers ask for /favicon.ico; the icon is a static file (hashed name in production)."""
    return redirect(static("img/favicon.svg"), permanent=True)


# -- teams ----------------------------------------------------------------------------------------
@login_required
def no_team(request: HttpRequest) -> HttpResponse:
    if request.membership is not None:
        return redirect("home")
    return render(request, "teams/no_team.html")


@login_required
@require_http_methods(["GET", "POST"])
def team_create(request: HttpRequest) -> HttpResponse:
    form = TeamForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        team = services.team_create(name=form.cleaned_data["name"], owner=request.user)
        request.session[SESSION_KEY] = str(team.uuid)
        messages.success(request, f"Team “{team.name}” created. You are its owner.")
        return redirect("members")
    return render(request, "teams/create.html", {"form": form})


@login_required
@require_POST
def team_switch(request: HttpRequest) -> HttpResponse:
    team, _membership = team_for_user_or_404(request.user, request.POST.get("team", ""))
    request.session[SESSION_KEY] = str(team.uuid)
    return redirect(_safe_next(request))


# -- members --------------------------------------------------------------------------------------
def _members_context(request: HttpRequest, **extra) -> dict:
    membership: Membership = request.membership
    context = {
        "members": selectors.team_members(request.team),
        "invitations": selectors.team_pending_invitations(request.team) if membership.can_invite else [],
        "invite_form": InvitationForm(actor_role=membership.role) if membership.can_invite else None,
        "roles": Role.choices,
        "role_help": [(Role(value).label, Membership.ROLE_HELP[value]) for value, _ in Role.choices],
    }
    context.update(extra)
    return context


MEMBERS_PARTS = {"member-list", "invitation-list"}


@team_required()
def members(request: HttpRequest) -> HttpResponse:
    template = "teams/members.html"
    part = request.GET.get("part")
    if request.htmx and part in MEMBERS_PARTS:
        # Live refresh after a team event: just the region that changed.
        template += "#" + part
    return render(request, template, _members_context(request))


@team_required(Role.ADMIN, action="invite people")
@require_POST
def invitation_create(request: HttpRequest) -> HttpResponse:
    form = InvitationForm(request.POST, actor_role=request.membership.role)
    if not form.is_valid():
        return render(request, "teams/members.html", _members_context(request, invite_form=form), status=400)
    issued = services.invitation_create(actor=request.membership, role=form.cleaned_data["role"], email=form.cleaned_data["email"])
    link = request.build_absolute_uri(reverse("invitation_accept", args=[issued.token]))
    # The link is shown once: only its hash is stored.
    return render(request, "teams/members.html", _members_context(request, new_invitation_link=link, new_invitation=issued.invitation))


@team_required(Role.ADMIN, action="revoke invitations")
@require_POST
def invitation_revoke(request: HttpRequest, invitation_uuid) -> HttpResponse:
    invitation = get_for_team_or_404(Invitation, request.team, uuid=invitation_uuid)
    services.invitation_revoke(actor=request.membership, invitation=invitation)
    messages.success(request, "Invitation revoked.")
    return redirect("members")


@team_required(Role.OWNER, action="change roles")
@require_POST
def membership_role(request: HttpRequest, membership_uuid) -> HttpResponse:
    target = get_for_team_or_404(Membership.objects.select_related("user", "team"), request.team, uuid=membership_uuid)
    form = RoleForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose one of the roles in the list.")
        return redirect("members")
    try:
        services.membership_change_role(actor=request.membership, membership=target, role=form.cleaned_data["role"])
    except services.TeamActionError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"{target.user.get_username()} is now {Role(target.role).label.lower()}.")
    return redirect("members")


@team_required(Role.ADMIN, action="set people's limits")
@require_POST
def membership_limits(request: HttpRequest, membership_uuid) -> HttpResponse:
    target = get_for_team_or_404(Membership.objects.select_related("user", "team"), request.team, uuid=membership_uuid)
    form = LimitsForm(request.POST)
    if not form.is_valid():
        problems = " ".join(f"{form.fields[name].label}: {' '.join(errors)}" for name, errors in form.errors.items())
        messages.error(request, f"The limits of {target.user.get_username()} were not changed. {problems}")
        return redirect("members")
    services.membership_set_limits(actor=request.membership, membership=target,
                                   rpm_limit=form.cleaned_data["rpm_limit"], tpm_limit=form.cleaned_data["tpm_limit"])
    messages.success(request, f"Limits of {target.user.get_username()} saved.")
    return redirect("members")


@team_required(Role.VIEWER)
@require_POST
def membership_remove(request: HttpRequest, membership_uuid) -> HttpResponse:
    target = get_for_team_or_404(Membership.objects.select_related("user", "team"), request.team, uuid=membership_uuid)
    leaving = target.pk == request.membership.pk
    if not leaving and not request.membership.can_manage_members:
        raise PermissionDenied("Only a team owner can remove members.")
    try:
        services.membership_remove(actor=request.membership, membership=target)
    except services.TeamActionError as exc:
        messages.error(request, exc.message)
        return redirect("members")
    if leaving:
        request.session.pop(SESSION_KEY, None)
        messages.success(request, f"You left {target.team.name}.")
        return redirect("home")
    messages.success(request, f"{target.user.get_username()} was removed from the team.")
    return redirect("members")


# -- invitations and sign-up ----------------------------------------------------------------------
@require_http_methods(["GET", "POST"])
def invitation_accept(request: HttpRequest, token: str) -> HttpResponse:
    invitation = services.invitation_for_token(token)
    if invitation is None:
        raise Http404("This invitation link is not valid.")
    context = {"invitation": invitation, "token": token}
    if not invitation.is_usable:
        return render(request, "teams/invitation.html", context, status=410)

    if request.user.is_authenticated:
        context["already_member"] = Membership.objects.filter(team=invitation.team, user=request.user).exists()
        if request.method == "POST":
            try:
                membership = services.invitation_accept(token=token, user=request.user)
            except services.TeamActionError as exc:
                messages.error(request, exc.message)
                return redirect("invitation_accept", token=token)
            request.session[SESSION_KEY] = str(membership.team.uuid)
            messages.success(request, f"Welcome to {membership.team.name}.")
            return redirect("home")
        return render(request, "teams/invitation.html", context)

    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            user, membership = services.user_signup_with_invitation(
                token=token,
                username=form.cleaned_data["username"],
                password=form.cleaned_data["password1"],
                email=form.cleaned_data["email"],
            )
        except services.TeamActionError as exc:
            messages.error(request, exc.message)
            return redirect("invitation_accept", token=token)
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        request.session[SESSION_KEY] = str(membership.team.uuid)
        messages.success(request, f"Welcome to {membership.team.name}.")
        return redirect("home")
    context["form"] = form
    return render(request, "teams/invitation.html", context)


@require_http_methods(["GET", "POST"])
def signup(request: HttpRequest) -> HttpResponse:
    """Open sign-up: off unless ``OPEN_SIGNUP`` is set. A new account gets a team of its own."""
    if not settings.OPEN_SIGNUP:
        raise Http404("Sign-up is by invitation only.")
    if request.user.is_authenticated:
        return redirect("home")
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user, team = services.user_signup_with_team(
            username=form.cleaned_data["username"],
            password=form.cleaned_data["password1"],
            email=form.cleaned_data["email"],
        )
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        request.session[SESSION_KEY] = str(team.uuid)
        return redirect("home")
    return render(request, "registration/signup.html", {"form": form})


def signin_locked_out(request: HttpRequest, credentials: Any = None, *args: Any, **kwargs: Any) -> HttpResponse:
    """django-axes' answer to a locked-out sign-in (``AXES_LOCKOUT_CALLABLE``): a 429 page that
    says how long the lock lasts and who can lift it."""
    return render(request, "registration/locked_out.html", {
        "failure_limit": settings.AXES_FAILURE_LIMIT,
        "cooloff_minutes": settings.AXES_COOLOFF_MINUTES,
    }, status=429)


def email_configured(view: Any) -> Any:
    """``view``, or a 404 while no e-mail backend is configured (``EMAIL_URL``)."""

    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not settings.PASSWORD_RESET_BY_EMAIL:
            raise Http404("Password reset by e-mail is not set up on this site.")
        return view(request, *args, **kwargs)

    return wrapped


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: an error the request did not handle. When it is its database connection
    that broke (a failover, a PgBouncer restart), 503 with ``Retry-After``: nothing of the
    request was kept, and the next one gets a live connection from the pool."""
    exc = sys.exc_info()[1]
    if exc is not None and connection_lost(exc):
        response = HttpResponse(DATABASE_LOST_MESSAGE, status=503,
                                content_type="text/plain; charset=utf-8")
        response["Retry-After"] = "1"
        return response
    return defaults.server_error(request)
