"""From database configuration to the runtime objects of one turn.

``turn_setup_build`` reads the trace's agent, provider, tools, routing rules and history and
returns a ``TurnSetup`` for ``agents.runtime.loop.run_turn``. It runs on the turn's database
thread. Configuration that cannot work (an unknown provider kind, a key that cannot be read)
raises ``TurnSetupError`` with a message for the user; configuration that is merely partly
usable (an unknown tool, a fallback naming a missing provider, a bad routing pattern) is left
out and reported in ``TurnSetup.warnings``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db.models import Q

from agents.runtime.events import Retry
from agents.runtime.history import estimate_tokens
from agents.runtime.loop import (
    CompactionSettings,
    LlmCall,
    LlmCallDecision,
    TurnConfig,
    TurnHooks,
)
from agents.runtime.messages import Message as RuntimeMessage
from agents.runtime.pricing import Usage, cost_usd
from agents.runtime.providers import build_provider
from agents.runtime.providers.base import Provider as RuntimeProvider
from agents.runtime.providers.reliable import ReliableProvider
from agents.runtime.routing import ModelRoute as RuntimeModelRoute
from agents.runtime.routing import RoutingRule as RuntimeRoutingRule
from agents.runtime.routing import decide
from agents.runtime.tools import Tool as RuntimeTool
from agents.tools import ToolContext, loop_tool_timeout
from agents.tools import runtime_tools as tools_runtime_tools
from agents.tools.context import DbRunner, run_sync
from agentsite.crypto import SecretUnreadable, decrypt
from memory.services import MemoryOwner, memory_turn_start
from traces import live
from traces.budgets import budget_decide, budget_states, money
from traces.models import Budget, Trace, TrajectoryState
from traces.pricing import PriceTable, price_table_for
from traces.services import TraceNotOwned, trace_budget_note

from .models import Agent, Conversation, Message, ModelRoute, Provider, RoutingRule
from .selectors import conversation_history_rows, turn_branch_before

logger = logging.getLogger(__name__)

OnRetry = Callable[[Retry], Awaitable[None]]

class TurnSetupError(Exception):
    """Configuration that cannot run; the message tells the user what to do."""


def provider_api_key(provider: Provider) -> str:
    """The provider's API key in clear, or "" when it has none. For the outgoing request only:
    never render, log or trace it. A key that cannot be decrypted (the encryption key changed)
    is a ``TurnSetupError`` that says what to do."""
    try:
        return decrypt(provider.api_key_encrypted)
    except SecretUnreadable as exc:
        raise TurnSetupError(f"Provider “{provider.name}”: {exc}") from exc


def runtime_provider(row: Provider) -> RuntimeProvider:
    options: dict[str, Any] = dict(row.options or {}) if isinstance(row.options, dict) else {}
    options.update(
        name=row.name, base_url=row.base_url or None, api_key=provider_api_key(row) or None,
        timeout=row.timeout_s, extra_headers=row.extra_headers or None,
        capabilities=row.capabilities or None)
    try:
        return build_provider(row.kind, **options)
    except (TypeError, ValueError) as exc:
        raise TurnSetupError(
            f"Provider “{row.name}” could not be set up: {exc} Ask an admin to check its "
            "settings.") from exc


# -- routing --------------------------------------------------------------------------------------
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
    """The routing table a turn of ``agent`` uses now (two queries)."""
    rows = (RoutingRule.objects.filter(team_id=agent.team_id, enabled=True)
            .filter(Q(agent__isnull=True) | Q(agent=agent)).order_by("-priority", "id"))
    route_rows = ModelRoute.objects.filter(team_id=agent.team_id).select_related("provider")
    return routing_table_from_rows(agent=agent, rule_rows=rows, route_rows=route_rows)


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


# -- tools, fallbacks, config -------------------------------------------------------------------
def runtime_tools(agent: Agent, *, context: ToolContext) -> tuple[list[RuntimeTool], list[str]]:
    """The agent's enabled tools as runtime tools bound to ``context`` (built-ins from the
    registry in ``agents.tools``, HTTP tools from their rows), and a warning for each one left
    out."""
    return tools_runtime_tools(agent, context=context)


def turn_tool_context(*, agent: Agent, trace: Trace, db: DbRunner | None) -> ToolContext:
    """What the turn's tools are bound to: its team, agent, user and conversation."""
    return ToolContext(
        team_id=agent.team_id, agent_id=agent.pk, user_id=trace.user_id,
        conversation_id=trace.conversation_id, trace_id=trace.pk, timezone=settings.TIME_ZONE,
        memory_recall_limit=agent.memory_recall_limit,
        memory_min_relevance=agent.memory_min_relevance, db=db or run_sync)


