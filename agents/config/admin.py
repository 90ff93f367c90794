"""Providers and agents in the admin, scoped to the user's teams and audited.

Pages added beside Django's own (all under /admin/agents/):

* ``provider/<id>/test-connection/`` (POST): one tiny chat through the provider; the result is
  shown as a message on the change page. Also a list action.
* ``agent/<id>/versions/``: the agent's versions, who made them and what changed.
* ``agent/<id>/versions/diff/?from=N&to=M``: the differences between two versions.
* ``agent/<id>/versions/<number>/revert/``: what reverting would change (GET), revert (POST).
"""

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
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.decorators import method_decorator
from django.utils.html import format_html
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_POST

from agents.config.forms import CAPABILITY_FIELDS, AgentAdminForm, ProviderAdminForm
from agents.config.providers import (
    KeyChange,
    provider_save,
    provider_test_connection,
    provider_test_connections,
    provider_test_model,
)
from agents.config.versions import agent_revert, agent_save, agent_version_diff
from agents.models import Agent, AgentVersion, Provider, Tool
from agents.tools.services import tools_sync_builtins
from agentsite.admin_site import TeamScopedAdmin
from agentsite.audit import AuditedAdmin, audit_record, snapshot
from agentsite.models import AuditEvent, Team

# A list action tests at most this many providers at once (each may wait up to its timeout).
MAX_PROVIDERS_TESTED = 10
VERSIONS_PER_PAGE = 50


class TeamFilter(admin.SimpleListFilter):
    """Filter by team, offering only the teams the user administers (shown when there are
    several)."""

    title = "team"
    parameter_name = "team"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[int, str]]:
        teams = editable_teams(request, model_admin)
        return [(t.pk, t.name) for t in teams] if len(teams) > 1 else []

    def queryset(self, request: HttpRequest, queryset: models.QuerySet) -> models.QuerySet:
        value = self.value()
        if value and str(value).isdigit():
            return queryset.filter(team_id=int(value))
        return queryset


def editable_teams(request: HttpRequest, model_admin: TeamScopedAdmin) -> list[Team]:
    """The teams where the user may create this kind of object; cached on the request."""
    cache = request.__dict__.setdefault("_agents_editable_teams", {})
    roles = tuple(sorted(model_admin.edit_roles))
    if roles not in cache:
        qs = Team.objects.order_by("name", "id")
        if not request.user.is_superuser:
            qs = qs.filter(id__in=model_admin._team_ids(request, model_admin.edit_roles))
        cache[roles] = list(qs)
    return cache[roles]


