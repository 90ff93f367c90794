"""Routing a turn: the agent's routing rules and model routes as a table, and the route a
message takes (a rule's hint -> a model route), or the conversation's ``/model`` choice."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Q

from agents.models import Agent, Conversation, ModelRoute, Provider, RoutingRule
from agents.runtime.routing import ModelRoute as RuntimeModelRoute
from agents.runtime.routing import RoutingRule as RuntimeRoutingRule
from agents.runtime.routing import decide
from agents.team_config import kept


@dataclass
class RouteChoice:
    provider: Provider
    model: str
    routing: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


@dataclass
class RoutingTable:
    """What routes one agent's messages: the enabled rules that apply to it (its own and
    team-wide) in evaluation order, each as a runtime rule beside its row, and the team's model
    routes. Built from rows without queries, so a turn, the admin's simulator and a backtest of
    draft rules all decide the same way."""

    agent: Agent
    entries: list[tuple[RoutingRule, RuntimeRoutingRule]]
    route_rows: list[ModelRoute]
    targets: list[RuntimeModelRoute]
    warnings: list[str]

    @property
    def rules(self) -> list[RuntimeRoutingRule]:
        return [rule for _, rule in self.entries]

    def row_for(self, rule: RuntimeRoutingRule) -> RoutingRule | None:
        return next((row for row, r in self.entries if r is rule), None)


def routing_rule_rows_for(agent: Agent, rows: Iterable[RoutingRule]) -> list[RoutingRule]:
    """The rows among ``rows`` that route ``agent``'s messages, in evaluation order: priority
    highest first, ties oldest first (an unsaved row counts as the newest)."""
    chosen = [r for r in rows if r.enabled and r.team_id == agent.team_id
              and (r.agent_id is None or r.agent_id == agent.pk)]
    return sorted(chosen, key=lambda r: (-r.priority, r.pk if r.pk is not None else math.inf))


def routing_table_from_rows(*, agent: Agent, rule_rows: Iterable[RoutingRule],
                            route_rows: Iterable[ModelRoute]) -> RoutingTable:
    """The routing table of ``agent`` from rule and route rows (any team's or agent's rows may
    be passed; only those that apply are used). Runs no query when the routes' providers are
    loaded."""
    entries: list[tuple[RoutingRule, RuntimeRoutingRule]] = []
    warnings: list[str] = []
    for row in routing_rule_rows_for(agent, rule_rows):
        rule = RuntimeRoutingRule.lenient(
            hint=row.hint, keywords=_strings(row.keywords), patterns=_strings(row.patterns),
            priority=row.priority, min_length=row.min_length, max_length=row.max_length)
        if rule.skipped_patterns:
            warnings.append(f"Routing rule “{row.hint}” has patterns that cannot be used and were "
                            f"skipped: {', '.join(rule.skipped_patterns)}")
        entries.append((row, rule))
    routes = [r for r in route_rows if r.team_id == agent.team_id]
    targets = [RuntimeModelRoute(r.hint, r.provider.name, r.model) for r in routes]
    return RoutingTable(agent, entries, routes, targets, warnings)


def routing_table_for(agent: Agent) -> RoutingTable:
    """The routing table a turn of ``agent`` uses now (two queries, or none while the team's
    configuration is kept: ``agents.team_config``)."""
    def read() -> tuple[list[RoutingRule], list[ModelRoute]]:
        rows = (RoutingRule.objects.filter(team_id=agent.team_id, enabled=True)
                .filter(Q(agent__isnull=True) | Q(agent=agent)).order_by("-priority", "id"))
        route_rows = ModelRoute.objects.filter(team_id=agent.team_id).select_related("provider")
        return list(rows), list(route_rows)

    rule_rows, route_rows = kept(agent.team_id, ("routing rows", agent.pk), read)
    return routing_table_from_rows(agent=agent, rule_rows=rule_rows, route_rows=route_rows)


def route_choice(*, table: RoutingTable, text: str) -> RouteChoice:
    """Which provider and model answer ``text`` under ``table`` (no query)."""
    agent = table.agent
    decision = decide(text, table.rules, table.targets)
    route, target = decision.route, decision.target
    provider, model = agent.provider, agent.model
    if route is None:
        reason = "No routing rule matched; the agent's own model answers."
    elif target is None:
        reason = (f"Rule “{route.hint}” matched ({route.reason}), but no model route has that "
                  "hint; the agent's own model answers.")
    else:
        provider = table.route_rows[table.targets.index(target)].provider
        model = target.model
        reason = f"Rule “{route.hint}” matched ({route.reason})."
    rule_row = table.row_for(route.rule) if route is not None else None
    return RouteChoice(provider, model, {
        "rule": str(rule_row.uuid) if rule_row else None,
        "hint": route.hint if route else None,
        "matched_keyword": route.matched_keyword if route else None,
        "matched_pattern": route.matched_pattern if route else None,
        "reason": reason, "provider": provider.name, "model": model,
    }, list(table.warnings))


def model_override_choice(*, agent: Agent, model: str) -> RouteChoice:
    return RouteChoice(agent.provider, model, {
        "rule": None, "hint": None, "matched_keyword": None, "matched_pattern": None,
        "reason": "The model was chosen for this conversation with /model.",
        "provider": agent.provider.name, "model": model,
    })


def route_turn(*, agent: Agent, conversation: Conversation, text: str) -> RouteChoice:
    """Which provider and model answer ``text``: a model chosen with /model for this
    conversation wins; otherwise the team's routing rules (this agent's and team-wide) pick a
    hint, and a model route with that hint picks the provider and model."""
    if conversation.model_override:
        return model_override_choice(agent=agent, model=conversation.model_override)
    return route_choice(table=routing_table_for(agent), text=text)


def _strings(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []
