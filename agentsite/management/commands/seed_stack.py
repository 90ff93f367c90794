"""``manage.py seed_stack '<json spec>'``: people and agents for a throwaway stack
(``agentsite.stack.Stack.seed``, browser tests and benchmarks); prints their public ids as JSON.
Part of the dev/test stack, so of the composition root: it may import the apps."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.utils import timezone

from agents.models import Agent, McpServer, Provider, Tool
from agents.runtime.builtin import CalculatorTool, CurrentTimeTool
from agents.tools.mcp.services import mcp_server_refresh
from agentsite.api_keys import api_key_create, api_key_revoke
from agentsite.models import ApiKey, Membership
from agentsite.personas import TEAM_A, TEAM_B, personas_seed, team_get_or_create
from agentsite.stack import PASSWORD
from traces.models import Budget, ModelPrice


def seed(spec: dict[str, Any]) -> dict[str, Any]:
    """People and agents for a test run (inside a configured Django).

    ``spec``: ``{"agents": [{"name": ..., "provider_options": {...}, "tools": [...],
    "fields": {...}, "provider": {...}, "model": ...}], "approval": [tool names that need
    approval], "mcp_servers": [{"name": ..., "transport": "stdio", "operator_key": ...,
    "default_policy": ..., "agents": [agent names given all its tools]}]}`` (tools belong to
    the team, so approval is per tool for every agent; an MCP server's tools are listed from
    the real server, under its default policy). The demo
    provider answers an agent unless its ``provider`` gives the fields of another one (``kind``,
    ``base_url``, ``options``, ``capabilities``: a real server for the live LLM tests); people:
    alice (owner), bob (member), vera (viewer) of "Team A", charlie (owner) of "Team B", all
    with the password ``PASSWORD``.

    ``api_keys``: ``[{"name": ..., "user": "alice", "scopes": [...], "rpm": n, "tpm": n,
    "state": "active" | "revoked" | "expired"}]``, made for the person's (first) team; their
    secrets come back under ``keys``. Agents of "Team B": ``team_b_agents`` (names).
    ``prices``: Team A's own prices of demo models (``{"model": ..., "input_per_mtok": ...,
    "output_per_mtok": ...}``); ``budgets``: Team A's budgets (``{"user": name or absent for
    the team's, "limit_usd": ..., "period": ..., "mode": ...}``)."""
    people = {name: user.pk for name, user in personas_seed(password=PASSWORD).items()}
    team_a = team_get_or_create(name=TEAM_A)
    specs = {"calculator": CalculatorTool, "current_time": CurrentTimeTool}
    agents = {}
    for entry in spec.get("agents") or [{"name": "Helper"}]:
        name = entry["name"]
        provider_fields = entry.get("provider") or {"kind": "demo",
                                                    "options": entry.get("provider_options") or {}}
        label = "Demo" if provider_fields.get("kind", "demo") == "demo" else "Provider"
        provider = Provider.objects.create(team=team_a, name=f"{label} for {name}",
                                           **provider_fields)
        tools = []
        for tool_name in entry.get("tools", ["calculator", "current_time"]):
            if tool_name not in specs:  # a tool the team has already (an MCP server's)
                tools.append(Tool.objects.get(team=team_a, name=tool_name))
                continue
            cls = specs[tool_name]
            row, _ = Tool.objects.update_or_create(
                team=team_a, name=tool_name,
                defaults={"kind": "builtin", "description": cls.description,
                          "parameters": cls.parameters,
                          "policy": "ask" if tool_name in spec.get("approval", []) else "allow"})
            tools.append(row)
        agent = Agent.objects.create(team=team_a, name=name, provider=provider,
                                     model=entry.get("model") or "demo",
                                     **(entry.get("fields") or {}))
        agent.tools.set(tools)
        agents[name] = str(agent.uuid)
    for entry in spec.get("mcp_servers") or []:
        server = McpServer.objects.create(
            team=team_a, name=entry["name"], transport=entry.get("transport", "stdio"),
            operator_key=entry.get("operator_key", ""), url=entry.get("url", ""),
            default_policy=entry.get("default_policy", "ask"))
        refreshed = mcp_server_refresh(server)
        if not refreshed.ok:
            raise RuntimeError(f"MCP server {server.name}: {refreshed.error}")
        for agent in Agent.objects.filter(team=team_a, name__in=entry.get("agents", [])):
            agent.tools.add(*server.tools.all())
    for entry in spec.get("prices") or []:
        ModelPrice.objects.create(team=team_a, provider_kind="demo", model=entry["model"],
                                  input_per_mtok=Decimal(str(entry["input_per_mtok"])),
                                  output_per_mtok=Decimal(str(entry["output_per_mtok"])),
                                  effective_from=timezone.now() - timedelta(days=1))
    for entry in spec.get("budgets") or []:
        Budget.objects.create(team=team_a, user_id=people[entry["user"]] if entry.get("user") else None,
                              limit_usd=Decimal(str(entry["limit_usd"])),
                              period=entry.get("period", Budget.Period.DAY),
                              mode=entry.get("mode", Budget.Mode.WARN))
    team_b = team_get_or_create(name=TEAM_B)
    for name in spec.get("team_b_agents") or []:
        provider = Provider.objects.create(team=team_b, name=f"Demo for {name}", kind="demo")
        Agent.objects.create(team=team_b, name=name, provider=provider, model="demo")
    keys = {}
    users = {u.username: u for u in get_user_model().objects.filter(pk__in=people.values())}
    for entry in spec.get("api_keys") or []:
        user = users[entry["user"]]
        membership = Membership.objects.filter(user=user).order_by("id").first()
        key, secret = api_key_create(membership=membership, name=entry["name"],
                                     scopes=entry.get("scopes", ["chat"]),
                                     kind=entry.get("kind", ApiKey.Kind.PERSONAL),
                                     rpm_limit=entry.get("rpm"), tpm_limit=entry.get("tpm"))
        if entry.get("state") == "revoked":
            api_key_revoke(key=key, membership=membership)
        elif entry.get("state") == "expired":
            ApiKey.objects.filter(pk=key.pk).update(expires_at=timezone.now() - timedelta(days=1))
        keys[entry["name"]] = secret
    slugs = dict(Agent.objects.filter(team__in=[team_a, team_b]).values_list("name", "slug"))
    return {"team": str(team_a.uuid), "agents": agents, "password": PASSWORD, "people": people,
            "keys": keys, "slugs": slugs}


class Command(BaseCommand):
    help = "Create the personas and demo agents of a throwaway stack (browser tests, benchmarks)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("spec", nargs="?", default="{}", help="JSON: agents and tools needing approval")

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(json.dumps(seed(json.loads(options["spec"]))))
