"""MCP prompts as the chat's "/" commands and starters.

A prompt of an enabled server whose tools an agent uses (as for its instructions) is offered in
that agent's conversations as the command ``/<server>_<prompt>`` (``PromptCommand.word``), in
the "/" palette with its arguments and, when it needs none, as a starter. Arguments follow the
command as ``name=value`` pairs, quoted when they hold spaces (``/docs_summary topic="rate
limits"``); a prompt with a single argument also takes the whole rest as it (``/time_greet
Ada``). The chat checks them against what the server listed (``prompt_arguments``: an unknown
name, a missing required one) before any turn starts. The turn's worker fetches the prompt
(``prompts/get``, through the SDK like every call) and sends its text to the model in place of
the command (``prompt_expand``, by way of ``resources.message_for_model``); the conversation
shows the command as typed, the trace and the later turns' history what the model got.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync
from django.core.exceptions import ValidationError

from agents.models import Agent, McpServer
from agents.runtime.tools import ToolError

from . import sdk_client
from .endpoints import endpoint_for

PROMPT_META = "mcp_prompt"  # in a turn's ``Trace.meta``: the prompt it runs (``prompt_call``)
WHAT_CHARS = 120


@dataclass(frozen=True)
class PromptCommand:
    word: str  # "/time_greet"
    server_id: int
    server: str
    name: str
    title: str
    description: str
    arguments: tuple[dict[str, Any], ...]

    @property
    def usage(self) -> str:
        """``/time_greet name=<name> [tone=<tone>]``"""
        parts = [self.word]
        for argument in self.arguments:
            part = f"{argument['name']}=<{argument['name']}>"
            parts.append(part if argument.get("required") else f"[{part}]")
        return " ".join(parts)

    @property
    def what(self) -> str:
        text = " ".join((self.title or self.description or f"the prompt “{self.name}”").split())
        return f"{text[:WHAT_CHARS]} (from {self.server})"

    @property
    def label(self) -> str:
        """A starter's text."""
        short = self.description if len(self.description) <= 60 else ""
        return " ".join((self.title or short or self.name).split())[:WHAT_CHARS]

    @property
    def needs_arguments(self) -> bool:
        return any(a.get("required") for a in self.arguments)


def _word(server: str, name: str) -> str:
    return "/" + re.sub(r"[^A-Za-z0-9_-]+", "_", f"{server}_{name}").strip("_")[:64]


def agent_prompts(agent: Agent) -> list[PromptCommand]:
    """The prompts offered in ``agent``'s conversations, by command word."""
    servers = (McpServer.objects.filter(team_id=agent.team_id, enabled=True, tools__agents=agent)
               .exclude(prompts=[]).distinct().only("pk", "name", "prompts").order_by("name"))
    found: dict[str, PromptCommand] = {}
    for server in servers:
        for prompt in server.prompts if isinstance(server.prompts, list) else []:
            if not isinstance(prompt, dict) or not prompt.get("name"):
                continue
            command = PromptCommand(
                word=_word(server.name, str(prompt["name"])), server_id=server.pk, server=server.name,
                name=str(prompt["name"]), title=str(prompt.get("title") or ""),
                description=str(prompt.get("description") or ""),
                arguments=tuple(a for a in prompt.get("arguments") or () if isinstance(a, dict) and a.get("name")))
            found.setdefault(command.word.lower(), command)
    return sorted(found.values(), key=lambda c: c.word)


def prompt_command_find(agent: Agent, token: str) -> PromptCommand | None:
    """The prompt the command word ``token`` (``/Time_Greet``) names in ``agent``'s chat."""
    wanted = token.lower()
    return next((c for c in agent_prompts(agent) if c.word.lower() == wanted), None)


def prompt_arguments(command: PromptCommand, text: str) -> dict[str, str]:
    """The arguments typed after the command (see the module); ``ValidationError`` saying what
    is wrong and how it is used."""
    names = [str(a["name"]) for a in command.arguments]
    text = text.strip()
    try:
        tokens = shlex.split(text)
    except ValueError as exc:
        raise ValidationError(f"{command.word}: {exc}. Use: {command.usage}") from exc
    values: dict[str, str] = {}
    if len(names) == 1 and text and not any("=" in t for t in tokens):
        values[names[0]] = " ".join(tokens)
    else:
        for token in tokens:
            key, sep, value = token.partition("=")
            if not sep or key not in names:
                known = ", ".join(names) or "none"
                raise ValidationError(f"{command.word}: “{token[:60]}” is not one of its arguments "
                                      f"(name=value; its arguments: {known}). Use: {command.usage}")
            values[key] = value
    missing = [str(a["name"]) for a in command.arguments if a.get("required") and not values.get(str(a["name"]))]
    if missing:
        raise ValidationError(f"{command.word} needs {', '.join(missing)}. Use: {command.usage}")
    return values


def prompt_call(command: PromptCommand, arguments: dict[str, str]) -> dict[str, Any]:
    """What a turn's ``Trace.meta[PROMPT_META]`` holds of the prompt it runs."""
    return {"server": command.server_id, "name": command.name, "arguments": arguments}


def prompt_expand(call: dict[str, Any], servers: list[McpServer], *, user_id: int | None = None) -> str:
    """The text of the prompt ``call`` names, fetched from its server (one of ``servers``, the
    agent's); ``ToolError`` saying why not."""
    server = next((s for s in servers if s.pk == call.get("server")), None)
    if server is None:
        raise ToolError("The prompt's MCP server is no longer one this agent uses, so the "
                        "command could not be run.")
    arguments = {str(k): str(v) for k, v in (call.get("arguments") or {}).items()}
    result = async_to_sync(sdk_client().get_prompt)(
        endpoint_for(server, user_id=user_id), str(call.get("name")), arguments, timeout_s=server.timeout_s,
        max_bytes=server.max_result_bytes)
    if not result.text.strip():
        raise ToolError(f"The MCP server “{server.name}” answered the prompt with no text.")
    return result.text