class ListChangeList(ChangeList):
    """A changelist whose rows are shaped by ``model_admin.changelist_queryset`` (heavy columns
    deferred, counts annotated), leaving ``get_queryset`` for object lookups untouched."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> models.QuerySet:
        qs = super().get_queryset(request, exclude_parameters)
        return self.model_admin.changelist_queryset(qs)


# -- providers ------------------------------------------------------------------------------------
@admin.register(Provider)
class ProviderAdmin(AuditedAdmin, TeamScopedAdmin):
    form = ProviderAdminForm
    list_display = ("name", "team", "kind", "base_url", "key_status", "timeout_s", "updated_at")
    list_display_links = ("name",)
    list_filter = (TeamFilter, "kind")
    list_select_related = ("team",)
    search_fields = ("name", "base_url")
    actions = ["test_connection"]
    readonly_fields = ()

    def get_fieldsets(self, request: HttpRequest, obj: Provider | None = None) -> list[tuple[Any, dict]]:
        key_fields = ["api_key", "clear_api_key"] if obj is not None and obj.has_api_key else ["api_key"]
        return [
            (None, {"fields": ["team", "name", "kind", "base_url"]}),
            ("API key", {"fields": key_fields,
                         "description": "Stored encrypted. It is sent only to this provider and "
                                        "never shown on any page, in the history or in traces."}),
            ("Capabilities", {"fields": CAPABILITY_FIELDS,
                              "description": "Override what the provider kind says the model can "
                                             "do. Default fits most models."}),
            ("Advanced", {"fields": ["timeout_s", "extra_headers", "options"]}),
        ]

    def get_readonly_fields(self, request: HttpRequest, obj: Provider | None = None) -> tuple[str, ...]:
        # A provider stays in its team: its agents and routes cannot follow it.
        return ("team",) if obj is not None else ()

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        initial = super().get_changeform_initial_data(request)
        teams = editable_teams(request, self)
        if "team" not in initial and len(teams) == 1:
            initial["team"] = teams[0].pk
        return initial

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return ListChangeList

    def changelist_queryset(self, qs: models.QuerySet) -> models.QuerySet:
        return qs.defer("capabilities", "extra_headers", "options")

    @admin.display(boolean=True, description="API key")
    def key_status(self, obj: Provider) -> bool:
        return obj.has_api_key

    @method_decorator(sensitive_post_parameters("api_key"))
    def changeform_view(self, request: HttpRequest, object_id: str | None = None, form_url: str = "",
                        extra_context: dict | None = None) -> HttpResponse:
        return super().changeform_view(request, object_id, form_url, extra_context)

    def save_model(self, request: HttpRequest, obj: Provider, form: ProviderAdminForm, change: bool) -> None:
        request._provider_key_change = provider_save(
            provider=obj, api_key=form.cleaned_data.get("api_key") or "",
            clear_api_key=bool(form.cleaned_data.get("clear_api_key")), user=request.user)

    def render_delete_form(self, request: HttpRequest, context: dict) -> HttpResponse:
        provider = context.get("object")
        if provider is not None:
            # Fallbacks name providers rather than link them, so they do not stop a delete;
            # say which agents would lose one.
            context["fallback_agents"] = [
                a.name for a in Agent.objects.filter(team_id=provider.team_id).only("name", "fallbacks")
                if any(isinstance(e, dict) and e.get("provider") == provider.name for e in a.fallbacks or [])]
        return super().render_delete_form(request, context)

    def log_change(self, request: HttpRequest, obj: Provider, message: Any) -> Any:
        # The audit trail masks the key as "set"; a replaced key would look unchanged, so it is
        # recorded as "replaced" (still without any part of the key).
        after = snapshot(obj)
        if getattr(request, "_provider_key_change", None) == KeyChange.REPLACED:
            after["api_key_encrypted"] = "replaced"
        audit_record(actor=request.user, action=AuditEvent.Action.UPDATE, instance=obj,
                     before=getattr(request, "_audit_before", None), after=after)
        return super(AuditedAdmin, self).log_change(request, obj, message)

    # Test connection ---------------------------------------------------------------------------
    def get_urls(self) -> list:
        info = self.opts.app_label, self.opts.model_name
        return [
            path("<path:object_id>/test-connection/",
                 self.admin_site.admin_view(self.test_connection_view),
                 name="{}_{}_test_connection".format(*info)),
            *super().get_urls(),
        ]

    @admin.action(description="Test connection", permissions=["change"])
    def test_connection(self, request: HttpRequest, queryset: models.QuerySet) -> None:
        providers = list(queryset.select_related("team")[:MAX_PROVIDERS_TESTED + 1])
        if len(providers) > MAX_PROVIDERS_TESTED:
            self.message_user(request, f"Select at most {MAX_PROVIDERS_TESTED} providers to test at "
                                       "once.", messages.WARNING)
            return
        for check in provider_test_connections(providers=providers):
            self.message_user(request, f"{check.provider}: {check.message}",
                              messages.SUCCESS if check.ok else messages.ERROR)

    def test_connection_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return require_POST(self._test_connection)(request, object_id)

    def _test_connection(self, request: HttpRequest, object_id: str) -> HttpResponse:
        provider = self.get_object(request, unquote(object_id))
        if provider is None:
            raise Http404("No such provider.")
        if not self.has_change_permission(request, provider):
            raise PermissionDenied
        model = (request.POST.get("model") or "").strip()[:200] or None
        check = provider_test_connection(provider=provider, model=model)
        self.message_user(request, check.message, messages.SUCCESS if check.ok else messages.ERROR)
        return redirect(reverse("admin:agents_provider_change", args=[provider.pk]))

    def render_change_form(self, request: HttpRequest, context: dict, add: bool = False,
                           change: bool = False, form_url: str = "", obj: Provider | None = None) -> Any:
        if obj is not None:
            context["test_model"] = provider_test_model(obj)
        return super().render_change_form(request, context, add, change, form_url, obj)


# -- agents ---------------------------------------------------------------------------------------
AGENT_FIELDSETS: list[tuple[str | None, dict[str, Any]]] = [
    (None, {"fields": ["team", "name", "description"]}),
    ("Model", {"fields": ["provider", "model", "fallbacks", "temperature", "max_output_tokens",
                          "allowed_models"]}),
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
        return (qs.defer("system_prompt", "description", "fallbacks", "allowed_models")
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


