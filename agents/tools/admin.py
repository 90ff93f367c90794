"""Tools in the admin, scoped to the user's teams and audited.

The list creates each team's built-in rows on the way (``tools_sync_builtins``) and switches
tools on and off, or sets their policy (allow / ask a person / deny), in place or with actions.
Built-in tools come from the code: only whether they are enabled, their policy and role floor
(and ``http_fetch``'s limits) can be changed, and they cannot be deleted. A new HTTP tool starts
with its team's ``tool_policy_default``. HTTP tools are defined here; their headers are write-only.
The change page links to the Try-it page (``agents.tool_views``)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.db import models
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.decorators import method_decorator
from django.utils.html import format_html
from django.views.decorators.debug import sensitive_post_parameters

from agents.models import Tool, ToolPolicy
from agents.tools.forms import ToolAdminForm
from agents.tools.registry import BUILTINS
from agents.tools.services import tool_save, tools_set_flags, tools_sync_builtins_for_teams
from agentsite.admin_site import TeamScopedAdmin
from agentsite.audit import AuditedAdmin, snapshot
from agentsite.models import Team

HTTP_FIELDSETS: list[tuple[str | None, dict[str, Any]]] = [
    (None, {"fields": ["team", "name", "description", "enabled", "policy", "min_role",
                       "idempotent"]}),
    ("Request", {"fields": ["http_method", "url_template", "parameters"]}),
    ("Headers", {"fields": ["headers", "clear_headers"],
                 "description": "Credentials and other headers sent with every request."}),
    ("Limits", {"fields": ["timeout_s", "max_response_bytes"]}),
]
BUILTIN_READONLY = ("team", "name", "kind", "description", "runs_again", "parameters")


class ToolChangeList(ChangeList):
    """Rows without the heavy columns, with the number of agents that use each tool."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> models.QuerySet:
        qs = super().get_queryset(request, exclude_parameters)
        return qs.defer("parameters", "headers_encrypted", "description").annotate(
            agent_total=Count("agents", distinct=True))


