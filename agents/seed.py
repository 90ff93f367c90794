"""The demo agent: the offline demo model with the built-in tools, so a newcomer's first
question produces a trace with several steps. Idempotent; what a team changed later is kept."""

from __future__ import annotations

from typing import Any

from agents.runtime.builtin import CalculatorTool, CurrentTimeTool
from agentsite.models import Team

from .models import Agent, AgentVersion, Provider, Tool

DEMO_PROVIDER = "Demo model (offline)"
DEMO_AGENT = "Demo assistant"
# A small delay per word piece, so that streaming is visible in the browser.
DEMO_PROVIDER_OPTIONS = {"token_delay_s": 0.015}
DEMO_SYSTEM_PROMPT = (
    "You are a friendly assistant. Answer briefly and clearly. Use the calculator for "
    "arithmetic and the current_time tool for dates and times, then answer in plain words."
)
DEMO_DESCRIPTION = (
    "Runs on the offline demo model: no API key needed. Try “What is 12 * (7 + 5)?” or "
    "“What time is it in Tokyo?” and open the trace to see every step."
)
BUILTIN_DEMO_TOOLS = (CalculatorTool, CurrentTimeTool)


def demo_agent_seed(*, team: Team, user: Any = None) -> Agent:
    provider, _ = Provider.objects.get_or_create(
        team=team, name=DEMO_PROVIDER,
        defaults={"kind": Provider.Kind.DEMO, "options": dict(DEMO_PROVIDER_OPTIONS)})
    tools = []
    for cls in BUILTIN_DEMO_TOOLS:
        tool, _ = Tool.objects.get_or_create(
            team=team, name=cls.name,
            defaults={"kind": Tool.Kind.BUILTIN, "description": cls.description,
                      "parameters": cls.parameters})
        tools.append(tool)
    agent, created = Agent.objects.get_or_create(
        team=team, name=DEMO_AGENT,
        defaults={"provider": provider, "model": "demo", "system_prompt": DEMO_SYSTEM_PROMPT,
                  "description": DEMO_DESCRIPTION})
    if created:
        agent.tools.set(tools)
    AgentVersion.objects.get_or_create(
        agent=agent, number=1, defaults={"snapshot": agent_snapshot(agent), "created_by": user})
    return agent


def agent_snapshot(agent: Agent) -> dict[str, Any]:
    """The agent's configuration as plain JSON (for ``AgentVersion``)."""
    skip = {"id", "uuid", "team", "provider", "created_at", "updated_at", "version"}
    data: dict[str, Any] = {}
    for field in agent._meta.concrete_fields:
        if field.name in skip:
            continue
        value = getattr(agent, field.attname)
        data[field.name] = str(value) if value is not None and field.get_internal_type() == "DecimalField" else value
    data["provider"] = agent.provider.name
    data["tools"] = sorted(agent.tools.values_list("name", flat=True))
    return data
