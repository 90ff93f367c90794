"""From ``agents.models.Hook`` rows to the runtime hooks of one turn.

A webhook row becomes a ``WebhookHook``; a command row becomes the runtime's ``CommandHook``
for the operator's command named by its ``operator_key`` in ``settings.HOOK_COMMANDS`` (env
``HOOK_COMMANDS``, JSON: ``{"audit": {"command": "...", "timeout_s": 5}}``). A team admin only
picks one of those names and never types a command. A row naming a command the operator no
longer defines is left out (and logged).
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.db.models import Q

from agents.models import Agent, Hook
from agents.runtime.hooks import CommandHook, ToolHooks
from agents.runtime.hooks import Hook as RuntimeHook
from agents.team_config import kept

from .webhook import WebhookHook

logger = logging.getLogger(__name__)
Event = Hook.Event
DEFAULT_COMMAND_TIMEOUT_S = 10.0


def operator_commands() -> dict[str, dict[str, Any]]:
    """The operator's commands by name: ``{"command": str, "timeout_s": float}``, from
    ``settings.HOOK_COMMANDS`` (a string value is the command itself)."""
    commands: dict[str, dict[str, Any]] = {}
    for key, value in (getattr(settings, "HOOK_COMMANDS", None) or {}).items():
        spec = {"command": value} if isinstance(value, str) else dict(value or {})
        if isinstance(spec.get("command"), str) and spec["command"].strip():
            commands[str(key)] = spec
    return commands


def runtime_hook(row: Hook) -> RuntimeHook | None:
    """``row`` as a runtime hook; None when it cannot run (an unknown operator command)."""
    matcher = row.matcher.strip() or None
    if row.kind == Hook.Kind.WEBHOOK:
        return WebhookHook(name=row.name, url=row.url, secret=row.secret(), matcher=matcher,
                           timeout_s=float(row.timeout_s), uuid=row.uuid.hex)
    spec = operator_commands().get(row.operator_key)
    if spec is None:
        logger.warning("hook %s names the operator command %r, which HOOK_COMMANDS does not "
                       "define; left out", row.pk, row.operator_key)
        return None
    timeout = min(float(spec.get("timeout_s") or DEFAULT_COMMAND_TIMEOUT_S), float(row.timeout_s))
    return CommandHook(command=spec["command"], name=row.name, matcher=matcher, timeout_s=timeout)


def agent_hook_rows(agent: Agent, events: tuple[str, ...]) -> list[Hook]:
    """The enabled hooks of ``agent``'s team for ``events`` that apply to it (no agents
    chosen: every agent of the team), in their order."""
    def read() -> list[Hook]:
        # Every event's at once: a turn asks for the tool hooks and the message hooks.
        return list(Hook.objects.filter(team_id=agent.team_id, enabled=True)
                    .filter(Q(agents__isnull=True) | Q(agents=agent)).distinct()
                    .order_by("position", "id"))

    return [h for h in kept(agent.team_id, ("hooks", agent.pk), read) if h.event in events]


def _hooks(rows: list[Hook], event: str) -> list[RuntimeHook]:
    return [h for h in (runtime_hook(r) for r in rows if r.event == event) if h is not None]


def turn_tool_hooks(agent: Agent) -> ToolHooks | None:
    """The hooks around ``agent``'s tool calls; None when there are none."""
    rows = agent_hook_rows(agent, (Event.PRE_TOOL_USE, Event.POST_TOOL_USE))
    pre, post = _hooks(rows, Event.PRE_TOOL_USE), _hooks(rows, Event.POST_TOOL_USE)
    return ToolHooks(pre=pre, post=post) if pre or post else None


def turn_message_hooks(agent: Agent) -> tuple[list[RuntimeHook], list[RuntimeHook]]:
    """(on_message_received hooks, on_message_sending hooks) of ``agent``."""
    rows = agent_hook_rows(agent, (Event.MESSAGE_RECEIVED, Event.MESSAGE_SENDING))
    return _hooks(rows, Event.MESSAGE_RECEIVED), _hooks(rows, Event.MESSAGE_SENDING)


# Told to the model of a turn whose tool calls have hooks (after the system prompt): the
# "Hook feedback" ``merge_hook_feedback`` appends to a result is for it, not for the person.
HOOK_FEEDBACK_NOTE = (
    "Tool results may end with a \"Hook feedback:\" section: notes from this team's checks around "
    "tool calls, meant for you. Act on them when they matter (a call refused, arguments changed); "
    "do not quote or repeat them to the user.")


def with_hook_feedback_note(system_prompt: str) -> str:
    """``system_prompt`` followed by ``HOOK_FEEDBACK_NOTE``."""
    return f"{system_prompt.rstrip()}\n\n{HOOK_FEEDBACK_NOTE}" if system_prompt.strip() else HOOK_FEEDBACK_NOTE
