"""Routing rules and model routes in the admin, scoped to the user's teams and audited.

Keywords and patterns are edited one per line; patterns are checked with the runtime's own
``pattern_error`` (invalid or catastrophic regexes are refused with a sentence naming them).
The rule form's checks are shared with the backtest's draft rule (``rule_errors``), and the
changelist links to the simulator and the backtest (``agents.routing_views``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html

from agents.models import Agent, ModelRoute, Provider, RoutingRule
from agents.runtime.routing import InvalidRoutingRule, pattern_error, resolve_route
from agents.runtime.routing import ModelRoute as RuntimeModelRoute
from agents.runtime.routing import RoutingRule as RuntimeRoutingRule
from agentsite.admin_site import TeamScopedAdmin
from agentsite.audit import AuditedAdmin, audit_record, snapshot
from agentsite.models import AuditEvent, Team
from traces.costs.pricing import price_table_load, step_price

UNROUTED_SHOWN = 10


# -- fields and checks shared with the backtest's draft rule ------------------------------------
class LinesField(forms.Field):
    """A list of strings edited one per line. Blank lines are dropped and each line is
    stripped (spaces at either end cannot be seen in a text box)."""

    widget = forms.Textarea

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        super().__init__(**kwargs)
        self.widget.attrs["rows"] = 4

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, list | tuple):
            return "\n".join(str(v) for v in value)
        return value

    def to_python(self, value: Any) -> list[str]:
        if value in (None, ""):
            return []
        if isinstance(value, list | tuple):
            return [str(v).strip() for v in value if str(v).strip()]
        return [line.strip() for line in str(value).splitlines() if line.strip()]


def rule_errors(*, hint: str, keywords: list[str], patterns: list[str], min_length: int | None,
                max_length: int | None) -> dict[str | None, list[str]]:
    """What is wrong with a rule, by form field (None: the rule as a whole)."""
    errors: dict[str | None, list[str]] = {}
    problems = [e for p in patterns if (e := pattern_error(p)) is not None]
    if problems:
        errors["patterns"] = problems
    if min_length is not None and max_length is not None and min_length > max_length:
        errors["max_length"] = [f"The maximum length ({max_length}) is smaller than the minimum "
                                f"length ({min_length}), so the rule could never match."]
    if not keywords and not patterns:
        errors[None] = ["Add at least one keyword or pattern: a rule without them never matches."]
    if not errors:
        try:  # the runtime's own check, for anything the sentences above do not cover
            RuntimeRoutingRule(hint=hint, keywords=tuple(keywords), patterns=tuple(patterns),
                               min_length=min_length, max_length=max_length)
        except InvalidRoutingRule as exc:
            errors[None] = [str(exc)]
    return errors


KEYWORDS_HELP = ("One per line. A keyword matches when it occurs anywhere in the message, "
                 "ignoring case (“sql” matches “Write SQL”).")
PATTERNS_HELP = ("One regular expression per line, matched case-sensitively unless it starts with "
                 "(?i); e.g. ^def |\\bSELECT\\b. Only the first 1,000 characters of a message are "
                 "searched. Escape . ? ( ) [ ] + * to match them literally.")


class RoutingRuleForm(forms.ModelForm):
    keywords = LinesField(help_text=KEYWORDS_HELP)
    patterns = LinesField(help_text=PATTERNS_HELP)
    # The model route of the rule's hint, edited here: a rule without one does nothing.
    route_provider = forms.ModelChoiceField(
        queryset=Provider.objects.none(), required=False, label="Provider",
        help_text="Where the messages this rule catches go. Saved as the team's model route for "
                  "the hint (shared by every rule with the same hint).")
    route_model = forms.CharField(required=False, max_length=200, label="Model",
                                  help_text="The model name the provider expects, e.g. gpt-4o-mini.")

    class Meta:
        model = RoutingRule
        fields = ("team", "agent", "hint", "keywords", "patterns", "min_length", "max_length",
                  "priority", "enabled")
        help_texts = {
            "agent": "Empty: the rule applies to every agent of the team.",
            "hint": "The model route with this hint (case ignored) answers the messages this rule "
                    "catches. Without one, the agent's own model answers.",
            "min_length": "In characters. Empty: no minimum.",
            "max_length": "In characters. Empty: no maximum.",
            "priority": "Higher is tried first; rules of equal priority are tried oldest first.",
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        agent = self.fields.get("agent")
        if agent is not None and self.instance.team_id:
            agent.queryset = agent.queryset.filter(team_id=self.instance.team_id)
        team_field = self.fields.get("team")
        teams = ([self.instance.team_id] if self.instance.team_id
                 else list(team_field.queryset.values_list("pk", flat=True)) if team_field else [])
        self.fields["route_provider"].queryset = (Provider.objects.filter(team_id__in=teams)
                                                  .select_related("team").order_by("team__name", "name"))
        route = self.existing_route(self.instance.team_id, self.instance.hint) if self.instance.pk else None
        if route is not None:
            self.fields["route_provider"].initial = route.provider_id
            self.fields["route_model"].initial = route.model

    @staticmethod
    def existing_route(team_id: int | None, hint: str) -> ModelRoute | None:
        if not team_id or not hint:
            return None
        return next((r for r in ModelRoute.objects.filter(team_id=team_id).order_by("id")
                     if r.hint.lower() == hint.lower()), None)

    def clean_hint(self) -> str:
        return (self.cleaned_data.get("hint") or "").strip()

    def save_route(self, rule: RoutingRule) -> tuple[ModelRoute | None, dict | None]:
        """Create or change the model route of the rule's hint from the form's two fields;
        returns the route and what it was before (None: new or unchanged)."""
        provider, model = self.cleaned_data.get("route_provider"), self.cleaned_data.get("route_model")
        if provider is None or not model:
            return None, None
        route = self.existing_route(rule.team_id, rule.hint)
        if route is None:
            return ModelRoute.objects.create(team_id=rule.team_id, hint=rule.hint, provider=provider,
                                             model=model), None
        if (route.provider_id, route.model) == (provider.pk, model):
            return None, None
        before = snapshot(route)
        route.provider, route.model = provider, model
        route.save(update_fields=["provider", "model"])
        return route, before

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        team = cleaned.get("team") if "team" in self.fields else self.instance.team
        agent = cleaned.get("agent")
        if agent is not None and team is not None and agent.team_id != team.pk:
            self.add_error("agent", f"“{agent}” belongs to another team. Pick an agent of "
                                    f"“{team}”, or leave it empty for all of the team's agents.")
        provider, model = cleaned.get("route_provider"), (cleaned.get("route_model") or "").strip()
        cleaned["route_model"] = model
        if provider is not None and team is not None and provider.team_id != team.pk:
            self.add_error("route_provider", f"“{provider}” belongs to another team. Pick a provider "
                                             f"of “{team}”.")
        if bool(provider) != bool(model):
            self.add_error("route_model" if provider else "route_provider",
                           "Give both the provider and the model, or neither.")
        elif (provider is None and team is not None and cleaned.get("hint")
              and self.existing_route(team.pk, cleaned["hint"]) is None):
            self.add_error("route_provider", f"The hint “{cleaned['hint']}” has no model route yet, so "
                                             "this rule would change nothing: pick where its messages go.")
        if "keywords" in cleaned and "patterns" in cleaned:
            for field, messages in rule_errors(
                    hint=cleaned.get("hint") or "", keywords=cleaned["keywords"],
                    patterns=cleaned["patterns"], min_length=cleaned.get("min_length"),
                    max_length=cleaned.get("max_length")).items():
                for message in messages:
                    self.add_error(field, message)
        return cleaned


class ModelRouteForm(forms.ModelForm):
    class Meta:
        model = ModelRoute
        fields = ("team", "hint", "provider", "model")
        help_texts = {
            "hint": "Routing rules with this hint (case ignored) send their messages here.",
            "model": "The model name the provider expects, e.g. gpt-4o-mini.",
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        provider = self.fields.get("provider")
        if provider is not None and self.instance.team_id:
            provider.queryset = provider.queryset.filter(team_id=self.instance.team_id)

    def clean_hint(self) -> str:
        return (self.cleaned_data.get("hint") or "").strip()

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        team, provider, hint = cleaned.get("team"), cleaned.get("provider"), cleaned.get("hint")
        if team is None:
            return cleaned
        if provider is not None and provider.team_id != team.pk:
            self.add_error("provider", f"“{provider}” belongs to another team. Pick a provider of "
                                       f"“{team}”.")
        if hint:
            others = ModelRoute.objects.filter(team=team).exclude(pk=self.instance.pk)
            # Only the first route of a hint is ever used (hints compare ignoring case).
            clash = next((r for r in others.only("hint") if r.hint.lower() == hint.lower()), None)
            if clash is not None:
                self.add_error("hint", f"“{team}” already has a model route for the hint "
                                       f"“{clash.hint}”. Change that one instead.")
        return cleaned


# -- read helpers (also used by the simulator) --------------------------------------------------
def route_targets_by_team(routes: Iterable[ModelRoute], *,
                          with_provider: bool = False) -> dict[int, list[RuntimeModelRoute]]:
    """Model routes as the runtime sees them, per team (``with_provider``: the routes'
    providers are loaded and named)."""
    targets: dict[int, list[RuntimeModelRoute]] = {}
    for route in routes:
        provider = route.provider.name if with_provider else ""
        targets.setdefault(route.team_id, []).append(RuntimeModelRoute(route.hint, provider, route.model))
    return targets


def unrouted_rules(team_ids: Iterable[int]) -> list[RoutingRule]:
    """Enabled rules of these teams whose hint no model route answers (two queries)."""
    team_ids = list(team_ids)
    targets = route_targets_by_team(ModelRoute.objects.filter(team_id__in=team_ids).only("team", "hint", "model"))
    rules = (RoutingRule.objects.filter(team_id__in=team_ids, enabled=True)
             .select_related("team", "agent").order_by("team__name", "-priority", "id"))
    return [r for r in rules if resolve_route(r.hint, targets.get(r.team_id, [])) is None]


def length_label(min_length: int | None, max_length: int | None) -> str:
    """A rule's length range for people: "any", "≥ 10", "≤ 200", "10–200" (characters)."""
    if min_length is None and max_length is None:
        return "any"
    if max_length is None:
        return f"≥ {min_length}"
    if min_length is None:
        return f"≤ {max_length}"
    return f"{min_length}–{max_length}"


