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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db.models import Q

from agents.runtime.builtin import CalculatorTool, CurrentTimeTool
from agents.runtime.events import Retry
from agents.runtime.loop import (
    CompactionSettings,
    LlmCallDecision,
    TurnConfig,
    TurnHooks,
)
from agents.runtime.messages import Message as RuntimeMessage
from agents.runtime.pricing import Usage
from agents.runtime.providers import build_provider
from agents.runtime.providers.base import Provider as RuntimeProvider
from agents.runtime.providers.reliable import ReliableProvider
from agents.runtime.routing import ModelRoute as RuntimeModelRoute
from agents.runtime.routing import RoutingRule as RuntimeRoutingRule
from agents.runtime.routing import decide
from agents.runtime.tools import Tool as RuntimeTool
from traces.models import Trace, TrajectoryState
from traces.recorder import step_cost

from .models import Agent, Conversation, ModelRoute, Provider, RoutingRule, Tool
from .selectors import conversation_history_rows

logger = logging.getLogger(__name__)

OnRetry = Callable[[Retry], Awaitable[None]]

# Built-in tools by the name a Tool row gives. HTTP and memory tools join this registry later.
BUILTIN_TOOLS: dict[str, Callable[[], RuntimeTool]] = {
    "calculator": CalculatorTool,
    "current_time": lambda: CurrentTimeTool(default_timezone=settings.TIME_ZONE),
}


class TurnSetupError(Exception):
    """Configuration that cannot run; the message tells the user what to do."""


def provider_api_key(provider: Provider) -> str:
    """The provider's API key in clear, or "" when it has none.

    Keys are stored encrypted; reading them needs the encryption of a later release, so a
    stored key is refused here with a message instead of being sent scrambled."""
    if not provider.api_key_encrypted:
        return ""
    raise TurnSetupError(
        f"Provider “{provider.name}” has a stored API key, but this version of agentsite cannot "
        "read stored keys yet. Ask an admin to remove the key or upgrade agentsite.")


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


def route_turn(*, agent: Agent, conversation: Conversation, text: str) -> RouteChoice:
    """Which provider and model answer ``text``: a model chosen with /model for this
    conversation wins; otherwise the team's routing rules (this agent's and team-wide) pick a
    hint, and a model route with that hint picks the provider and model."""
    if conversation.model_override:
        return RouteChoice(agent.provider, conversation.model_override, {
            "rule": None, "hint": None, "matched_keyword": None, "matched_pattern": None,
            "reason": "The model was chosen for this conversation with /model.",
            "provider": agent.provider.name, "model": conversation.model_override,
        })
    rows = list(RoutingRule.objects.filter(team_id=agent.team_id, enabled=True)
                .filter(Q(agent__isnull=True) | Q(agent=agent)).order_by("-priority", "id"))
    rules: list[RuntimeRoutingRule] = []
    by_rule: dict[int, RoutingRule] = {}
    warnings: list[str] = []
    for row in rows:
        rule = RuntimeRoutingRule.lenient(
            hint=row.hint, keywords=_strings(row.keywords), patterns=_strings(row.patterns),
            priority=row.priority, min_length=row.min_length, max_length=row.max_length)
        if rule.skipped_patterns:
            warnings.append(f"Routing rule “{row.hint}” has patterns that cannot be used and were "
                            f"skipped: {', '.join(rule.skipped_patterns)}")
        rules.append(rule)
        by_rule[id(rule)] = row
    route_rows = list(ModelRoute.objects.filter(team_id=agent.team_id).select_related("provider"))
    targets = [RuntimeModelRoute(r.hint, r.provider.name, r.model) for r in route_rows]
    decision = decide(text, rules, targets)
    route, target = decision.route, decision.target
    provider, model = agent.provider, agent.model
    if route is None:
        reason = "No routing rule matched; the agent's own model answers."
    elif target is None:
        reason = (f"Rule “{route.hint}” matched ({route.reason}), but no model route has that "
                  "hint; the agent's own model answers.")
    else:
        provider = route_rows[targets.index(target)].provider
        model = target.model
        reason = f"Rule “{route.hint}” matched ({route.reason})."
    rule_row = by_rule.get(id(route.rule)) if route is not None else None
    return RouteChoice(provider, model, {
        "rule": str(rule_row.uuid) if rule_row else None,
        "hint": route.hint if route else None,
        "matched_keyword": route.matched_keyword if route else None,
        "matched_pattern": route.matched_pattern if route else None,
        "reason": reason, "provider": provider.name, "model": model,
    }, warnings)


