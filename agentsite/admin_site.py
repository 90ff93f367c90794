"""The admin, opened to team admins and owners and scoped to their teams.

Team admins are not Django staff and hold no Django permissions: what they may see and change
is decided by their role in each team. ``TeamScopedAdmin`` is the base for every model that
belongs to a team; it filters every list, form choice and object lookup to the teams where the
user is an admin or owner, so another team's object is simply not found (404)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth.views import redirect_to_login
from django.contrib.contenttypes.models import ContentType
from django.contrib.contenttypes.views import shortcut
from django.core.exceptions import PermissionDenied
from django.db import models
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import path

from .models import Membership, Team

Role = Membership.Role
ADMIN_ROLES = (Role.ADMIN, Role.OWNER)


def admin_team_ids(request: HttpRequest) -> set[int]:
    """Teams where the user may edit configuration; cached on the request."""
    cached = getattr(request, "_admin_team_ids", None)
    if cached is None:
        user = request.user
        if not (user.is_active and user.is_authenticated):
            cached = set()
        else:
            cached = set(
                Membership.objects.filter(user=user, role__in=ADMIN_ROLES).values_list("team_id", flat=True)
            )
        request._admin_team_ids = cached
    return cached


def who_may_edit(request: HttpRequest) -> str:
    membership = getattr(request, "membership", None)
    sentence = ("The admin is where a team's admins and owners set up agents, providers, tools "
                "and prices; your role does not include it.")
    if membership is None:
        return sentence
    owners = list(Membership.objects.filter(team_id=membership.team_id, role=Role.OWNER)
                  .values_list("user__username", flat=True).order_by("user__username")[:3])
    ask = f" Ask {' or '.join(owners)} (owner) to make you an admin if you need it." if owners else ""
    return (f"{sentence} You are {membership.get_role_display().lower()} in "
            f"{membership.team.name}.{ask}")


class AgentsiteAdminSite(admin.AdminSite):
    site_header = "agentsite admin"
    site_title = "agentsite admin"
    index_title = "Configuration"

    def has_permission(self, request: HttpRequest) -> bool:
        user = request.user
        if not (user.is_active and user.is_authenticated):
            return False
        return user.is_superuser or bool(admin_team_ids(request))

    def login(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        """The app signs people in, not Django's admin form; someone signed in whose role does
        not let them edit gets the app's 403 page saying who can."""
        if not request.user.is_authenticated:
            return redirect_to_login(request.GET.get("next") or request.get_full_path())
        if not self.has_permission(request):
            raise PermissionDenied(who_may_edit(request))
        return super().login(request, extra_context)

    def get_urls(self) -> list[Any]:
        # "View on site" (/admin/r/<type>/<id>/) answers only for objects of the user's own
        # teams: Django's view redirects for any object that exists, which told a team admin
        # whether another team's object id existed.
        return [path("r/<int:content_type_id>/<path:object_id>/", self.admin_view(self.view_on_site),
                     name="view_on_site"), *super().get_urls()]

    def view_on_site(self, request: HttpRequest, content_type_id: int, object_id: str) -> HttpResponse:
        if not request.user.is_superuser:
            try:
                model = ContentType.objects.get_for_id(content_type_id).model_class()
                field = {f.name for f in model._meta.get_fields()} if model else set()
                found = ("team" in field and model._default_manager.filter(
                    pk=object_id, team_id__in=admin_team_ids(request)).exists())
            except (ContentType.DoesNotExist, ValueError, TypeError) as exc:
                raise Http404("Not found.") from exc
            if not found:
                raise Http404("Not found.")
        return shortcut(request, content_type_id, object_id)


class TeamScopedAdmin(admin.ModelAdmin):
    """Base for team-owned models. ``team_field`` is the path from the model to its Team."""

    team_field = "team"
    # Roles allowed to change objects; owners-only models narrow it.
    edit_roles: tuple[str, ...] = ADMIN_ROLES

    def _team_ids(self, request: HttpRequest, roles: tuple[str, ...] | None = None) -> set[int]:
        ids = admin_team_ids(request)
        if roles is None or set(roles) >= set(ADMIN_ROLES):
            return ids
        return set(
            Membership.objects.filter(user=request.user, role__in=roles, team_id__in=ids).values_list("team_id", flat=True)
        )

    def _get_obj_does_not_exist_redirect(self, request: HttpRequest, opts: Any,
                                         object_id: str) -> HttpResponse:
        # Another team's object is not found, like any other page of it: Django's redirect
        # with a message would tell ids that exist apart from ids that do not.
        raise Http404(f"No such {opts.verbose_name}.")

    def get_queryset(self, request: HttpRequest) -> models.QuerySet:
        qs = super().get_queryset(request)
        if request.user.is_superuser:
            return qs
        lookup = "id__in" if self.team_field == "" else f"{self.team_field}__in"
        return qs.filter(**{lookup: self._team_ids(request)})

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        """A new object starts in the user's team when they can edit only one."""
        initial = super().get_changeform_initial_data(request)
        if self.team_field == "team" and "team" not in initial:
            teams = self._team_ids(request, self.edit_roles)
            if len(teams) == 1:
                initial["team"] = next(iter(teams))
        return initial

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any):
        if db_field.related_model is Team and not request.user.is_superuser:
            kwargs["queryset"] = Team.objects.filter(id__in=self._team_ids(request, self.edit_roles))
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    # Permissions come from team roles, not Django's per-model permissions.
    def _allowed(self, request: HttpRequest, obj: Any = None, roles: tuple[str, ...] | None = None) -> bool:
        if request.user.is_superuser:
            return True
        ids = self._team_ids(request, roles)
        if obj is None:
            return bool(ids)
        team_id = self.object_team_id(obj)
        return team_id in ids

    def object_team_id(self, obj: Any) -> int | None:
        target = obj
        for part in (self.team_field or "").split("__"):
            if not part:
                break
            target = getattr(target, part, None)
        return getattr(target, "pk", None)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self._allowed(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._allowed(request, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self._allowed(request, None, self.edit_roles)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._allowed(request, obj, self.edit_roles)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._allowed(request, obj, self.edit_roles)
