"""Providers in the admin (agents: ``agent_admin``), scoped to the user's teams and audited.

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
from django.core.exceptions import PermissionDenied
from django.db import models
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import path, reverse
from django.utils.decorators import method_decorator
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_POST

from agents.config.provider_forms import (
    CAPABILITY_FIELDS,
    ProviderAdminForm,
    ProviderModelForm,
    ProviderModelFormSet,
)
from agents.config.providers import (
    KeyChange,
    provider_save,
    provider_test_connection,
    provider_test_connections,
    provider_test_model,
)
from agents.models import Agent, Provider, ProviderModel
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
class ProviderModelInline(admin.TabularInline):
    """Settings per model of the provider. Edited with the provider, by whoever may change it
    (team roles, not Django permissions: the provider's admin decides)."""

    model = ProviderModel
    form = ProviderModelForm
    formset = ProviderModelFormSet
    extra = 0
    verbose_name = "model setting"
    verbose_name_plural = "Settings per model"

    def _parent(self) -> TeamScopedAdmin:
        return self.admin_site.get_model_admin(Provider)

    def has_view_permission(self, request: HttpRequest, obj: Provider | None = None) -> bool:
        return self._parent().has_view_permission(request, obj)

    def has_add_permission(self, request: HttpRequest, obj: Provider | None = None) -> bool:
        return self.has_change_permission(request, obj)

    def has_change_permission(self, request: HttpRequest, obj: Provider | None = None) -> bool:
        parent = self._parent()
        return (parent.has_change_permission(request, obj) if obj is not None
                else parent.has_add_permission(request))

    def has_delete_permission(self, request: HttpRequest, obj: Provider | None = None) -> bool:
        return self.has_change_permission(request, obj)


@admin.register(Provider)
class ProviderAdmin(AuditedAdmin, TeamScopedAdmin):
    form = ProviderAdminForm
    inlines = [ProviderModelInline]
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
            ("Limits", {"fields": ["context_window", "max_output_tokens"],
                        "description": "For every model of the provider; a model listed under "
                                       "“Settings per model” below has its own."}),
            ("Capabilities", {"fields": CAPABILITY_FIELDS,
                              "description": "Override what the provider kind says the model can "
                                             "do. Default fits most models; a model listed "
                                             "below may differ."}),
            ("Advanced", {"fields": ["timeout_s", "extra_headers", "options"]}),
        ]

    def get_readonly_fields(self, request: HttpRequest, obj: Provider | None = None) -> tuple[str, ...]:
        # A provider stays in its team: its agents and routes cannot follow it.
        return ("team",) if obj is not None else ()

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return ListChangeList

    def changelist_queryset(self, qs: models.QuerySet) -> models.QuerySet:
        return qs.defer("capabilities", "extra_headers_encrypted", "options")

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

    def save_formset(self, request: HttpRequest, form: ProviderAdminForm, formset: Any,
                     change: bool) -> None:
        """Per-model rows are audited like the provider: created, changed, deleted."""
        provider = form.instance
        before = {row.pk: snapshot(row) for row in ProviderModel.objects.filter(provider=provider)}
        # A deleted row loses its pk; keep it to name the row in the trail.
        deleted = {id(f.instance): f.instance.pk for f in formset.deleted_forms}
        super().save_formset(request, form, formset, change)
        Action = AuditEvent.Action
        for row in formset.new_objects:
            audit_record(actor=request.user, action=Action.CREATE, instance=row, after=snapshot(row),
                         team=provider.team)
        for row, _ in formset.changed_objects:
            audit_record(actor=request.user, action=Action.UPDATE, instance=row,
                         before=before.get(row.pk), after=snapshot(row), team=provider.team)
        for row in formset.deleted_objects:
            pk = row.pk = deleted.get(id(row), row.pk)
            audit_record(actor=request.user, action=Action.DELETE, instance=row,
                         before=before.get(pk), team=provider.team)

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