def _strings(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


# -- tools, fallbacks, config -------------------------------------------------------------------
def runtime_tools(agent: Agent) -> tuple[list[RuntimeTool], list[str]]:
    """The agent's enabled tools as runtime tools, and a warning for each one left out."""
    tools: list[RuntimeTool] = []
    warnings: list[str] = []
    for row in agent.tools.filter(team_id=agent.team_id, enabled=True).order_by("name"):
        factory = BUILTIN_TOOLS.get(row.name) if row.kind == Tool.Kind.BUILTIN else None
        if factory is None:
            warnings.append(f"Tool “{row.name}” ({row.get_kind_display()}) is not available in "
                            "this version and was left out of the turn.")
            continue
        tool = factory()
        tool.requires_approval = row.requires_approval
        tools.append(tool)
    return tools, warnings


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


class BudgetHooks(TurnHooks):
    """Stops a turn before a model request once it has used the agent's tokens or cost per turn."""

    def __init__(self, *, max_tokens: int | None, max_cost: Any, provider_kind: str,
                 model: str) -> None:
        self.max_tokens = max_tokens
        self.max_cost = max_cost
        self.provider_kind = provider_kind
        self.model = model

    async def before_llm_call(self, iteration: int, usage_so_far: Usage) -> LlmCallDecision | None:
        if self.max_tokens and usage_so_far.total_tokens >= self.max_tokens:
            return LlmCallDecision.block(
                f"This turn used {usage_so_far.total_tokens:,} tokens and reached the agent's "
                f"limit of {self.max_tokens:,} tokens per turn, so it was stopped. Ask a shorter "
                "question, or ask an admin to raise the limit.")
        if self.max_cost is not None:
            cost, _ = step_cost(provider_kind=self.provider_kind, model=self.model,
                                usage=usage_so_far)
            if cost >= self.max_cost:
                return LlmCallDecision.block(
                    f"This turn cost ${cost:.4f} and reached the agent's limit of "
                    f"${self.max_cost:.4f} per turn, so it was stopped. Ask an admin to raise "
                    "the limit if you need longer turns.")
        return None


def turn_history(*, trace: Trace, agent: Agent) -> list[RuntimeMessage]:
    messages = []
    for row in conversation_history_rows(trace=trace, limit=agent.history_max_messages):
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


def previous_trajectory_state(*, trace: Trace) -> dict[str, Any] | None:
    """The last trajectory state of the conversation's previous turn, for the dynamic part of
    this turn's system prompt (the agent picks up where it left off)."""
    state = (TrajectoryState.objects
             .filter(trace__conversation_id=trace.conversation_id, trace_id__lt=trace.pk)
             .order_by("-trace_id", "-iteration").only("fields").first())
    return dict(state.fields) if state is not None else None


def turn_setup_build(*, trace: Trace, on_retry: OnRetry | None = None) -> TurnSetup:
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
    tools, tool_warnings = runtime_tools(agent)
    routing = {**choice.routing, "fallbacks": fallbacks}
    hooks = None
    if agent.max_tokens_per_turn or agent.max_cost_per_turn is not None:
        routing["budget"] = {"max_tokens": agent.max_tokens_per_turn,
                             "max_cost_usd": (str(agent.max_cost_per_turn)
                                              if agent.max_cost_per_turn is not None else None)}
        hooks = BudgetHooks(max_tokens=agent.max_tokens_per_turn, max_cost=agent.max_cost_per_turn,
                            provider_kind=choice.provider.kind, model=choice.model)
    config = turn_config(agent, choice.model)
    if agent.trajectory_states:
        config.previous_trajectory_state = previous_trajectory_state(trace=trace)
    return TurnSetup(
        provider=provider, config=config, tools=tools,
        history=turn_history(trace=trace, agent=agent), user_text=user_text, hooks=hooks,
        routing=routing, provider_name=choice.provider.name, provider_kind=choice.provider.kind,
        model=choice.model, warnings=[*choice.warnings, *fallback_warnings, *tool_warnings])
