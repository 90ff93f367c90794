"""Prices and budgets in the admin, scoped to the user's teams and audited.

Prices: team admins see the global table (read-only: site admins keep it) beside their teams'
own rows, which they add, change, import and export. Changing a row's rates, names or date saves
a new version: the old one stays, so recorded costs keep their price. Pages beside Django's
own: ``modelprice/export/`` (JSON of the rows shown), ``modelprice/import/`` and, for site
admins, ``modelprice/catalogue/`` (import from the community model catalogue, with a preview).

Budgets: per team, per member or per API key, per day or month, with the mode and the route they
use."""

from __future__ import annotations

import json
import uuid
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html

from agentsite.admin_site import TeamScopedAdmin, admin_team_ids
from agentsite.audit import AuditedAdmin
from agentsite.models import Membership, Team

from .costs.budgets import BudgetState, spent_of, with_spend
from .costs.catalogue.views import catalogue_import_view
from .costs.price_services import next_version, price_export, price_import
from .export import admin as export_admin  # noqa: F401 - the exporter page registers itself
from .models import Budget, ModelPrice

IMPORT_MAX_BYTES = 2 * 1024 * 1024


# -- prices -------------------------------------------------------------------------------------------
# The provider kinds with their labels, from the model a budget routes down to (the
# providers' app builds on this one, so it is reached through the relation, not imported).
PROVIDER_KINDS = Budget._meta.get_field("route_down_provider").related_model.Kind.choices


class ModelPriceForm(forms.ModelForm):
    source_url = forms.URLField(required=False, assume_scheme="https", label="Source URL")
    aliases_text = forms.CharField(
        label="Aliases", required=False, widget=forms.Textarea(attrs={"rows": 3, "cols": 40}),
        help_text="Other exact names of the same model, one per line.")

    class Meta:
        model = ModelPrice
        fields = ["team", "provider_kind", "vendor", "model", "aliases_text", "prefix",
                  "input_per_mtok", "output_per_mtok", "cache_write_per_mtok",
                  "cache_read_per_mtok", "effective_from", "label", "source_url", "source_note",
                  "context_window", "max_output_tokens"]
        widgets = {"provider_kind": forms.Select(choices=[("", "Any (not the offline demo)"),
                                                          *PROVIDER_KINDS])}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["aliases_text"].initial = "\n".join(self.instance.aliases or [])
        else:
            self.fields["effective_from"].initial = timezone.now()

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        data["aliases"] = [line.strip() for line in (data.get("aliases_text") or "").splitlines()
                           if line.strip()]
        request = getattr(self, "request", None)
        if request is not None and not request.user.is_superuser and not data.get("team"):
            self.add_error("team", "Choose your team: only site admins change the global table.")
        for name in ("input_per_mtok", "output_per_mtok", "cache_write_per_mtok", "cache_read_per_mtok"):
            value = data.get(name)
            if value is not None and value < 0:
                self.add_error(name, "A price cannot be negative.")
        return data

    def _post_clean(self) -> None:
        self.instance.aliases = self.cleaned_data.get("aliases", [])
        super()._post_clean()

    @property
    def changed_data(self) -> list[str]:
        changed = list(super().changed_data)
        if "aliases_text" in changed:
            changed.append("aliases")
        return changed


class ScopeFilter(admin.SimpleListFilter):
    title = "scope"
    parameter_name = "scope"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("global", "Global table"), ("team", "Team prices")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() == "global":
            return queryset.filter(team__isnull=True)
        if self.value() == "team":
            return queryset.filter(team__isnull=False)
        return queryset


