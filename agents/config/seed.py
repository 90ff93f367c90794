"""The demo configuration: the offline demo model with the built-in tools, so a newcomer's first
question produces a trace with several steps; two routing rules with their model routes, so
routing shows in traces; and, when ``OPENAI_API_KEY`` or ``ANTHROPIC_API_KEY`` is set, a real
provider (its key encrypted) with an agent for it.

Idempotent, and what a team changed later is kept: existing rows are never overwritten."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from agents.config.versions import agent_save, agent_snapshot
from agents.models import Agent, AgentVersion, ModelRoute, Provider, RoutingRule, Tool
from agents.tools.services import tools_sync_builtins
from agentsite.crypto import encrypt
from agentsite.models import Team
from agentsite.seed import SeedResult, demo_owner_seed

__all__ = ["DEMO_AGENT", "DEMO_PROVIDER", "agent_snapshot", "demo_agent_seed", "demo_seed"]

DEMO_PROVIDER = "Demo model (offline)"
DEMO_AGENT = "Demo assistant"
# A small delay per word piece, so that streaming is visible in the browser. Its cache keeps
# prompts from 256 tokens (providers' minimum is 1,024): the demo agent's prompts are shorter
# than that, and its cache reads should show offline.
DEMO_PROVIDER_OPTIONS = {"token_delay_s": 0.015, "cache_min_tokens": 256}
DEMO_SYSTEM_PROMPT = (
    "You are a friendly assistant. Answer briefly and clearly. Use the calculator for "
    "arithmetic, current_time for dates and times, the memory tools to remember and recall "
    "what the user tells you, and http_fetch to read a web page; then answer in plain words."
)
DEMO_DESCRIPTION = (
    "Runs on the offline demo model: no API key needed. It uses tools (the calculator, the "
    "clock, memory; forgetting asks you first), streams its answers and can be stopped; open "
    "any answer's trace to see every step."
)
DEMO_PROMPTS = [
    "What is 12 * (7 + 5)?",
    "What time is it in Tokyo?",
    "Remember that my favourite colour is blue",
    "Forget my favourite colour",
    "Tell me a story",
]
# What the model picker (and /model) offers besides the agent's own model.
DEMO_ALLOWED_MODELS = ["demo-fast", "demo-careful"]
DEMO_TOOLS = ("calculator", "current_time", "memory_store", "memory_recall", "memory_forget", "http_fetch")

# Team-wide routing: a message with one of the keywords goes to the hint's model route. The demo
# model answers for any model name, so the routes show in traces without any API key.
DEMO_ROUTES = (
    {"hint": "fast", "keywords": ["quick", "brief", "tldr"], "priority": 10, "model": "demo-fast"},
    {"hint": "careful", "keywords": ["step by step", "carefully", "in detail"], "priority": 5,
     "model": "demo-careful"},
)


@dataclass(frozen=True)
class EnvProvider:
    env_var: str
    provider_name: str
    kind: str
    agent_name: str
    model: str
    description: str


ENV_PROVIDERS = (
    EnvProvider("OPENAI_API_KEY", "OpenAI", Provider.Kind.OPENAI, "GPT assistant", "gpt-4o-mini",
                "OpenAI's gpt-4o-mini, with the built-in tools. Uses the OPENAI_API_KEY this "
                "server was started with."),
    EnvProvider("ANTHROPIC_API_KEY", "Anthropic", Provider.Kind.ANTHROPIC, "Claude assistant",
                "claude-sonnet-4-5",
                "Anthropic's Claude Sonnet 4.5, with the built-in tools. Uses the "
                "ANTHROPIC_API_KEY this server was started with."),
)
ENV_SYSTEM_PROMPT = (
    "You are a helpful assistant. Answer clearly and concisely. Use the tools when they help: "
    "the calculator for arithmetic, current_time for dates and times, the memory tools for what "
    "the user asks you to remember, http_fetch to read a web page."
)


@transaction.atomic
def demo_seed(*, password: str | None = None) -> SeedResult:
    """The whole demo: its team and owner (``agentsite.seed``), then its agents."""
    result = demo_owner_seed(password=password)
    demo_agent_seed(team=result.team, user=result.user)
    return result


def demo_agent_seed(*, team: Team, user: Any = None) -> Agent:
    """Everything above for ``team``; returns the demo agent."""
    provider, _ = Provider.objects.get_or_create(
        team=team, name=DEMO_PROVIDER,
        defaults={"kind": Provider.Kind.DEMO, "options": dict(DEMO_PROVIDER_OPTIONS)})
    tools = builtin_tools_seed(team=team)
    agent = _agent_seed(team=team, user=user, name=DEMO_AGENT, provider=provider, model="demo",
                        system_prompt=DEMO_SYSTEM_PROMPT, description=DEMO_DESCRIPTION, tools=tools,
                        suggested_prompts=list(DEMO_PROMPTS),
                        allowed_models=list(DEMO_ALLOWED_MODELS))
    demo_routing_seed(team=team, provider=provider)
    env_providers_seed(team=team, user=user)
    return agent


def builtin_tools_seed(*, team: Team) -> list[Tool]:
    """The team's built-in Tool rows (created from the code when missing), those the demo uses."""
    tools_sync_builtins(team)
    rows = {t.name: t for t in Tool.objects.filter(team=team, kind=Tool.Kind.BUILTIN, name__in=DEMO_TOOLS)}
    return [rows[name] for name in DEMO_TOOLS if name in rows]


def demo_routing_seed(*, team: Team, provider: Provider) -> None:
    """The demo rules and routes, only for a team that has no routing of its own yet: a team
    that edited, renamed or removed some of them keeps what it made."""
    if RoutingRule.objects.filter(team=team).exists() or ModelRoute.objects.filter(team=team).exists():
        return
    for route in DEMO_ROUTES:
        RoutingRule.objects.create(team=team, hint=route["hint"], keywords=list(route["keywords"]),
                                   priority=route["priority"])
        ModelRoute.objects.create(team=team, hint=route["hint"], provider=provider, model=route["model"])


def env_providers_seed(*, team: Team, user: Any = None) -> list[Agent]:
    """A provider and an agent for each API key set in the environment. An existing provider
    keeps its own key (the team may have replaced or removed it since)."""
    agents = []
    for spec in ENV_PROVIDERS:
        key = os.environ.get(spec.env_var, "").strip()
        if not key:
            continue
        provider, _ = Provider.objects.get_or_create(
            team=team, name=spec.provider_name,
            defaults={"kind": spec.kind, "api_key_encrypted": encrypt(key)})
        tools = builtin_tools_seed(team=team)
        agents.append(_agent_seed(team=team, user=user, name=spec.agent_name, provider=provider,
                                  model=spec.model, system_prompt=ENV_SYSTEM_PROMPT,
                                  description=spec.description, tools=tools))
    return agents


def _agent_seed(*, team: Team, user: Any, name: str, provider: Provider, model: str,
                system_prompt: str, description: str, tools: list[Tool], **fields: Any) -> Agent:
    agent = Agent.objects.filter(team=team, name=name).first()
    if agent is None:
        agent = Agent(team=team, name=name, provider=provider, model=model,
                      system_prompt=system_prompt, description=description, **fields)
        agent_save(agent=agent, tools=tools, user=user)
    elif not agent.versions.exists():
        # Made before versions were kept: its state now is its first version.
        AgentVersion.objects.create(agent=agent, number=agent.version,
                                    snapshot=agent_snapshot(agent), created_by=user)
    return agent
