"""Budgets inside a turn: before every model request, the agent's per-turn limits and the
team's and person's budgets (``traces.costs.budgets``) decide: go on, warn, refuse, or route the
rest of the turn to a cheaper model."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from agents.models import ModelRoute, Provider
from agents.runtime.loop import (
    LlmCall,
    LlmCallDecision,
    TurnHooks,
)
from agents.runtime.pricing import Usage, cost_usd
from agents.runtime.providers.base import Provider as RuntimeProvider
from agents.runtime.providers.reliable import ReliableProvider
from agents.tools.context import DbRunner, run_sync
from agents.turns.announce import announcements
from agents.turns.providers import TurnSetupError, runtime_provider
from traces.costs.budgets import budget_decide, budget_states, money
from traces.costs.pricing import PriceTable
from traces.models import Budget
from traces.record import live
from traces.record.services import TraceNotOwned, trace_budget_note

logger = logging.getLogger(__name__)


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
    and the team's and the person's budgets (``traces.costs.budgets``): a request over a limit is
    refused with a message that says what to do, or, for a ``route_down`` budget, goes to the
    budget's cheaper route with the rest of the turn. Decisions are noted on the trace."""

    def __init__(self, *, max_tokens: int | None, max_cost: Any, provider_kind: str, model: str,
                 prices: PriceTable | None = None, team_id: int | None = None,
                 user_id: int | None = None, api_key_id: int | None = None, budgets: bool = False,
                 routes: dict[int, RouteDown | None] | None = None, trace_id: int | None = None,
                 attempt: int = 0, db: DbRunner | None = None, prompt_tokens: int = 0) -> None:
        self.max_tokens = max_tokens
        self.max_cost = max_cost
        self.provider_kind = provider_kind
        self.model = model
        self.prices = prices if prices is not None else PriceTable()
        self.team_id = team_id
        self.user_id = user_id
        self.api_key_id = api_key_id
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
        reason = self._turn_limit_reason(usage_so_far)
        if reason is not None:
            return LlmCallDecision.block(reason)
        if self.budgets and self.team_id:
            return await self._check_budgets()
        return None

    async def before_tool_calls(self, iteration: int, usage_so_far: Usage,
                                names: list[str]) -> str | None:
        """Before the model's tool calls run: if the request that reads their results would be
        refused, the tools do not run (no side effects, no cost, for an answer that would never
        come) and the turn ends saying so. Nothing changes otherwise (a ``route_down`` budget
        still routes at the next request)."""
        reason = self._turn_limit_reason(usage_so_far)
        if reason is None and self.budgets and self.team_id:
            estimate = self.next_call_estimate()
            states = await self.db(budget_states, team_id=self.team_id, user_id=self.user_id,
                                  api_key_id=self.api_key_id)
            verdict = budget_decide(states, estimate=estimate)
            unroutable = (verdict.action == "route_down" and not self.routed
                          and self.routes.get(verdict.state.budget.pk) is None)
            if verdict.action == "block" or unroutable:
                reason = verdict.message
                await self._note(verdict.state.note(status="blocked", estimate=estimate)
                                 | {"message": reason, "before_tools": names})
        if reason is None:
            return None
        listed = ", ".join(names)
        return (f"{reason} The model asked to run {listed}; {'it was' if len(names) == 1 else 'they were'} "
                "not run, because the request that reads the results would not be made.")

    def _turn_limit_reason(self, usage_so_far: Usage) -> str | None:
        if self.max_tokens and usage_so_far.total_tokens >= self.max_tokens:
            return (f"This turn used {usage_so_far.total_tokens:,} tokens and reached the agent's "
                    f"limit of {self.max_tokens:,} tokens per turn, so it was stopped. Ask a shorter "
                    "question, or ask an admin to raise the limit.")
        if self.max_cost is not None and self.turn_cost >= self.max_cost:
            return (f"This turn cost ${self.turn_cost:.4f} and reached the agent's limit of "
                    f"${self.max_cost:.4f} per turn, so it was stopped. Ask an admin to raise "
                    "the limit if you need longer turns.")
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
        states = await self.db(budget_states, team_id=self.team_id, user_id=self.user_id,
                                  api_key_id=self.api_key_id)
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
            state = verdict.state
            crossed = "was exceeded" if state.spent > state.limit else "would be crossed by the next request"
            note = state.note(status="routed_down", estimate=estimate) | {
                "from": f"{self.model}", "to": f"{target.provider_name} / {target.model}",
                "message": (f"{state.whose} {state.period_word} budget {crossed} "
                            f"({money(state.spent)} spent of {money(state.limit)}), so the rest "
                            f"of this turn uses {target.model} on {target.provider_name} instead "
                            f"of {self.model}.")}
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
            groups, payload = await self.db(announcements().trace, trace)
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