@admin.register(Tool)
class ToolAdmin(AuditedAdmin, TeamScopedAdmin):
    form = ToolAdminForm
    # "Try it" next to the name: the list is wide, and the last column is the first cut off.
    list_display = ("name", "try_link", "team", "kind", "enabled", "policy", "role_floor",
                    "agent_count", "updated_at")
    list_display_links = ("name",)
    list_editable = ("enabled", "policy")
    # Only the servers of the listed (the user's teams') tools, never another team's names.
    list_filter = ("kind", "enabled", "policy", ("mcp_server", admin.RelatedOnlyFieldListFilter))
    list_select_related = ("team",)
    search_fields = ("name", "description", "url_template")
    actions = ["enable_tools", "disable_tools", "require_approval", "no_approval", "deny_tools"]

    # -- list -------------------------------------------------------------------------------------
    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:
        team_ids = self._team_ids(request)
        if request.user.is_superuser and not team_ids:
            team_ids = set(Team.objects.values_list("id", flat=True)[:1000])
        tools_sync_builtins_for_teams(team_ids)
        return super().changelist_view(request, extra_context)

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return ToolChangeList

    @admin.display(description="Role floor", ordering="min_role")
    def role_floor(self, obj: Tool) -> str:
        return obj.get_min_role_display()

    @admin.display(description="Agents", ordering="agent_total")
    def agent_count(self, obj: Tool) -> int:
        return getattr(obj, "agent_total", 0)

    def _set(self, request: HttpRequest, queryset: models.QuerySet, done: str, **flags: Any) -> None:
        changed = tools_set_flags(tools=queryset.select_related("team"), actor=request.user, **flags)
        self.message_user(request, f"{changed} tool(s) {done}.", messages.SUCCESS)

    @admin.action(description="Enable the selected tools", permissions=["change"])
    def enable_tools(self, request: HttpRequest, queryset: models.QuerySet) -> None:
        self._set(request, queryset, "enabled", enabled=True)

    @admin.action(description="Disable the selected tools", permissions=["change"])
    def disable_tools(self, request: HttpRequest, queryset: models.QuerySet) -> None:
        self._set(request, queryset, "disabled", enabled=False)

    @admin.action(description="Ask a person before the selected tools run", permissions=["change"])
    def require_approval(self, request: HttpRequest, queryset: models.QuerySet) -> None:
        self._set(request, queryset, "now ask a person first", policy=ToolPolicy.ASK)

    @admin.action(description="Allow the selected tools to run without asking", permissions=["change"])
    def no_approval(self, request: HttpRequest, queryset: models.QuerySet) -> None:
        self._set(request, queryset, "now run without asking", policy=ToolPolicy.ALLOW)

    @admin.action(description="Deny the selected tools (never run)", permissions=["change"])
    def deny_tools(self, request: HttpRequest, queryset: models.QuerySet) -> None:
        self._set(request, queryset, "now denied", policy=ToolPolicy.DENY)

    # -- forms ------------------------------------------------------------------------------------
    def get_fieldsets(self, request: HttpRequest, obj: Tool | None = None) -> list[tuple[Any, dict]]:
        if obj is not None and obj.kind == Tool.Kind.BUILTIN:
            fields = ["team", "name", "kind", "description", "enabled", "policy", "min_role",
                      "runs_again"]
            sets: list[tuple[Any, dict]] = [(None, {"fields": fields})]
            if obj.name == "http_fetch":
                sets.append(("Limits", {"fields": ["timeout_s", "max_response_bytes"]}))
            sets.append(("Parameters", {"fields": ["parameters"],
                                        "description": "Built-in: defined by agentsite."}))
            return sets
        if obj is not None:
            return [(None, {"fields": ["kind", *HTTP_FIELDSETS[0][1]["fields"]]}), *HTTP_FIELDSETS[1:]]
        return HTTP_FIELDSETS

    def get_readonly_fields(self, request: HttpRequest, obj: Tool | None = None) -> tuple[str, ...]:
        if obj is not None and obj.kind == Tool.Kind.BUILTIN:
            return BUILTIN_READONLY
        return ("team", "kind") if obj is not None else ()

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        initial = super().get_changeform_initial_data(request)
        team_ids = self._team_ids(request, self.edit_roles)
        if "policy" not in initial:
            initial["policy"] = self._new_tool_policy(request, initial.get("team"), team_ids)
        return initial

    def _new_tool_policy(self, request: HttpRequest, team_id: Any, team_ids: set[int]) -> str:
        """A new tool starts with its team's default; with the team still to choose, the
        default the user's teams share, else "ask" (the safe one)."""
        teams = Team.objects.all() if request.user.is_superuser else Team.objects.filter(id__in=team_ids)
        if team_id and str(team_id).isdigit():
            teams = teams.filter(pk=int(team_id))
        defaults = set(teams.values_list("tool_policy_default", flat=True)[:1000])
        return defaults.pop() if len(defaults) == 1 else ToolPolicy.ASK

    @method_decorator(sensitive_post_parameters("headers"))
    def changeform_view(self, request: HttpRequest, object_id: str | None = None, form_url: str = "",
                        extra_context: dict | None = None) -> HttpResponse:
        return super().changeform_view(request, object_id, form_url, extra_context)

    def save_model(self, request: HttpRequest, obj: Tool, form: ToolAdminForm, change: bool) -> None:
        if change and not hasattr(request, "_audit_before"):
            # Rows edited in the list are not loaded through get_object.
            request._audit_before = snapshot(Tool.objects.get(pk=obj.pk))
        if not change:
            obj.kind = Tool.Kind.HTTP  # built-ins come from the code, never from this form
        data = getattr(form, "cleaned_data", {})
        tool_save(tool=obj, headers=data.get("headers") or None,
                  clear_headers=bool(data.get("clear_headers")))

    def log_change(self, request: HttpRequest, obj: Tool, message: Any) -> Any:
        result = super().log_change(request, obj, message)
        # The next row of a list edit takes its own "before".
        request.__dict__.pop("_audit_before", None)
        return result

    def has_delete_permission(self, request: HttpRequest, obj: Tool | None = None) -> bool:
        if obj is not None and obj.kind == Tool.Kind.BUILTIN and obj.name in BUILTINS:
            return False  # disable a built-in instead; it would come back on the next visit
        return super().has_delete_permission(request, obj)

    def render_change_form(self, request: HttpRequest, context: dict, add: bool = False,
                           change: bool = False, form_url: str = "", obj: Tool | None = None) -> Any:
        if obj is not None:
            context["try_url"] = reverse("tool_try", args=[obj.uuid])
        return super().render_change_form(request, context, add, change, form_url, obj)

    @admin.display(description="Idempotent")
    def runs_again(self, obj: Tool) -> str:
        """A built-in's answer comes from the code, not from the row."""
        builtin = BUILTINS.get(obj.name)
        if builtin is not None and builtin.idempotent:
            return ("Yes: it only reads or computes, so a call cut off when its worker stopped "
                    "runs again when the turn resumes.")
        return ("No: a call cut off when its worker stopped is not run again when the turn "
                "resumes; the model is told it was interrupted.")

    @admin.display(description="Try it")
    def try_link(self, obj: Tool) -> str:
        return format_html('<a href="{}">Try it</a>', reverse("tool_try", args=[obj.uuid]))