def turn_memory(*, agent: Agent, trace: Trace, message: Message) -> str:
    """Memory at the turn's start: the recalled ``[Memory context]`` block for the message (the
    agent's, the user's and the conversation's entries), after which the message is auto-saved
    when the agent does that (``memory.services.memory_turn_start``)."""
    owner = MemoryOwner(team_id=agent.team_id, agent_id=agent.pk, user_id=trace.user_id,
                        conversation_id=trace.conversation_id)
    return memory_turn_start(
        owner=owner, text=message.text, recall_limit=agent.memory_recall_limit,
        min_relevance=agent.memory_min_relevance, auto_save=agent.memory_auto_save,
        sender=str(trace.user_id or "anonymous"), message_id=message.uuid.hex[:12],
        trace_id=trace.pk)


def reliable_provider(*, agent: Agent, primary: Provider,
                      on_retry: OnRetry | None) -> tuple[ReliableProvider, list[dict[str, str]], list[str]]:
    """The chosen provider wrapped with retries and the agent's fallbacks, in order."""
    slots: list[RuntimeProvider | tuple[RuntimeProvider, str | None]] = [runtime_provider(primary)]
    used: list[dict[str, str]] = []
    warnings: list[str] = []
    entries = agent.fallbacks if isinstance(agent.fallbacks, list) else []
    names = {str(e.get("provider", "")) for e in entries if isinstance(e, dict)}
    rows = {p.name: p for p in Provider.objects.filter(team_id=agent.team_id, name__in=names)}
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        name, model = str(entry.get("provider") or ""), str(entry.get("model") or "")
        row = rows.get(name)
        if row is None:
            warnings.append(f"Fallback provider “{name}” does not exist and was skipped.")
            continue
        try:
            slots.append((runtime_provider(row), model or None))
        except TurnSetupError as exc:
            warnings.append(f"Fallback skipped: {exc}")
            continue
        used.append({"provider": name, "model": model})
    return ReliableProvider(slots, on_retry=on_retry, name=primary.name), used, warnings


def turn_config(agent: Agent, model: str) -> TurnConfig:
    return TurnConfig(
        model=model,
        system_prompt=agent.system_prompt,
        max_tool_iterations=agent.max_tool_iterations,
        parallel_tools=agent.parallel_tools,
        dispatcher=agent.tool_dispatcher,
        temperature=agent.temperature,
        max_tokens=agent.max_output_tokens,
        history_max_messages=agent.history_max_messages,
        compaction=CompactionSettings(enabled=agent.compaction_enabled,
                                      preserve_recent=agent.compaction_preserve_recent,
                                      max_estimated_tokens=agent.compaction_threshold_tokens),
        trajectory_states=agent.trajectory_states,
        inject_trajectory_state=agent.inject_trajectory_state,
        approval_timeout_s=float(agent.approval_timeout_s),
        step_timeout_s=float(agent.step_timeout_s),
        timezone=settings.TIME_ZONE,
    )


@dataclass
class RouteDown:
    """Where a ``route_down`` budget sends the rest of a turn: another model on the turn's own
    provider (``provider`` None), or another provider."""

    provider: RuntimeProvider | None
    provider_name: str
    provider_kind: str
    model: str


class BudgetHooks(TurnHooks):
    """Checks, before every model request of a turn, the agent's limits per turn (tokens, cost)
    and the team's and the person's budgets (``traces.budgets``): a request over a limit is
    refused with a message that says what to do, or, for a ``route_down`` budget, goes to the
    budget's cheaper route with the rest of the turn. Decisions are noted on the trace."""

    def __init__(self, *, max_tokens: int | None, max_cost: Any, provider_kind: str, model: str,
                 prices: PriceTable | None = None, team_id: int | None = None,
                 user_id: int | None = None, budgets: bool = False,
                 routes: dict[int, RouteDown | None] | None = None, trace_id: int | None = None,
                 attempt: int = 0, db: DbRunner | None = None, prompt_tokens: int = 0) -> None:
        self.max_tokens = max_tokens
        self.max_cost = max_cost
        self.provider_kind = provider_kind
        self.model = model
        self.prices = prices if prices is not None else PriceTable()
        self.team_id = team_id
        self.user_id = user_id
        self.budgets = budgets
        self.routes = routes or {}
        self.trace_id = trace_id
        self.attempt = attempt
        self.db: DbRunner = db or run_sync
        self.turn_cost = Decimal(0)
        self.next_prompt_tokens = prompt_tokens
        self.last_output_tokens = 0
        self.warned = False
        self.routed = False

    async def before_llm_call(self, iteration: int, usage_so_far: Usage) -> LlmCallDecision | None:
        if self.max_tokens and usage_so_far.total_tokens >= self.max_tokens:
            return LlmCallDecision.block(
                f"This turn used {usage_so_far.total_tokens:,} tokens and reached the agent's "
                f"limit of {self.max_tokens:,} tokens per turn, so it was stopped. Ask a shorter "
                "question, or ask an admin to raise the limit.")
        if self.max_cost is not None and self.turn_cost >= self.max_cost:
            return LlmCallDecision.block(
                f"This turn cost ${self.turn_cost:.4f} and reached the agent's limit of "
                f"${self.max_cost:.4f} per turn, so it was stopped. Ask an admin to raise "
                "the limit if you need longer turns.")
        if self.budgets and self.team_id:
            return await self._check_budgets()
        return None

    async def after_llm_call(self, call: LlmCall) -> None:
        kind = self.prices.kind_of(team_id=self.team_id, provider_name=call.provider) or self.provider_kind
        priced = self.prices.cost(provider_kind=kind, model=call.model, usage=call.usage,
                                  team_id=self.team_id)
        self.turn_cost += priced.cost
        # The next request re-sends this one's prompt and its answer (tool results come on top).
        self.next_prompt_tokens = call.usage.prompt_tokens + call.usage.output_tokens
        self.last_output_tokens = call.usage.output_tokens

    def next_call_estimate(self) -> Decimal:
        """The next request priced as uncached input of the size the conversation has reached,
        plus as much output as the last answer."""
        match = self.prices.match(provider_kind=self.provider_kind, model=self.model,
                                  team_id=self.team_id)
        if match is None:
            return Decimal(0)
        usage = Usage(input_tokens=self.next_prompt_tokens, output_tokens=self.last_output_tokens)
        return cost_usd(usage, match.price)

    async def _check_budgets(self) -> LlmCallDecision | None:
        estimate = self.next_call_estimate()
        states = await self.db(budget_states, team_id=self.team_id, user_id=self.user_id)
        verdict = budget_decide(states, estimate=estimate)
        if verdict.action == "block":
            await self._note(verdict.state.note(status="blocked", estimate=estimate)
                             | {"message": verdict.message})
            return LlmCallDecision.block(verdict.message)
        if verdict.action == "route_down" and not self.routed:
            target = self.routes.get(verdict.state.budget.pk)
            if target is None:
                message = (f"{verdict.message} (Its cheaper route is not set up, so the request "
                           "was refused.)")
                await self._note(verdict.state.note(status="blocked", estimate=estimate)
                                 | {"message": message})
                return LlmCallDecision.block(message)
            self.routed = self.warned = True
            note = verdict.state.note(status="routed_down", estimate=estimate) | {
                "from": f"{self.model}", "to": f"{target.provider_name} / {target.model}",
                "message": (f"{verdict.state.whose} {verdict.state.period_word} budget was "
                            f"exceeded ({money(verdict.state.spent)} of {money(verdict.state.limit)}), "
                            f"so the rest of this turn uses {target.model} on "
                            f"{target.provider_name} instead of {self.model}.")}
            await self._note(note, route={"provider_name": target.provider_name,
                                          "provider_kind": target.provider_kind,
                                          "model": target.model})
            self.provider_kind, self.model = target.provider_kind, target.model
            return LlmCallDecision.route_down(target.model, target.provider)
        if verdict.warnings and not self.warned:
            self.warned = True
            first = verdict.warnings[0]
            await self._note(first.note(status="warning", estimate=estimate)
                             | {"message": first.banner()})
        return None

    async def aclose(self) -> None:
        """Close the providers of routes to another provider (their HTTP clients)."""
        for route in self.routes.values():
            if route is not None and route.provider is not None:
                await route.provider.aclose()

    async def _note(self, note: dict[str, Any], route: dict[str, str] | None = None) -> None:
        if self.trace_id is None:
            return
        try:
            trace = await self.db(trace_budget_note, trace_id=self.trace_id, attempt=self.attempt,
                                  note=note, route=route)
            groups, payload = await self.db(live.trace_announcement, trace)
            await live.publish(groups, payload)
        except TraceNotOwned:
            return  # the recorder notices the lost trace and stops the turn


