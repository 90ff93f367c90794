from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join

from .admin_site import TeamScopedAdmin
from .audit import AuditedAdmin
from .diffs import unified_diff_html
from .models import AuditEvent, Invitation, Membership, Team


@admin.register(Team)
class TeamAdmin(AuditedAdmin, TeamScopedAdmin):
    team_field = ""
    list_display = ("name", "tool_policy_default", "uuid", "created_at")
    search_fields = ("name",)
    # The team's admins and owners set the policy new tools start with; changes are audited.
    fields = ("name", "tool_policy_default", "uuid", "created_at")
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


def _shown(value: Any) -> str:
    if value is None or value == "" or value == []:
        return "—"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    return str(value)


def _before_after(before: Any, after: Any) -> tuple[Any, Any]:
    """The two cells of a change; two multi-line texts become one line diff in the "After" cell."""
    if isinstance(before, str) and isinstance(after, str) and ("\n" in before or "\n" in after):
        return (format_html('<span class="muted">{} lines</span>', len(before.splitlines())),
                unified_diff_html(before, after))
    return _shown(before), _shown(after)


@admin.register(AuditEvent)
class AuditEventAdmin(TeamScopedAdmin):
    """The audit trail: readable by a team's admins, editable by nobody."""

    list_display = ("created_at", "actor_name", "action", "object_type", "object_repr", "changed_fields", "team")
    list_filter = ("action", "object_type")
    list_select_related = ("team",)
    search_fields = ("object_repr", "actor_name", "object_type")
    readonly_fields = ("team", "actor", "actor_name", "action", "object_type", "object_id", "object_repr",
                       "before", "after", "changes", "created_at")
    fieldsets = (
        (None, {"fields": ("created_at", "team", "actor_name", "action", "object_type", "object_repr",
                           "changes")}),
        ("The record as stored", {"classes": ("collapse",), "fields": ("actor", "object_id", "before", "after")}),
    )
    date_hierarchy = "created_at"

    @admin.display(description="Fields")
    def changed_fields(self, obj: AuditEvent) -> str:
        names = list(obj.changes)
        return ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "") if names else "—"

    @admin.display(description="What changed")
    def changes(self, obj: AuditEvent) -> str:
        """Field by field, before and after; long texts as a line diff. Everything escaped."""
        rows = obj.changes.items()
        if not rows:
            return "—"
        body = format_html_join("", "<tr><th scope=\"row\">{}</th><td>{}</td><td>{}</td></tr>",
                                ((name, *_before_after(before, after)) for name, (before, after) in rows))
        return format_html('<table class="audit-changes"><thead><tr><th scope="col">Field</th>'
                           '<th scope="col">Before</th><th scope="col">After</th></tr></thead>'
                           "<tbody>{}</tbody></table>", body)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False
