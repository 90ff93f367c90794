from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from .admin_site import TeamScopedAdmin
from .models import Invitation, Membership, Team


@admin.register(Team)
class TeamAdmin(TeamScopedAdmin):
    team_field = ""
    list_display = ("name", "uuid", "created_at")
    search_fields = ("name",)
    readonly_fields = ("uuid", "created_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        # Teams are created from the site (the creator becomes owner), not here.
        return request.user.is_superuser

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return self._allowed(request, obj, (Membership.Role.OWNER,))


@admin.register(Membership)
class MembershipAdmin(TeamScopedAdmin):
    """Read-only here: roles change on the team's Members page, where the rules live."""

    list_display = ("user", "team", "role", "created_at")
    list_filter = ("role",)
    list_select_related = ("user", "team")
    search_fields = ("user__username", "user__email", "team__name")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


@admin.register(Invitation)
class InvitationAdmin(TeamScopedAdmin):
    list_display = ("team", "role", "email", "state", "created_by", "created_at", "expires_at")
    list_select_related = ("team", "created_by")
    search_fields = ("email", "team__name")
    exclude = ("token_hash",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # links are made on the Members page, which shows the token once

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False