def budget_routes(*, team_id: int, budgets: Iterable[Budget],
                  primary: Provider | None = None) -> tuple[dict[int, RouteDown | None], list[str]]:
    """The route each ``route_down`` budget sends a turn to, built now (None when it cannot be
    used), and a warning for each one that cannot. A route on the turn's own provider
    (``primary``) only changes the model."""
    routes: dict[int, RouteDown | None] = {}
    warnings: list[str] = []
    for budget in budgets:
        if budget.mode != Budget.Mode.ROUTE_DOWN:
            continue
        row, model = budget.route_down_provider, budget.route_down_model
        if budget.route_down_hint:
            found = (ModelRoute.objects.filter(team_id=team_id, hint=budget.route_down_hint)
                     .select_related("provider").first())
            row, model = (found.provider, found.model) if found else (None, "")
        if row is None or not model or row.team_id != team_id:
            warnings.append(f"The {budget} routes down to a route that does not exist; past its "
                            "limit, requests are refused instead.")
            routes[budget.pk] = None
            continue
        if primary is not None and row.pk == primary.pk:
            routes[budget.pk] = RouteDown(None, row.name, row.kind, model)
            continue
        try:
            routes[budget.pk] = RouteDown(ReliableProvider([runtime_provider(row)], name=row.name),
                                          row.name, row.kind, model)
        except TurnSetupError as exc:
            warnings.append(f"The {budget}'s cheaper route cannot be used: {exc}")
            routes[budget.pk] = None
    return routes, warnings


def turn_history(*, trace: Trace, agent: Agent, branch: list[int] | None = None) -> list[RuntimeMessage]:
    """The history the turn continues: its branch of the conversation (``branch``: the turns
    before it, when the caller has them)."""
    messages = []
    for row in conversation_history_rows(trace=trace, limit=agent.history_max_messages, branch=branch):
        try:
            messages.append(RuntimeMessage.from_dict(
                {"role": row.role, "blocks": row.blocks or [], "usage": row.usage}))
        except (KeyError, TypeError, ValueError):
            logger.warning("message %s cannot be read as history; left out", row.pk)
    return messages


# -- everything ---------------------------------------------------------------------------------
@dataclass
class TurnSetup:
    provider: RuntimeProvider
    config: TurnConfig
    tools: list[RuntimeTool]
    history: list[RuntimeMessage]
    user_text: str
    hooks: TurnHooks | None
    routing: dict[str, Any]
    provider_name: str
    provider_kind: str
    model: str
    warnings: list[str]
    # The configuration version the turn runs with (it may have changed since the message).
    agent_version: int | None = None