def _label_with_team(many_teams: bool) -> Any:
    def label(obj: Any) -> str:
        return f"{obj} ({obj.team})" if many_teams else str(obj)
    return label


# -- admins -------------------------------------------------------------------------------------
class _ScopedChoicesMixin:
    """Agent and provider choices limited to the teams the user may edit, named with their team
    when there are several."""

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any):
        model = db_field.related_model
        if model in (Agent, Provider):
            qs = model.objects.select_related("team").order_by("team__name", "name")
            if not request.user.is_superuser:
                qs = qs.filter(team_id__in=self._team_ids(request, self.edit_roles))
            kwargs["queryset"] = qs
        field = super().formfield_for_foreignkey(db_field, request, **kwargs)
        if model in (Agent, Provider) and field is not None:
            teams = self._team_ids(request, self.edit_roles)
            field.label_from_instance = _label_with_team(request.user.is_superuser or len(teams) > 1)
        return field


@admin.register(RoutingRule)
class RoutingRuleAdmin(AuditedAdmin, _ScopedChoicesMixin, TeamScopedAdmin):
    form = RoutingRuleForm
    change_list_template = "admin/agents/routingrule/change_list.html"
    list_display = ("hint", "applies_to", "matches_on", "length", "priority", "enabled",
                    "model_route", "backtest", "team")
    list_display_links = ("hint",)
    list_select_related = ("team", "agent")
    search_fields = ("hint",)
    fieldsets = (
        (None, {"fields": ("team", "agent", "hint", "enabled")}),
        ("When it matches", {"fields": ("keywords", "patterns", "min_length", "max_length", "priority")}),
        ("Where it sends them", {"fields": ("route_provider", "route_model")}),
    )

    def save_model(self, request: HttpRequest, obj: RoutingRule, form: RoutingRuleForm, change: bool) -> None:
        super().save_model(request, obj, form, change)
        route, before = form.save_route(obj)
        if route is not None:
            audit_record(actor=request.user, action=AuditEvent.Action.UPDATE if before else AuditEvent.Action.CREATE,
                         instance=route, before=before, after=snapshot(route), team=obj.team)

    @admin.display(description="Applies to")
    def applies_to(self, obj: RoutingRule) -> str:
        return obj.agent.name if obj.agent_id else "All agents"

    @admin.display(description="Keywords / patterns")
    def matches_on(self, obj: RoutingRule) -> str:
        words = [str(k) for k in obj.keywords or []] + [f"/{p}/" for p in obj.patterns or []]
        text = ", ".join(words) or "—"
        return text if len(text) <= 80 else text[:79] + "…"

    @admin.display(description="Length")
    def length(self, obj: RoutingRule) -> str:
        return length_label(obj.min_length, obj.max_length)

    @admin.display(description="Model route")
    def model_route(self, obj: RoutingRule) -> str:
        target = getattr(obj, "route_target", None)
        if target is None:
            return "⚠ none (own model)"
        return f"{target.provider} · {target.model}"

    @admin.display(description="")
    def backtest(self, obj: RoutingRule) -> str:
        url = reverse("routing_backtest")
        return format_html('<a href="{}?team={}&amp;load={}">backtest</a>',
                           url, obj.team.uuid, obj.uuid)

    def get_list_display(self, request: HttpRequest):
        # The team column only helps people who administer several teams.
        if request.user.is_superuser or len(self._team_ids(request)) > 1:
            return self.list_display
        return tuple(name for name in self.list_display if name != "team")

    def get_changelist_instance(self, request: HttpRequest):
        changelist = super().get_changelist_instance(request)
        rows = list(changelist.result_list)  # evaluated once; the template reuses these rows
        routes = ModelRoute.objects.filter(team_id__in={r.team_id for r in rows}).select_related("provider")
        targets = route_targets_by_team(routes, with_provider=True)
        for row in rows:
            row.route_target = resolve_route(row.hint, targets.get(row.team_id, []))
        return changelist

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:
        team_ids = (set(Team.objects.values_list("id", flat=True)) if request.user.is_superuser
                    else self._team_ids(request))
        unrouted = unrouted_rules(team_ids)
        context = {
            "unrouted": unrouted[:UNROUTED_SHOWN],
            "unrouted_more": max(len(unrouted) - UNROUTED_SHOWN, 0),
            "many_teams": len(team_ids) > 1,
        }
        return super().changelist_view(request, {**context, **(extra_context or {})})


@admin.register(ModelRoute)
class ModelRouteAdmin(AuditedAdmin, _ScopedChoicesMixin, TeamScopedAdmin):
    form = ModelRouteForm
    get_list_display = RoutingRuleAdmin.get_list_display
    list_display = ("hint", "provider", "model", "price", "team")
    list_select_related = ("team", "provider")
    search_fields = ("hint", "model")

    def get_changelist_instance(self, request: HttpRequest):
        changelist = super().get_changelist_instance(request)
        # One price table for the page, not a query per route.
        table = price_table_load(team_ids={r.team_id for r in changelist.result_list})
        for route in changelist.result_list:
            route.price_table = table
        return changelist

    @admin.display(description="Price (per million tokens)")
    def price(self, obj: ModelRoute) -> str:
        price, source = step_price(provider_kind=obj.provider.kind, model=obj.model,
                                   team_id=obj.team_id, table=getattr(obj, "price_table", None))
        if price is None:
            return "no price known for this model"
        return f"${price.input} in / ${price.output} out ({source})"
