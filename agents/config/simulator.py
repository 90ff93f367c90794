"""Two admin pages for a team's routing: the simulator (type a message, see which rule fires,
why, where it goes and what it would cost) and the backtest (replay the team's recent messages
through draft rules, saving nothing).

Both decide with ``agents.builder``'s ``routing_table_from_rows`` and ``route_choice``, the code
every turn runs, so what they show is what a turn would do. Only team admins and owners reach
them; another team (or its agent or rule) is a 404."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import render
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.views.decorators.http import require_GET, require_http_methods

from agents.config.routing_admin import (
    KEYWORDS_HELP,
    PATTERNS_HELP,
    LinesField,
    length_label,
    rule_errors,
)
from agents.models import Agent, Message, ModelRoute, Provider, RoutingRule
from agents.runtime.history import estimate_tokens
from agents.runtime.pricing import Price, Usage
from agents.runtime.routing import PATTERN_SEARCH_LIMIT, resolve_route
from agents.runtime.routing import ModelRoute as RuntimeModelRoute
from agents.runtime.routing import RoutingRule as RuntimeRoutingRule
from agents.turns.routing import RouteChoice, RoutingTable, route_choice, routing_table_from_rows
from agents.turns.services import MAX_MESSAGE_CHARS
from agentsite.access import get_for_team_or_404, require_role
from agentsite.models import Membership, Team
from traces.pricing import PriceTable, price_table_for
from traces.recorder import step_cost, step_price

Role = Membership.Role
SIMULATOR_TEMPLATE = "admin/agents/routing_simulator.html"
BACKTEST_TEMPLATE = "admin/agents/routing_backtest.html"
BACKTEST_DEFAULT = 100
BACKTEST_MAX = 1_000
CHANGED_SHOWN = 200
EXCERPT_CHARS = 140


# -- team and page ------------------------------------------------------------------------------
def _team(request: HttpRequest, params: QueryDict | None = None) -> Team:
    """The team the page is about: ``team=<uuid>``, else the active team when the user
    administers it, else the first team they administer. Not a member: 404; below admin: 403."""
    wanted = (params if params is not None else request.GET).get("team") or ""
    if request.user.is_superuser:
        try:
            team = (Team.objects.get(uuid=wanted) if wanted
                    else getattr(request, "team", None) or Team.objects.order_by("name", "id").first())
        except (Team.DoesNotExist, ValidationError) as exc:
            raise Http404("No such team.") from exc
        if team is None:
            raise Http404("No such team.")
        return team
    memberships = getattr(request, "memberships", [])  # set by ActiveTeamMiddleware
    if wanted:
        membership = next((m for m in memberships if str(m.team.uuid) == wanted), None)
    else:
        active = getattr(request, "membership", None)
        admin_of = [m for m in memberships if m.can_configure]
        membership = (active if active is not None and active.can_configure
                      else (admin_of[0] if admin_of else active))
    require_role(membership, Role.ADMIN, "use the routing simulator and backtest")
    return membership.team


def _admin_teams(request: HttpRequest) -> list[Team]:
    if request.user.is_superuser:
        return list(Team.objects.order_by("name", "id"))
    return [m.team for m in getattr(request, "memberships", []) if m.can_configure]


def _render(request: HttpRequest, template: str, partial: str, context: dict[str, Any]) -> HttpResponse:
    if request.htmx and request.htmx.target == partial:
        return render(request, f"{template}#{partial}", {**context, "partial": True})
    return render(request, template, {**admin.site.each_context(request), **context})


def _agent(team: Team, agent_uuid: str | None) -> Agent | None:
    if not agent_uuid:
        return None
    return get_for_team_or_404(Agent.objects.select_related("provider"), team, uuid=agent_uuid)


# -- cost -----------------------------------------------------------------------------------------
@dataclass
class CostEstimate:
    provider: Provider
    model: str
    tokens: int
    cost: Decimal
    price: Price | None
    source: str

    @property
    def priced(self) -> bool:
        return self.price is not None

    @property
    def cost_text(self) -> str:
        return usd(self.cost)

    @property
    def per_thousand_text(self) -> str:
        return usd(self.cost * 1000)


def cost_estimate(*, provider: Provider, model: str, tokens: int,
                  table: PriceTable | None = None) -> CostEstimate:
    """Input tokens priced as the trace recorder prices a model request (with the team's price
    table; pass ``table`` to price several estimates with one query)."""
    table = table if table is not None else price_table_for(provider.team_id)
    cost, _ = step_cost(provider_kind=provider.kind, model=model, usage=Usage(input_tokens=tokens),
                        team_id=provider.team_id, table=table)
    price, source = step_price(provider_kind=provider.kind, model=model, team_id=provider.team_id,
                               table=table)
    return CostEstimate(provider, model, tokens, cost, price, source)


def usd(amount: Decimal) -> str:
    """Small amounts in full: $0.0000035."""
    if not amount:
        return "$0"
    return "$" + f"{amount:.10f}".rstrip("0").rstrip(".")


# -- the simulator --------------------------------------------------------------------------------
@dataclass
class RuleCheck:
    """One rule in the order the turn tries it, and what happened to it for this message."""

    position: int
    row: RoutingRule
    outcome: str  # fired | length | no-match | not-reached
    explanation: str
    target: str
    tie: bool = False

    @property
    def length(self) -> str:
        return length_label(self.row.min_length, self.row.max_length)


@dataclass
class Simulation:
    agent: Agent
    text: str
    choice: RouteChoice
    highlighted: SafeString
    checks: list[RuleCheck]
    disabled: list[RoutingRule]
    other_agents_rules: int
    unrouted: list[RoutingRule]
    message_tokens: int
    system_tokens: int
    estimate: CostEstimate
    own_estimate: CostEstimate | None
    warnings: list[str] = field(default_factory=list)

    @property
    def routed(self) -> bool:
        return (self.choice.provider.pk, self.choice.model) != (self.agent.provider_id, self.agent.model)


def highlight(text: str, *, keyword: str | None = None, pattern: str | None = None) -> SafeString:
    """``text`` escaped, with the part the keyword or pattern matched in <mark>."""
    span: tuple[int, int] | None = None
    if keyword:
        lowered = text.lower()
        # Lowercasing can lengthen a few characters (İ); then offsets no longer line up.
        if len(lowered) == len(text) and (start := lowered.find(keyword.lower())) >= 0:
            span = (start, start + len(keyword.lower()))
    elif pattern:
        try:
            found = re.search(pattern, text[:PATTERN_SEARCH_LIMIT])
        except re.error:
            found = None
        if found is not None:
            span = found.span()
    if span is None:
        return format_html("{}", text)
    start, end = span
    return format_html("{}<mark>{}</mark>{}", text[:start], text[start:end], text[end:])


def _target_label(rule_hint: str, table: RoutingTable) -> str:
    target = resolve_route(rule_hint, table.targets)
    return f"{target.provider} · {target.model}" if target else ""


def _why_not(rule: RuntimeRoutingRule, length: int) -> tuple[str, str]:
    if not rule.applies_to_length(length):
        if rule.min_length is not None and length < rule.min_length:
            return "length", (f"The message has {length:,} characters; this rule needs at least "
                              f"{rule.min_length:,}.")
        return "length", (f"The message has {length:,} characters; this rule allows at most "
                          f"{rule.max_length:,}.")
    words = [k for k in rule.keywords if k.strip()]
    if not words and not rule.patterns:
        return "no-match", "It has no usable keyword or pattern, so it never matches."
    parts = []
    if words:
        parts.append("none of its keywords occurs in the message")
    if rule.patterns:
        parts.append("none of its patterns matches")
    return "no-match", "; ".join(parts).capitalize() + "."


def _fired(route_keyword: str | None, route_pattern: str | None) -> str:
    if route_keyword is not None:
        return f"Keyword “{route_keyword}” occurs in the message (case is ignored)."
    return f"Pattern “{route_pattern}” matches the message."


def rule_checks(table: RoutingTable, text: str, choice: RouteChoice) -> list[RuleCheck]:
    """Every rule of ``table`` in evaluation order with what it did for ``text``; the fired
    rule is the one ``choice`` names, so this never disagrees with the decision."""
    fired_uuid = choice.routing.get("rule")
    ordered = sorted(table.entries, key=lambda entry: -entry[1].priority)  # as ``classify`` sorts
    priorities = Counter(rule.priority for _, rule in ordered)
    checks: list[RuleCheck] = []
    reached = True
    for position, (row, rule) in enumerate(ordered, start=1):
        if reached and str(row.uuid) == fired_uuid:
            outcome = "fired"
            explanation = _fired(choice.routing["matched_keyword"], choice.routing["matched_pattern"])
            reached = False
        elif not reached:
            outcome, explanation = "not-reached", "A rule before it fired."
            if (would := rule.match(text)) is not None:
                explanation += f" It would also match ({would.reason})."
        else:
            outcome, explanation = _why_not(rule, len(text))
        if rule.skipped_patterns:
            explanation += (" Unusable patterns are left out: "
                            + ", ".join(f"“{p}”" for p in rule.skipped_patterns) + ".")
        checks.append(RuleCheck(position, row, outcome, explanation,
                                _target_label(row.hint, table), priorities[rule.priority] > 1))
    return checks


def routing_simulate(*, agent: Agent, text: str, include_system_prompt: bool) -> Simulation:
    """What a turn of ``agent`` would do with ``text`` (five queries, whatever the rules)."""
    rows = list(RoutingRule.objects.filter(team_id=agent.team_id).select_related("agent"))
    routes = list(ModelRoute.objects.filter(team_id=agent.team_id).select_related("provider"))
    table = routing_table_from_rows(agent=agent, rule_rows=rows, route_rows=routes)
    choice = route_choice(table=table, text=text)
    applies = [r for r in rows if r.agent_id is None or r.agent_id == agent.pk]
    message_tokens = estimate_tokens([{"role": "user", "content": text}])
    system_tokens = (estimate_tokens([{"role": "system", "content": agent.system_prompt}])
                     if include_system_prompt and agent.system_prompt else 0)
    tokens = message_tokens + system_tokens
    prices = price_table_for(agent.team_id)
    estimate = cost_estimate(provider=choice.provider, model=choice.model, tokens=tokens,
                             table=prices)
    simulation = Simulation(
        agent=agent, text=text, choice=choice,
        highlighted=highlight(text, keyword=choice.routing["matched_keyword"],
                              pattern=choice.routing["matched_pattern"]),
        checks=rule_checks(table, text, choice),
        disabled=sorted((r for r in applies if not r.enabled), key=lambda r: (-r.priority, r.pk)),
        other_agents_rules=len(rows) - len(applies),
        unrouted=[row for row, _ in table.entries if resolve_route(row.hint, table.targets) is None],
        message_tokens=message_tokens, system_tokens=system_tokens,
        estimate=estimate, own_estimate=None, warnings=list(choice.warnings))
    if simulation.routed:
        simulation.own_estimate = cost_estimate(provider=agent.provider, model=agent.model,
                                                tokens=tokens, table=prices)
    return simulation


class SimulatorForm(forms.Form):
    message = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 5, "cols": 80, "autofocus": True}),
        max_length=MAX_MESSAGE_CHARS,
        error_messages={"required": "Type a message to see where it would go."})
    count = forms.ChoiceField(
        label="Estimate", initial="system", widget=forms.RadioSelect, required=False,
        choices=[("system", "the message and the agent's system prompt"), ("message", "the message only")])


@login_required
@require_http_methods(["GET", "POST"])
def routing_simulator(request: HttpRequest) -> HttpResponse:
    """GET shows the form (and simulates a ``message`` given in the link); the form posts,
    because a URL cannot carry a long message and length rules need long ones. Nothing is
    written either way."""
    params = request.POST if request.method == "POST" else request.GET
    team = _team(request, params)
    agents = list(Agent.objects.filter(team=team).select_related("provider").order_by("name"))
    agent = _agent(team, params.get("agent")) or (agents[0] if agents else None)
    form = SimulatorForm(params if "message" in params else None)
    simulation = None
    if agent is not None and form.is_valid():
        simulation = routing_simulate(agent=agent, text=form.cleaned_data["message"],
                                      include_system_prompt=form.cleaned_data["count"] != "message")
    context = {
        "title": "Routing simulator", "team": team, "teams": _admin_teams(request),
        "agents": agents, "agent": agent, "form": form, "sim": simulation,
    }
    return _render(request, SIMULATOR_TEMPLATE, "result", context)


# -- the backtest --------------------------------------------------------------------------------
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
    team = _team(request)
    agents = list(Agent.objects.filter(team=team).select_related("provider").order_by("name"))
    rows = list(RoutingRule.objects.filter(team=team).select_related("agent"))
    agent = _agent(team, request.GET.get("agent"))
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
        "title": "Backtest a routing rule", "team": team, "teams": _admin_teams(request),
        "agents": agents, "agent": agent, "form": form, "result": result,
        "rules": sorted(rows, key=lambda r: (-r.priority, r.pk)), "loaded": loaded or "",
        "trace_links": getattr(request, "team", None) == team,
        "max_messages": BACKTEST_MAX, "excerpt_chars": EXCERPT_CHARS,
    }
    return _render(request, BACKTEST_TEMPLATE, "backtest", context)