def previous_trajectory_state(*, trace: Trace, branch: list[int] | None = None) -> dict[str, Any] | None:
    """The last trajectory state of the turns this one continues (on its branch), for the
    dynamic part of this turn's system prompt (the agent picks up where it left off)."""
    earlier = turn_branch_before(trace=trace) if branch is None else branch
    if not earlier:
        return None
    state = (TrajectoryState.objects.filter(trace_id__in=earlier)
             .order_by("-trace_id", "-iteration").only("fields").first())
    return dict(state.fields) if state is not None else None


def turn_setup_build(*, trace: Trace, on_retry: OnRetry | None = None,
                     db: DbRunner | None = None) -> TurnSetup:
    """``db`` runs the tools' database work from the turn's event loop (the worker passes its
    turn's database thread)."""
    agent = (Agent.objects.select_related("provider").filter(pk=trace.agent_id).first()
             if trace.agent_id else None)
    if agent is None:
        raise TurnSetupError("The agent of this conversation no longer exists. Start a new "
                             "conversation with another agent.")
    conversation = Conversation.objects.get(pk=trace.conversation_id)
    message = trace.user_message
    if message is None:
        raise TurnSetupError("The message of this turn was deleted, so there is nothing to answer.")
    user_text = message.text
    choice = route_turn(agent=agent, conversation=conversation, text=user_text)
    provider, fallbacks, fallback_warnings = reliable_provider(
        agent=agent, primary=choice.provider, on_retry=on_retry)
    tools, tool_warnings = runtime_tools(agent, context=turn_tool_context(agent=agent, trace=trace,
                                                                          db=db))
    routing = {**choice.routing, "fallbacks": fallbacks}
    hooks = None
    budgets = list(Budget.objects.filter(team_id=agent.team_id, enabled=True)
                   .filter(Q(user__isnull=True) | Q(user_id=trace.user_id))
                   .select_related("route_down_provider"))
    budget_warnings: list[str] = []
    if agent.max_tokens_per_turn or agent.max_cost_per_turn is not None or budgets:
        if agent.max_tokens_per_turn or agent.max_cost_per_turn is not None:
            routing["budget"] = {"max_tokens": agent.max_tokens_per_turn,
                                 "max_cost_usd": (str(agent.max_cost_per_turn)
                                                  if agent.max_cost_per_turn is not None else None)}
        routes, budget_warnings = budget_routes(team_id=agent.team_id, budgets=budgets,
                                                primary=choice.provider)
        hooks = BudgetHooks(
            max_tokens=agent.max_tokens_per_turn, max_cost=agent.max_cost_per_turn,
            provider_kind=choice.provider.kind, model=choice.model,
            prices=price_table_for(agent.team_id, with_providers=True), team_id=agent.team_id,
            user_id=trace.user_id, budgets=bool(budgets), routes=routes, trace_id=trace.pk,
            attempt=trace.attempts, db=db,
            prompt_tokens=estimate_tokens([{"role": "system", "content": agent.system_prompt},
                                           {"role": "user", "content": user_text}]))
    config = turn_config(agent, choice.model)
    config.memory_context = turn_memory(agent=agent, trace=trace, message=message)
    config.tool_timeout_s = loop_tool_timeout(tools, config.tool_timeout_s)
    branch = turn_branch_before(trace=trace)
    if agent.trajectory_states:
        config.previous_trajectory_state = previous_trajectory_state(trace=trace, branch=branch)
    return TurnSetup(
        provider=provider, config=config, tools=tools,
        history=turn_history(trace=trace, agent=agent, branch=branch), user_text=user_text, hooks=hooks,
        routing=routing, provider_name=choice.provider.name, provider_kind=choice.provider.kind,
        model=choice.model,
        warnings=[*choice.warnings, *fallback_warnings, *tool_warnings, *budget_warnings],
        agent_version=agent.version)
