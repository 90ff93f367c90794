"""The routing backtest: replay the team's recent messages through draft rules, saving nothing,
and list what would change. It decides with the code every turn runs (``agents.turns.routing``).
Only team admins and owners reach it; another team (or its agent or rule) is a 404."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from agents.config.routing_admin import (
    KEYWORDS_HELP,
    PATTERNS_HELP,
    LinesField,
    rule_errors,
)
from agents.config.simulator import EXCERPT_CHARS, admin_team, admin_teams, page_render, team_agent
from agents.models import Agent, Message, ModelRoute, RoutingRule
from agents.runtime.routing import ModelRoute as RuntimeModelRoute
from agents.runtime.routing import resolve_route
from agents.turns.routing import RouteChoice, RoutingTable, route_choice, routing_table_from_rows
from agentsite.access import get_for_team_or_404
from agentsite.models import Membership, Team

Role = Membership.Role
BACKTEST_TEMPLATE = "admin/agents/routing_backtest.html"
BACKTEST_DEFAULT = 100
BACKTEST_MAX = 1_000
CHANGED_SHOWN = 200


class BacktestForm(forms.Form):
    n = forms.IntegerField(label="Messages", min_value=1, max_value=BACKTEST_MAX, required=False,
                           initial=BACKTEST_DEFAULT,
                           help_text=f"The team's latest user messages, at most {BACKTEST_MAX:,}.")
    replace = forms.ChoiceField(label="Draft", required=False,
                                help_text="Edit an existing rule, or try a new one beside them.")
    enabled = forms.ChoiceField(label="Draft is", initial="yes", required=False, choices=[
        ("yes", "enabled"), ("no", "disabled (what if the replaced rule were off?)")])
    rule_agent = forms.ChoiceField(label="Applies to", required=False)
    hint = forms.CharField(max_length=64, required=False)
    keywords = LinesField(help_text=KEYWORDS_HELP)
    patterns = LinesField(help_text=PATTERNS_HELP)
    min_length = forms.IntegerField(min_value=0, required=False)
    max_length = forms.IntegerField(min_value=0, required=False)
    priority = forms.IntegerField(initial=0, required=False)

    def __init__(self, *args: Any, rules: list[RoutingRule], agents: list[Agent], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rules = {str(r.uuid): r for r in rules}
        self.agents = {str(a.uuid): a for a in agents}
        self.fields["replace"].choices = [("", "a new rule")] + [
            (uuid, f"replaces “{r.hint}” (priority {r.priority}"
                   f"{', ' + r.agent.name if r.agent_id else ''}{'' if r.enabled else ', disabled'})")
            for uuid, r in self.rules.items()]
        self.fields["rule_agent"].choices = [("", "all agents of the team")] + [
            (uuid, a.name) for uuid, a in self.agents.items()]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        cleaned["n"] = cleaned.get("n") or BACKTEST_DEFAULT
        cleaned["hint"] = (cleaned.get("hint") or "").strip()
        cleaned["enabled"] = cleaned.get("enabled") or "yes"
        if cleaned["enabled"] == "no":
            if not cleaned.get("replace"):
                self.add_error("replace", "A disabled new rule changes nothing. Pick the rule to "
                                          "switch off, to see where its messages would go without it.")
            return cleaned
        if not cleaned["hint"]:
            self.add_error("hint", "Give the draft a hint: the model route with that hint "
                                   "answers the messages it catches.")
        if "keywords" in cleaned and "patterns" in cleaned:
            for name, messages in rule_errors(
                    hint=cleaned["hint"] or "draft", keywords=cleaned["keywords"],
                    patterns=cleaned["patterns"], min_length=cleaned.get("min_length"),
                    max_length=cleaned.get("max_length")).items():
                for message in messages:
                    self.add_error(name, message)
        return cleaned

    def draft(self, team: Team) -> tuple[RoutingRule, RoutingRule | None]:
        """The draft as an unsaved row (never saved), and the rule it replaces."""
        data = self.cleaned_data
        replaced = self.rules.get(data.get("replace") or "")
        agent = self.agents.get(data.get("rule_agent") or "")
        draft = RoutingRule(
            team=team, agent=agent, hint=data["hint"] or (replaced.hint if replaced else ""),
            keywords=data["keywords"], patterns=data["patterns"], min_length=data.get("min_length"),
            max_length=data.get("max_length"), priority=data.get("priority") or 0,
            enabled=data["enabled"] == "yes")
        if replaced is not None:
            # In the replaced rule's place: same id, so ties are broken as they would be.
            draft.pk, draft.uuid, draft.created_at = replaced.pk, replaced.uuid, replaced.created_at
        return draft, replaced


def _initial_from(rule: RoutingRule) -> dict[str, Any]:
    return {"replace": str(rule.uuid), "enabled": "yes" if rule.enabled else "no",
            "rule_agent": str(rule.agent.uuid) if rule.agent_id else "", "hint": rule.hint,
            "keywords": rule.keywords or [], "patterns": rule.patterns or [],
            "min_length": rule.min_length, "max_length": rule.max_length, "priority": rule.priority}


@dataclass
class Change:
    text: str
    agent: Agent
    trace_uuid: Any
    before: RouteChoice
    after: RouteChoice


@dataclass
class RouteCount:
    label: str
    before: int = 0
    after: int = 0

    @property
    def delta(self) -> int:
        return self.after - self.before


@dataclass
class Backtest:
    considered: int = 0
    overridden: int = 0
    draft_fired: int = 0
    changed: list[Change] = field(default_factory=list)
    routes: list[RouteCount] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def changed_shown(self) -> list[Change]:
        return self.changed[:CHANGED_SHOWN]

    @property
    def changed_more(self) -> int:
        return max(len(self.changed) - CHANGED_SHOWN, 0)


def _route_key(choice: RouteChoice) -> tuple[int, str]:
    return choice.provider.pk, choice.model


def routing_backtest_run(*, team: Team, rows: list[RoutingRule], draft: RoutingRule,
                         replaced: RoutingRule | None, agents: list[Agent], agent: Agent | None,
                         limit: int) -> Backtest:
    """Route the team's latest ``limit`` user messages with the current rules and with the
    draft in place (two more queries: routes and messages); nothing is written."""
    routes = list(ModelRoute.objects.filter(team=team).select_related("provider"))
    messages = (Message.objects.filter(conversation__team=team, role=Message.Role.USER)
                .order_by("-id"))
    if agent is not None:
        messages = messages.filter(conversation__agent=agent)
    fetched = messages.values_list("text", "conversation__agent_id", "conversation__model_override",
                                   "trace__uuid")[:limit]
    by_id = {a.pk: a for a in agents}
    draft_rows = [r for r in rows if replaced is None or r.pk != replaced.pk] + [draft]
    current: dict[int, RoutingTable] = {}
    drafted: dict[int, RoutingTable] = {}
    result = Backtest()
    counts: dict[tuple[int, str], RouteCount] = {}
    for text, agent_id, override, trace_uuid in fetched:
        message_agent = by_id.get(agent_id)
        if message_agent is None:  # pragma: no cover - conversations keep their agent (PROTECT)
            continue
        result.considered += 1
        if override:  # /model wins over routing, now as then
            result.overridden += 1
            continue
        if agent_id not in current:
            current[agent_id] = routing_table_from_rows(agent=message_agent, rule_rows=rows, route_rows=routes)
            drafted[agent_id] = routing_table_from_rows(agent=message_agent, rule_rows=draft_rows, route_rows=routes)
        before = route_choice(table=current[agent_id], text=text)
        after = route_choice(table=drafted[agent_id], text=text)
        if draft.enabled and after.routing["rule"] == str(draft.uuid):
            result.draft_fired += 1
        for choice, attr in ((before, "before"), (after, "after")):
            key = _route_key(choice)
            count = counts.setdefault(key, RouteCount(f"{choice.provider.name} · {choice.model}"))
            setattr(count, attr, getattr(count, attr) + 1)
        if _route_key(before) != _route_key(after):
            result.changed.append(Change(text, message_agent, trace_uuid, before, after))
    result.routes = sorted(counts.values(), key=lambda c: (-max(c.before, c.after), c.label))
    targets = [RuntimeModelRoute(r.hint, r.provider.name, r.model) for r in routes]
    if draft.enabled and resolve_route(draft.hint, targets) is None:
        result.warnings.append(
            f"No model route has the hint “{draft.hint}”, so the messages the draft catches stay "
            "on their agent's own model. Add a model route with that hint to send them elsewhere.")
    return result


@login_required
@require_GET
def routing_backtest(request: HttpRequest) -> HttpResponse:
    team = admin_team(request)
    agents = list(Agent.objects.filter(team=team).select_related("provider").order_by("name"))
    rows = list(RoutingRule.objects.filter(team=team).select_related("agent"))
    agent = team_agent(team, request.GET.get("agent"))
    loaded = request.GET.get("load")
    initial: dict[str, Any] = {}
    if loaded:
        initial = _initial_from(get_for_team_or_404(RoutingRule, team, uuid=loaded))
    bound = "run" in request.GET or bool(request.htmx and request.htmx.target == "backtest")
    data = None
    if bound:
        data = request.GET.copy()
        for name, value in (("n", BACKTEST_DEFAULT), ("priority", 0), ("enabled", "yes")):
            if not data.get(name):
                data[name] = str(value)
    form = BacktestForm(data, initial=initial, rules=rows, agents=agents)
    result = None
    if bound and form.is_valid():
        draft, replaced = form.draft(team)
        result = routing_backtest_run(team=team, rows=rows, draft=draft, replaced=replaced,
                                      agents=agents, agent=agent, limit=form.cleaned_data["n"])
    context = {
        "title": "Backtest a routing rule", "team": team, "teams": admin_teams(request),
        "agents": agents, "agent": agent, "form": form, "result": result,
        "rules": sorted(rows, key=lambda r: (-r.priority, r.pk)), "loaded": loaded or "",
        "trace_links": getattr(request, "team", None) == team,
        "max_messages": BACKTEST_MAX, "excerpt_chars": EXCERPT_CHARS,
    }
    return page_render(request, BACKTEST_TEMPLATE, "backtest", context)
