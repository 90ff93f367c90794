"""From database configuration to the runtime objects of one turn.

``turn_setup_build`` reads the trace's agent, provider, tools, routing rules and history and
returns a ``TurnSetup`` for ``agents.runtime.loop.run_turn``. It runs on the turn's database
thread. Configuration that cannot work (an unknown provider kind, a key that cannot be read)
raises ``TurnSetupError`` with a message for the user; configuration that is merely partly
usable (an unknown tool, a fallback naming a missing provider, a bad routing pattern) is left
out and reported in ``TurnSetup.warnings``.

Trace context: the config's ``traceparent_for`` gives each tool call the W3C ``traceparent``
it sends on (``turn_traceparent_for``): in the caller's trace when the turn came with one
(``Trace.meta["traceparent"]``), else in the turn's own, naming the span the call's step is
exported as (``traces.export.ids``).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from agents.models import Agent, Conversation, McpServer, Message, ProviderModel
from agents.models.providers import ModelSettings
from agents.runtime.history import estimate_tokens
from agents.runtime.hooks import Hook as RuntimeHook
from agents.runtime.hooks import ToolHooks
from agents.runtime.loop import (
    CompactionSettings,
    TurnConfig,
    TurnHooks,
)
from agents.runtime.messages import ImageBlock
from agents.runtime.messages import Message as RuntimeMessage
from agents.runtime.providers import get_provider_class
from agents.runtime.providers.base import REQUEST_PARAMS
from agents.runtime.providers.base import Provider as RuntimeProvider
from agents.runtime.tools import Tool as RuntimeTool
from agents.runtime.tools import ToolError
from agents.team_config import kept, team_config_changed, team_config_read
from agents.tools import ToolContext, loop_tool_timeout
from agents.tools import runtime_tools as tools_runtime_tools
from agents.tools.context import DbRunner, run_sync
from agents.tools.hooks import turn_message_hooks, turn_tool_hooks, with_hook_feedback_note
from agents.tools.mcp.resources import message_for_model
from agents.tools.mcp.services import mcp_refresh_if_stale, with_server_instructions
from agents.turns.answer_format import answer_check, answer_instructions
from agents.turns.attachments import with_image_data
from agents.turns.budgets import BudgetHooks, budget_routes
from agents.turns.providers import (
    OnRetry,
    TurnSetupError,
    reliable_provider,
)
from agents.turns.replay import HOOKS_OFF_WARNING, fork_agent, fork_route, fork_spec, fork_tools
from agents.turns.routing import (
    route_turn,
)
from agents.turns.selectors import conversation_history_rows, turn_branch_before
from agents.turns.trace_context import turn_traceparent_for, turn_tracestate
from agents.turns.windows import answer_reserve, context_window
from agentsite.models import Membership
from memory.services import MemoryOwner, memory_turn_start
from traces.costs.budgets import budget_scope
from traces.costs.pricing import PriceTable, price_table_for
from traces.export.config import export_on
from traces.models import Budget, Trace, TrajectoryState

logger = logging.getLogger(__name__)


# -- tools, fallbacks, config -------------------------------------------------------------------
def runtime_tools(agent: Agent, *, context: ToolContext,
                  names: list[str] | None = None) -> tuple[list[RuntimeTool], list[str]]:
    """The agent's enabled tools (or the team's tools named ``names``) as runtime tools bound
    to ``context`` (built-ins from the registry in ``agents.tools``, HTTP tools from their
    rows), and a warning for each one left out."""
    return tools_runtime_tools(agent, context=context, names=names)


def mcp_refresh_for(agent: Agent, user_id: int | None = None) -> list[McpServer]:
    """The MCP servers whose tools the agent uses, their tool lists fetched again when older
    than their time to live (a failed fetch keeps the last list and is retried a minute later;
    a server that is down fails its own tools' calls, never the turn)."""
    servers = kept(agent.team_id, ("mcp servers", agent.pk), lambda: list(
        McpServer.objects.filter(team_id=agent.team_id, enabled=True, tools__agents=agent).distinct()))
    if servers and mcp_refresh_if_stale(servers, user_id=user_id):
        team_config_changed(agent.team_id)  # the rest of the turn reads the refreshed tools
    return servers


def turn_tool_context(*, agent: Agent, trace: Trace, conversation: Conversation,
                      db: DbRunner | None) -> ToolContext:
    """What the turn's tools are bound to: its team, agent, user, conversation and end user."""
    return ToolContext(
        team_id=agent.team_id, agent_id=agent.pk, user_id=trace.user_id,
        conversation_id=trace.conversation_id, end_user=conversation.end_user, trace_id=trace.pk,
        timezone=settings.TIME_ZONE,
        memory_recall_limit=agent.memory_recall_limit,
        memory_min_relevance=agent.memory_min_relevance, db=db or run_sync,
        role=turn_role(trace))


def turn_role(trace: Trace) -> str:
    """The role of the turn's person in the team (read with the claimed trace,
    ``lifecycle.claimed_rows``, or here); someone without one counts as a viewer."""
    if hasattr(trace, "member_role"):
        role = trace.member_role
    else:
        role = (Membership.objects.filter(team_id=trace.team_id, user_id=trace.user_id)
                .values_list("role", flat=True).first() if trace.user_id is not None else None)
    return role or Membership.Role.VIEWER


def turn_memory(*, agent: Agent, trace: Trace, conversation: Conversation, message: Message) -> str:
    """Memory at the turn's start: the recalled ``[Memory context]`` block for the message (the
    agent's, the user's — or the conversation's end user's — and the conversation's entries),
    after which the message is auto-saved when the agent does that
    (``memory.services.memory_turn_start``)."""
    owner = MemoryOwner(team_id=agent.team_id, agent_id=agent.pk, user_id=trace.user_id,
                        conversation_id=trace.conversation_id, end_user=conversation.end_user)
    return memory_turn_start(
        owner=owner, text=message.text, recall_limit=agent.memory_recall_limit,
        min_relevance=agent.memory_min_relevance, auto_save=agent.memory_auto_save,
        sender=str(trace.user_id or "anonymous"), message_id=message.uuid.hex[:12],
        trace_id=trace.pk)


def turn_config(agent: Agent, model: str, *, model_settings: ModelSettings | None = None,
                streaming: bool = True, provider_kind: str | None = None) -> TurnConfig:
    """The loop's configuration for ``agent`` answering with ``model``. ``model_settings``: what the
    provider configures for the model (its longest answer, when the agent sets none);
    ``streaming``: whether the model streams (off: one request per answer, no deltas);
    ``provider_kind``: the kind of the provider answering (by default the agent's), for the
    catalogue's context window of the model."""
    configured = model_settings or ModelSettings()
    kind = (provider_kind if provider_kind is not None
            else agent.provider.kind if agent.provider_id else "")
    # Kept with the team's configuration: the catalogue's windows change with releases, not
    # between turns.
    window = kept(agent.team_id, ("window", kind, model, configured.context_window),
                  lambda: context_window(model, configured.context_window, provider_kind=kind,
                                         team_id=agent.team_id))
    # Compaction starts well before the window is full (as ZeroClaw's, at a fraction of it).
    threshold = min(agent.compaction_threshold_tokens,
                    max(int(window * settings.COMPACTION_WINDOW_FRACTION), 1))
    return TurnConfig(
        model=model,
        system_prompt=agent.system_prompt,
        max_tool_iterations=agent.max_tool_iterations,
        parallel_tools=agent.parallel_tools,
        dispatcher=agent.tool_dispatcher,
        temperature=agent.temperature,
        max_tokens=agent.max_output_tokens or configured.max_output_tokens,
        context_window=window,
        answer_reserve=answer_reserve(window, agent.max_output_tokens or configured.max_output_tokens),
        stream=streaming,
        history_max_messages=agent.history_max_messages,
        compaction=CompactionSettings(enabled=agent.compaction_enabled,
                                      preserve_recent=agent.compaction_preserve_recent,
                                      max_estimated_tokens=threshold),
        trajectory_states=agent.trajectory_states,
        inject_trajectory_state=agent.inject_trajectory_state,
        approval_timeout_s=float(agent.approval_timeout_s),
        step_timeout_s=float(agent.step_timeout_s),
        timezone=settings.TIME_ZONE,
    )


def turn_overrides_apply(config: TurnConfig, overrides: dict[str, Any] | None, *,
                         native: frozenset[str] | None = None) -> None:
    """The request's own model parameters (``Trace.meta["overrides"]``, checked when the
    request was admitted) merged over the agent's settings in ``config``: ``max_tokens`` caps
    the answer below the agent's own longest answer (never above it), ``temperature`` replaces
    the agent's, and the others (``top_p``, ``stop``, ``seed``, the penalties) go into every
    model request of the turn. ``response_format`` is checked on the answer
    (``agents.turns.answer_format``), and sent to the model when its provider takes it
    (``native``: the provider's request parameters; None, all of them), else asked for in the
    system prompt."""
    params = {k: v for k, v in (overrides or {}).items() if k in REQUEST_PARAMS and v is not None}
    response_format = params.pop("response_format", None)
    if response_format:
        config.answer_check = answer_check(response_format)
        if native is None or "response_format" in native:
            params["response_format"] = response_format
        else:
            config.answer_instructions = answer_instructions(response_format)
    cap = params.pop("max_tokens", None)
    if cap:
        config.max_tokens = min(config.max_tokens, int(cap)) if config.max_tokens else int(cap)
    if "temperature" in params:
        config.temperature = float(params.pop("temperature"))
    config.request_params = {**config.request_params, **params}


def _native_params(kind: str) -> frozenset[str] | None:
    """The request parameters a provider kind sends on to its model (None: unknown)."""
    try:
        return get_provider_class(kind).request_params
    except ValueError:
        return None


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
    return with_image_data(messages)


def _message_images(message: Any) -> list[ImageBlock]:
    """The images attached to the turn's message, with their bytes."""
    blocks = [b for b in message.blocks or [] if isinstance(b, dict) and b.get("type") == "image"]
    if not blocks:
        return []
    loaded = with_image_data([RuntimeMessage.from_dict({"role": "user", "blocks": blocks})])
    return [b for b in loaded[0].blocks if isinstance(b, ImageBlock)]


def _with_model_settings(provider: Any) -> None:
    """``provider``'s per-model settings, loaded into it (``Provider.settings_for`` reads them
    without a query), kept with the team's configuration."""
    if "model_settings" in getattr(provider, "_prefetched_objects_cache", {}):
        return
    rows = kept(provider.team_id, ("model settings", provider.pk),
                lambda: list(ProviderModel.objects.filter(provider_id=provider.pk)))
    queryset = ProviderModel.objects.filter(provider_id=provider.pk)
    queryset._result_cache, queryset._prefetch_done = list(rows), True
    provider._prefetched_objects_cache = {**getattr(provider, "_prefetched_objects_cache", {}),
                                          "model_settings": queryset}


# -- everything ---------------------------------------------------------------------------------
def _loaded(trace: Trace, relation: str) -> Any:
    """The trace's related row when it was read with the trace, else None."""
    return getattr(trace, relation) if getattr(Trace, relation).is_cached(trace) else None


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
    # The agent as the turn runs it (its limits, its version's fields for a fork).
    agent: Agent | None = None
    # The images the person attached to the message, with their bytes.
    user_images: list[ImageBlock] = field(default_factory=list)
    # The team's hooks: around tool calls, on the person's message, on the reply.
    tool_hooks: ToolHooks | None = None
    received_hooks: list[RuntimeHook] = field(default_factory=list)
    sending_hooks: list[RuntimeHook] = field(default_factory=list)
    prices: PriceTable | None = None  # the team's: the budgets and the recorder price with them


def _message_hook_fields(agent: Agent) -> dict[str, list[RuntimeHook]]:
    received, sending = turn_message_hooks(agent)
    return {"received_hooks": received, "sending_hooks": sending}


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
                     db: DbRunner | None = None, sampled: bool | None = None) -> TurnSetup:
    """``db`` runs the tools' database work from the turn's event loop (the worker passes its
    turn's database thread). ``sampled``: the sampled flag of the trace context the tool calls
    send on (``turn_traceparent_for``); by default, whether the team's turns are exported.

    The team's configuration (routing, tools, hooks, MCP servers, budgets, model settings) is
    read once per process while it does not change (``agents.team_config``); a fork runs with
    an agent version of its own and reads it afresh."""
    if trace.forked_from_id:
        return _setup_build(trace=trace, on_retry=on_retry, db=db, sampled=sampled)
    with team_config_read(trace.team_id):
        return _setup_build(trace=trace, on_retry=on_retry, db=db, sampled=sampled)


