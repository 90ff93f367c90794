"""The routing simulator, an admin page: type a message, see which rule fires, why, where it goes
and what it would cost (the backtest, ``agents.config.backtest``, shares its page helpers).

It decides with ``agents.turns.routing``'s ``routing_table_from_rows`` and ``route_choice``, the
code every turn runs, so what it shows is what a turn would do. Only team admins and owners reach
them; another team (or its agent or rule) is a 404."""

from __future__ import annotations

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
from django.views.decorators.http import require_http_methods

from agents.config.routing_admin import (
    length_label,
)
from agents.models import Agent, ModelRoute, Provider, RoutingRule
from agents.runtime.history import estimate_tokens
from agents.runtime.patterns import PatternError, compile_pattern
from agents.runtime.pricing import Price, Usage
from agents.runtime.routing import PATTERN_SEARCH_LIMIT, resolve_route
from agents.runtime.routing import RoutingRule as RuntimeRoutingRule
from agents.turns.routing import RouteChoice, RoutingTable, route_choice, routing_table_from_rows
from agents.turns.services import MAX_MESSAGE_CHARS
from agentsite.access import get_for_team_or_404, require_role
from agentsite.models import Membership, Team
from traces.costs.pricing import PriceTable, price_table_for, step_cost, step_price

Role = Membership.Role
SIMULATOR_TEMPLATE = "admin/agents/routing_simulator.html"
EXCERPT_CHARS = 140


# -- team and page ------------------------------------------------------------------------------
def admin_team(request: HttpRequest, params: QueryDict | None = None) -> Team:
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


def admin_teams(request: HttpRequest) -> list[Team]:
    if request.user.is_superuser:
        return list(Team.objects.order_by("name", "id"))
    return [m.team for m in getattr(request, "memberships", []) if m.can_configure]


def page_render(request: HttpRequest, template: str, partial: str, context: dict[str, Any]) -> HttpResponse:
    if request.htmx and request.htmx.target == partial:
        return render(request, f"{template}#{partial}", {**context, "partial": True})
    return render(request, template, {**admin.site.each_context(request), **context})


def team_agent(team: Team, agent_uuid: str | None) -> Agent | None:
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
            found = compile_pattern(pattern).search(text[:PATTERN_SEARCH_LIMIT])
        except PatternError:
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
    team = admin_team(request, params)
    agents = list(Agent.objects.filter(team=team).select_related("provider").order_by("name"))
    agent = team_agent(team, params.get("agent")) or (agents[0] if agents else None)
    form = SimulatorForm(params if "message" in params else None)
    simulation = None
    if agent is not None and form.is_valid():
        simulation = routing_simulate(agent=agent, text=form.cleaned_data["message"],
                                      include_system_prompt=form.cleaned_data["count"] != "message")
    context = {
        "title": "Routing simulator", "team": team, "teams": admin_teams(request),
        "agents": agents, "agent": agent, "form": form, "sim": simulation,
    }
    return page_render(request, SIMULATOR_TEMPLATE, "result", context)
