"""The agents' admin: configuration with a version of every change, their history, a field by
field diff of any two versions and a revert."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db import models
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from agents.config.admin import VERSIONS_PER_PAGE, ListChangeList, TeamFilter, editable_teams
from agents.config.agent_forms import AgentAdminForm
from agents.config.versions import agent_revert, agent_save, agent_version_diff
from agents.models import Agent, AgentVersion, Tool
from agents.tools.services import tools_sync_builtins
from agentsite.admin_site import TeamScopedAdmin
from agentsite.audit import AuditedAdmin
from agentsite.models import Team

AGENT_FIELDSETS: list[tuple[str | None, dict[str, Any]]] = [
    (None, {"fields": ["team", "name", "slug", "description", "suggested_prompts"]}),
    ("Model", {"fields": ["provider", "model", "fallbacks", "temperature", "max_output_tokens",
                          "allowed_models", "allow_request_params"]}),
    ("Instructions", {"fields": ["system_prompt"]}),
    ("Tools", {"fields": ["tools", "tool_dispatcher", "parallel_tools", "max_tool_iterations",
                          "approval_timeout_s"]}),
    ("History and compaction", {"fields": ["history_max_messages", "compaction_enabled",
                                           "compaction_threshold_tokens",
                                           "compaction_preserve_recent"]}),
    ("Trajectory states", {"fields": ["trajectory_states", "inject_trajectory_state"]}),
    ("Memory", {"fields": ["memory_auto_save", "memory_recall_limit", "memory_min_relevance"]}),
    ("Limits", {"fields": ["step_timeout_s", "turn_time_limit_s", "max_tokens_per_turn",
                           "max_cost_per_turn", "interrupt_on_new_message"]}),
]


@admin.register(Agent)
class AgentAdmin(AuditedAdmin, TeamScopedAdmin):
    form = AgentAdminForm
    list_display = ("name", "team", "provider", "model", "version_link", "tool_count", "updated_at")
    list_filter = (TeamFilter, "tool_dispatcher")
    list_select_related = ("team", "provider")
    search_fields = ("name", "model", "description")

    def get_fieldsets(self, request: HttpRequest, obj: Agent | None = None) -> list[tuple[Any, dict]]:
        if obj is None:
            return AGENT_FIELDSETS
        return [*AGENT_FIELDSETS, ("Version", {"fields": ["version"]})]

    def get_readonly_fields(self, request: HttpRequest, obj: Agent | None = None) -> tuple[str, ...]:
        return ("team", "version") if obj is not None else ()

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return ListChangeList

    def changelist_queryset(self, qs: models.QuerySet) -> models.QuerySet:
        return (qs.defer("system_prompt", "description", "suggested_prompts", "fallbacks", "allowed_models",
                         "tool_policies")
                .annotate(tool_total=Count("tools", distinct=True)))

    @admin.display(description="Tools", ordering="tool_total")
    def tool_count(self, obj: Agent) -> int:
        return getattr(obj, "tool_total", 0)

    @admin.display(description="Version", ordering="version")
    def version_link(self, obj: Agent) -> str:
        url = reverse("admin:agents_agent_versions", args=[obj.pk])
        return format_html('<a href="{}">v{}</a>', url, obj.version)

    # The team comes first ----------------------------------------------------------------------
    def chosen_team(self, request: HttpRequest) -> Team | None:
        """The team a new agent goes to: ``?team=<id>`` among the user's teams, or their only
        team; None when they must choose."""
        teams = editable_teams(request, self)
        raw = request.GET.get("team", "")
        chosen = next((t for t in teams if str(t.pk) == raw), None)
        if chosen is None and len(teams) == 1:
            chosen = teams[0]
        return chosen

    def add_view(self, request: HttpRequest, form_url: str = "", extra_context: dict | None = None) -> HttpResponse:
        if not self.has_add_permission(request):
            raise PermissionDenied
        if self.chosen_team(request) is None:
            context = {**self.admin_site.each_context(request), "opts": self.opts,
                       "title": "Add agent: choose the team", "teams": editable_teams(request, self)}
            return TemplateResponse(request, "admin/agents/choose_team.html", context)
        return super().add_view(request, form_url, extra_context)

    def get_form(self, request: HttpRequest, obj: Agent | None = None, change: bool = False, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change=change, **kwargs)
        team = obj.team if obj is not None else self.chosen_team(request)
        if team is not None:
            # The built-in tools can be chosen before anyone opened the Tool list.
            tools_sync_builtins(team)
        return type(form.__name__, (form,), {"team": team})

    def save_model(self, request: HttpRequest, obj: Agent, form: AgentAdminForm, change: bool) -> None:
        try:
            version = agent_save(agent=obj, tools=form.cleaned_data.get("tools"), user=request.user)
        except ValidationError as exc:
            # The form already limits every choice to the team; this is the service's backstop.
            raise PermissionDenied(" ".join(exc.messages)) from exc
        if version is not None:
            self.message_user(request, f"The configuration was kept as version {version.number}.",
                              messages.INFO)
        elif change:
            self.message_user(request, f"Nothing in the configuration changed; it stays version "
                                       f"{obj.version}.", messages.INFO)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        # agent_save already set the tools with the rest of the configuration.
        for formset in formsets:
            self.save_formset(request, form, formset, change=change)

    # Versions ----------------------------------------------------------------------------------
    def get_urls(self) -> list:
        info = self.opts.app_label, self.opts.model_name
        view = self.admin_site.admin_view
        return [
            path("<path:object_id>/versions/", view(self.versions_view),
                 name="{}_{}_versions".format(*info)),
            path("<path:object_id>/versions/diff/", view(self.version_diff_view),
                 name="{}_{}_version_diff".format(*info)),
            path("<path:object_id>/versions/<int:number>/revert/", view(self.version_revert_view),
                 name="{}_{}_version_revert".format(*info)),
            *super().get_urls(),
        ]

    def _agent_or_404(self, request: HttpRequest, object_id: str) -> Agent:
        agent = self.get_object(request, unquote(object_id))
        if agent is None or not self.has_view_permission(request, agent):
            raise Http404("No such agent.")
        return agent

    def _context(self, request: HttpRequest, agent: Agent, title: str, **extra: Any) -> dict[str, Any]:
        return {**self.admin_site.each_context(request), "opts": self.opts, "original": agent,
                "title": title, "subtitle": str(agent),
                "has_change_permission": self.has_change_permission(request, agent), **extra}

    def versions_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        agent = self._agent_or_404(request, object_id)
        page = Paginator(agent.versions.select_related("created_by").order_by("-number"),
                         VERSIONS_PER_PAGE).get_page(request.GET.get("page"))
        rows = list(page.object_list)
        previous = {}
        if rows:
            older = (AgentVersion.objects.filter(agent=agent, number__lt=rows[-1].number)
                     .order_by("-number").first())
            chain = [*rows, older] if older else rows
            previous = {chain[i].number: chain[i + 1] for i in range(len(chain) - 1)}
        entries = []
        for version in rows:
            before = previous.get(version.number)
            changed = ([d.label for d in agent_version_diff(old=before, new=version)]
                       if before is not None else [])
            entries.append({"version": version, "previous": before, "changed": changed})
        numbers = list(agent.versions.order_by("-number").values_list("number", flat=True))
        context = self._context(request, agent, f"Versions of {agent}", page=page, entries=entries,
                                numbers=numbers)
        return TemplateResponse(request, "admin/agents/agent/versions.html", context)

    def version_diff_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        agent = self._agent_or_404(request, object_id)
        try:
            new_number = int(request.GET.get("to") or agent.version)
            old_number = int(request.GET.get("from") or new_number - 1)
        except ValueError as exc:
            raise Http404("No such version.") from exc
        found = {v.number: v for v in agent.versions.filter(number__in=[old_number, new_number])
                 .select_related("created_by")}
        if old_number not in found or new_number not in found:
            raise Http404("No such version.")
        old, new = found[old_number], found[new_number]
        context = self._context(
            request, agent, f"{agent}: version {old.number} → version {new.number}",
            old=old, new=new, diffs=agent_version_diff(old=old, new=new),
            old_label=f"Version {old.number}", new_label=f"Version {new.number}",
            numbers=list(agent.versions.order_by("-number").values_list("number", flat=True)))
        return TemplateResponse(request, "admin/agents/agent/version_diff.html", context)

    def version_revert_view(self, request: HttpRequest, object_id: str, number: int) -> HttpResponse:
        agent = self._agent_or_404(request, object_id)
        version = agent.versions.filter(number=number).select_related("created_by").first()
        if version is None:
            raise Http404("No such version.")
        if not self.has_change_permission(request, agent):
            raise PermissionDenied
        versions_url = reverse("admin:agents_agent_versions", args=[agent.pk])
        if request.method == "POST":
            return self._revert(request, agent, version, versions_url)
        current = agent.versions.filter(number=agent.version).first()
        names = [str(n) for n in version.snapshot.get("tools") or []]
        existing = set(Tool.objects.filter(team_id=agent.team_id, name__in=names).values_list("name", flat=True))
        context = self._context(
            request, agent, f"Revert {agent} to version {version.number}", version=version,
            current=current, diffs=agent_version_diff(old=current, new=version) if current else [],
            missing_tools=[n for n in names if n not in existing], versions_url=versions_url,
            old_label=f"Now (version {agent.version})", new_label=f"After reverting to version {version.number}")
        return TemplateResponse(request, "admin/agents/agent/version_revert.html", context)

    def _revert(self, request: HttpRequest, agent: Agent, version: AgentVersion,
                versions_url: str) -> HttpResponse:
        try:
            result = agent_revert(agent=agent, version=version, user=request.user)
        except ValidationError as exc:
            self.message_user(request, " ".join(exc.messages), messages.ERROR)
            return HttpResponseRedirect(versions_url)
        if result.version is None:
            self.message_user(request, f"The agent already has the configuration of version "
                                       f"{version.number}; nothing changed.", messages.INFO)
        else:
            self.message_user(request, f"Reverted to version {version.number}: the configuration "
                                       f"is now version {result.version.number}.", messages.SUCCESS)
        for problem in result.problems:
            self.message_user(request, problem, messages.WARNING)
        return HttpResponseRedirect(versions_url)