def _setup_build(*, trace: Trace, on_retry: OnRetry | None, db: DbRunner | None,
                 sampled: bool | None) -> TurnSetup:
    agent = _loaded(trace, "agent")
    if agent is None or not Agent.provider.is_cached(agent):
        # Kept with the team's configuration; the turn's own copy (a fork changes its fields).
        agent = copy.copy(kept(trace.team_id, ("agent", trace.agent_id), lambda: (
            Agent.objects.select_related("provider").filter(pk=trace.agent_id).first()))
            if trace.agent_id else None)
    if agent is None:
        raise TurnSetupError("The agent of this conversation no longer exists. Start a new "
                             "conversation with another agent.")
    agent = fork_agent(agent, trace)  # a fork's chosen version; unchanged for other turns
    conversation = _loaded(trace, "conversation") or Conversation.objects.get(pk=trace.conversation_id)
    message = trace.user_message
    if message is None:
        raise TurnSetupError("The message of this turn was deleted, so there is nothing to answer.")
    user_text = message.text
    choice = (fork_route(trace=trace, agent=agent)
              or route_turn(agent=agent, conversation=conversation, text=user_text))
    _with_model_settings(choice.provider)
    provider, fallbacks, fallback_warnings = reliable_provider(
        agent=agent, primary=choice.provider, on_retry=on_retry)
    servers = mcp_refresh_for(agent, trace.user_id)
    try:  # an MCP prompt's command, MCP resources attached: what the model gets of the message
        user_text = message_for_model(trace.meta or {}, servers, message, user_text,
                                      user_id=trace.user_id) or user_text
    except ToolError as exc:
        raise TurnSetupError(str(exc)) from exc
    fork = fork_spec(trace)
    version_tools = fork.get("tools") if fork is not None else None
    tools, tool_warnings = runtime_tools(agent, context=turn_tool_context(
        agent=agent, trace=trace, conversation=conversation, db=db),
                                         names=version_tools if isinstance(version_tools, list) else None)
    routing = {**choice.routing, "fallbacks": fallbacks}
    hooks, prices = None, price_table_for(agent.team_id, with_providers=True)
    budgets = kept(agent.team_id, ("budgets", trace.user_id, trace.api_key_id), lambda: list(
        Budget.objects.filter(team_id=agent.team_id, enabled=True)
        .filter(budget_scope(user_id=trace.user_id, api_key_id=trace.api_key_id))
        .select_related("route_down_provider")))
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
            prices=prices, team_id=agent.team_id,
            user_id=trace.user_id, api_key_id=trace.api_key_id, budgets=bool(budgets), routes=routes, trace_id=trace.pk,
            attempt=trace.attempts, db=db,
            prompt_tokens=estimate_tokens([{"role": "system", "content": agent.system_prompt},
                                           {"role": "user", "content": user_text}]))
    config = turn_config(agent, choice.model,
                         model_settings=choice.provider.settings_for(choice.model),
                         streaming=provider.capabilities_for(choice.model).streaming,
                         provider_kind=choice.provider.kind)
    config.memory_context = turn_memory(agent=agent, trace=trace, conversation=conversation,
                                        message=message)
    turn_overrides_apply(config, (trace.meta or {}).get("overrides"),
                         native=_native_params(choice.provider.kind))
    config.tool_timeout_s = loop_tool_timeout(tools, config.tool_timeout_s)
    if sampled is None:
        sampled = export_on(trace.team_id)
    config.traceparent_for = turn_traceparent_for(trace, sampled=sampled)
    config.tracestate = turn_tracestate(trace)
    branch = turn_branch_before(trace=trace)
    if agent.trajectory_states:
        config.previous_trajectory_state = previous_trajectory_state(trace=trace, branch=branch)
    message_hooks = _message_hook_fields(agent)
    tool_hooks: ToolHooks | None = turn_tool_hooks(agent)
    if fork is not None:
        tools, version_warnings = fork_tools(trace=trace, tools=tools, db=db or run_sync)
        tool_warnings = [*tool_warnings, *version_warnings]
        if fork.get("system_prompt") is not None:
            config.system_prompt = str(fork["system_prompt"])
        if tool_hooks or any(message_hooks.values()):
            tool_warnings.append(HOOKS_OFF_WARNING)
        tool_hooks, message_hooks = None, {"received_hooks": [], "sending_hooks": []}
    config.system_prompt = with_server_instructions(config.system_prompt, servers)
    if tool_hooks is not None:  # their feedback reaches the model in tool results: not to quote
        config.system_prompt = with_hook_feedback_note(config.system_prompt)
    if message_hooks["sending_hooks"]:
        # A hook may rewrite or withhold the reply: nobody sees it before the hook has.
        config.stream = False
    return TurnSetup(
        provider=provider, config=config, tools=tools,
        history=turn_history(trace=trace, agent=agent, branch=branch), user_text=user_text, hooks=hooks,
        routing=routing, provider_name=choice.provider.name, provider_kind=choice.provider.kind,
        model=choice.model, warnings=[*choice.warnings, *fallback_warnings, *tool_warnings, *budget_warnings],
        agent_version=agent.version, user_images=_message_images(message), agent=agent,
        tool_hooks=tool_hooks, prices=prices, **message_hooks)