@admin.register(ModelPrice)
class ModelPriceAdmin(AuditedAdmin, TeamScopedAdmin):
    form = ModelPriceForm
    change_list_template = "admin/traces/modelprice/change_list.html"
    list_display = ("model", "vendor", "kind", "rates", "effective_from", "version", "scope",
                    "label", "source")
    list_filter = (ScopeFilter, "vendor", "provider_kind")
    list_select_related = ("team",)
    search_fields = ("model", "vendor", "label")
    readonly_fields = ("version", "created_by", "created_at", "catalogue_source", "catalogue_version",
                       "catalogue_read_at")
    actions = ["export_selected"]
    ordering = ("vendor", "model", "-effective_from", "-version")

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        qs = admin.ModelAdmin.get_queryset(self, request)
        if request.user.is_superuser:
            return qs
        return qs.filter(Q(team__isnull=True) | Q(team_id__in=admin_team_ids(request)))

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any):
        form = super().get_form(request, obj, change=change, **kwargs)

        class RequestForm(form):  # type: ignore[misc, valid-type]
            def __init__(self, *args: Any, **inner: Any) -> None:
                super().__init__(*args, **inner)
                self.request = request
                team = self.fields.get("team")
                if team is not None and not request.user.is_superuser:
                    # A team admin writes their team's rows: no "global" choice to trip on,
                    # and their team chosen when it is the only one.
                    team.queryset = team.queryset.filter(pk__in=admin_team_ids(request))
                    team.empty_label = None
                    team.required = True
                    team.help_text = "Your team's own price: it wins over the shipped table."
                    if not self.instance.pk and len(admin_team_ids(request)) == 1:
                        team.initial = next(iter(admin_team_ids(request)))

        return RequestForm

    def object_team_id(self, obj: Any) -> int | None:
        return obj.team_id

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and obj.team_id is None:
            return self._allowed(request)  # the global table is everyone's to read
        return super().has_view_permission(request, obj)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and obj.team_id is None:
            return request.user.is_superuser
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and obj.team_id is None:
            return request.user.is_superuser
        return super().has_delete_permission(request, obj)

    @admin.display(description="Kind")
    def kind(self, obj: ModelPrice) -> str:
        return obj.provider_kind or "any"

    @admin.display(description="Per million tokens: in / out / cache write / cache read")
    def rates(self, obj: ModelPrice) -> str:
        def rate(value: Any) -> str:
            return "as input" if value is None else f"${value.normalize():f}"

        return (f"{rate(obj.input_per_mtok)} / {rate(obj.output_per_mtok)} / "
                f"{rate(obj.cache_write_per_mtok)} / {rate(obj.cache_read_per_mtok)}")

    @admin.display(description="Scope", ordering="team__name")
    def scope(self, obj: ModelPrice) -> str:
        return obj.team.name if obj.team_id else "global"

    @admin.display(description="Source")
    def source(self, obj: ModelPrice) -> str:
        if not obj.source_url:
            return obj.source_note or "—"
        return format_html('<a href="{}" rel="noopener noreferrer" target="_blank">{}</a>',
                           obj.source_url, obj.source_note or obj.source_url)

    def save_model(self, request: HttpRequest, obj: ModelPrice, form: Any, change: bool) -> None:
        versioned = set(form.changed_data) & set(ModelPrice.VERSIONED_FIELDS)
        if change and versioned:
            # A new version; the row the recorded costs point at stays as it was.
            previous = obj.version
            if "effective_from" not in form.changed_data:
                obj.effective_from = timezone.now()
            obj.pk = obj.id = None
            obj.uuid = uuid.uuid4()
            obj._state.adding = True
            obj.version = next_version(team_id=obj.team_id, provider_kind=obj.provider_kind,
                                        model=obj.model)
            obj.created_by = request.user
            obj.save()
            self.message_user(request, f"Saved as version {obj.version} of {obj.model}, in force "
                                       f"from {obj.effective_from:%Y-%m-%d %H:%M}. Version "
                                       f"{previous} stays for the requests it priced.")
            return
        if not change:
            obj.version = next_version(team_id=obj.team_id, provider_kind=obj.provider_kind,
                                        model=obj.model)
            obj.created_by = request.user
        obj.save()

    # -- export and import ------------------------------------------------------------------------
    def get_urls(self) -> list:
        return [
            path("export/", self.admin_site.admin_view(self.export_view), name="traces_modelprice_export"),
            path("import/", self.admin_site.admin_view(self.import_view), name="traces_modelprice_import"),
            path("catalogue/", self.admin_site.admin_view(self.catalogue_view),
                 name="traces_modelprice_catalogue"),
            *super().get_urls(),
        ]

    def catalogue_view(self, request: HttpRequest) -> HttpResponse:
        return catalogue_import_view(self, request)

    def _export_response(self, rows: QuerySet) -> HttpResponse:
        body = json.dumps(price_export(rows=rows), indent=2)
        response = HttpResponse(body, content_type="application/json")
        response["Content-Disposition"] = f'attachment; filename="prices-{timezone.now():%Y%m%d}.json"'
        return response

    def export_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        rows = self.get_queryset(request).select_related("team")
        if request.GET.get("scope") == "team":
            rows = rows.filter(team__isnull=False)
        elif request.GET.get("scope") == "global":
            rows = rows.filter(team__isnull=True)
        return self._export_response(rows.order_by("team_id", "vendor", "model", "version"))

    @admin.action(description="Export the selected prices as JSON")
    def export_selected(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse:
        return self._export_response(queryset.order_by("team_id", "vendor", "model", "version"))

    def _import_teams(self, request: HttpRequest) -> list[Team]:
        qs = Team.objects.order_by("name", "id")
        return list(qs if request.user.is_superuser else qs.filter(id__in=self._team_ids(request, self.edit_roles)))

    def import_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_add_permission(request):
            raise PermissionDenied
        teams = self._import_teams(request)
        errors: list[str] = []
        if request.method == "POST":
            upload = request.FILES.get("file")
            team_id = request.POST.get("team") or ""
            team = next((t for t in teams if str(t.pk) == team_id), None)
            if upload is None:
                errors.append("Choose a JSON file exported from a price table.")
            elif upload.size > IMPORT_MAX_BYTES:
                errors.append("The file is larger than 2 MB.")
            elif team is None and not request.user.is_superuser:
                errors.append("Choose the team to import into.")
            else:
                try:
                    report = price_import(data=upload.read(), team_id=team.pk if team else None,
                                          allow_global=request.user.is_superuser and team is None,
                                          actor=request.user)
                except ValidationError as exc:
                    errors.extend(exc.messages)
                else:
                    for row in report.created:
                        self.log_addition(request, row, "Imported")
                    self.message_user(request, report.summary(), messages.SUCCESS)
                    return HttpResponseRedirect(reverse("admin:traces_modelprice_changelist"))
        context = {**self.admin_site.each_context(request), "opts": self.opts, "teams": teams,
                   "errors": errors, "title": "Import prices",
                   "superuser": request.user.is_superuser}
        return TemplateResponse(request, "admin/traces/modelprice/import.html", context)


# -- budgets ------------------------------------------------------------------------------------------
class BudgetForm(forms.ModelForm):
    class Meta:
        model = Budget
        fields = ["team", "user", "api_key", "period", "limit_usd", "mode", "warn_at_percent",
                  "route_down_hint", "route_down_provider", "route_down_model", "enabled"]
        labels = {"user": "Person", "api_key": "API key"}
        help_texts = {"user": "A limit on what this person spends, in the chat and through their keys."}

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        team = data.get("team")
        limit = data.get("limit_usd")
        if limit is not None and limit <= 0:
            self.add_error("limit_usd", "Enter an amount above 0.")
        warn = data.get("warn_at_percent")
        if warn is not None and not 1 <= warn <= 100:
            self.add_error("warn_at_percent", "Between 1 and 100.")
        user = data.get("user")
        if team and user and not Membership.objects.filter(team=team, user=user).exists():
            self.add_error("user", f"{user} is not a member of {team}.")
        key = data.get("api_key")
        if user and key:
            self.add_error("api_key", "A budget is for the team, one person or one API key: "
                                      "leave the person or the key empty.")
        if team and key and key.team_id != team.pk:
            self.add_error("api_key", "Choose an API key of the budget's team.")
        provider = data.get("route_down_provider")
        if team and provider and provider.team_id != team.pk:
            self.add_error("route_down_provider", "Choose a provider of the budget's team.")
        hint = (data.get("route_down_hint") or "").strip()
        if data.get("mode") == Budget.Mode.ROUTE_DOWN:
            if hint:
                if team and not team.model_routes.filter(hint=hint).exists():
                    self.add_error("route_down_hint", f"{team} has no model route with the hint “{hint}”.")
            elif not (provider and (data.get("route_down_model") or "").strip()):
                self.add_error("route_down_hint", "Route down to a model route's hint, or to a "
                                                  "provider and model.")
        return data


@admin.register(Budget)
class BudgetAdmin(AuditedAdmin, TeamScopedAdmin):
    form = BudgetForm
    list_display = ("__str__", "team", "period", "limit_usd", "mode", "warn_at_percent",
                    "route", "spent", "enabled")
    list_filter = ("period", "mode", "enabled")
    list_select_related = ("team", "user", "api_key", "route_down_provider")
    search_fields = ("team__name", "user__username", "api_key__name", "api_key__prefix")
    fieldsets = [
        (None, {"fields": ["team", "user", "api_key", "period", "limit_usd", "enabled"],
                "description": "Leave the person and the API key empty for a budget of the whole "
                               "team; fill in one of them for a budget of that person or key."}),
        ("When the budget runs out", {
            "fields": ["mode", "warn_at_percent", "route_down_hint", "route_down_provider",
                       "route_down_model"],
            "description": "From the warning threshold a banner shows. Past the limit, "
                           "“Block” refuses each model request with a message saying why; "
                           "“Route down” sends the rest of the turn to the cheaper route below."}),
    ]

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any):
        teams = None if request.user.is_superuser else self._team_ids(request, self.edit_roles)
        if db_field.name == "user":
            users = get_user_model().objects.order_by("username")
            kwargs["queryset"] = users if teams is None else users.filter(
                memberships__team_id__in=teams).distinct()
        elif db_field.name == "api_key":
            keys = db_field.remote_field.model.objects.select_related("team").order_by("team__name", "name")
            kwargs["queryset"] = keys if teams is None else keys.filter(team_id__in=teams)
        elif db_field.name == "route_down_provider":
            providers = db_field.remote_field.model.objects.select_related("team").order_by("team__name", "name")
            kwargs["queryset"] = providers if teams is None else providers.filter(team_id__in=teams)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    @admin.display(description="Route down to")
    def route(self, obj: Budget) -> str:
        if obj.mode != Budget.Mode.ROUTE_DOWN:
            return "—"
        if obj.route_down_hint:
            return f"route “{obj.route_down_hint}”"
        return f"{obj.route_down_provider or '?'} / {obj.route_down_model or '?'}"

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return with_spend(super().get_queryset(request))

    @admin.display(description="Spent this period")
    def spent(self, obj: Budget) -> str:
        state = BudgetState(obj, spent_of(obj))
        return f"${state.spent:.4f} ({state.percent}%)"
