from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from .admin_site import TeamScopedAdmin
from .audit import AuditedAdmin
from .models import AuditEvent, Invitation, Membership, Team


@admin.register(Team)
class TeamAdmin(AuditedAdmin, TeamScopedAdmin):
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


@admin.register(AuditEvent)
class AuditEventAdmin(TeamScopedAdmin):
    """The audit trail: readable by a team's admins, editable by nobody."""

    list_display = ("created_at", "actor_name", "action", "object_type", "object_repr", "team")
    list_filter = ("action", "object_type")
    list_select_related = ("team",)
    search_fields = ("object_repr", "actor_name", "object_type")
    readonly_fields = ("team", "actor", "actor_name", "action", "object_type", "object_id", "object_repr",
                       "before", "after", "changes", "created_at")
    fields = readonly_fields
    date_hierarchy = "created_at"

    @admin.display(description="What changed")
    def changes(self, obj: AuditEvent) -> str:
        rows = [f"{k}: {b!r} → {a!r}" for k, (b, a) in obj.changes.items()]
        return "\n".join(rows) or "—"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False
