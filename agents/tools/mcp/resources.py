"""MCP resources a person attaches to a message, and what the model gets of a chat message.

The chat's resource menu (beside "+") lists the resources of the enabled servers whose tools
the conversation's agent uses (``agent_resources``, from their last discovery; templates are
left to the agent's ``<server>_resources_read`` tool, which fills them in). The chosen ones go
with the message (``resource_refs`` checks that each is one of those); the turn's worker reads
them (``resources/read``, through the SDK) and the model gets their contents after the
message's text, each under a line naming it, scrubbed of credentials as a tool's output is. The message shows what was typed and the names
of what was attached; its blocks, which later turns' history reads, hold what the model got.

``message_for_model`` is what the worker asks: the text the model gets for a message that runs
an MCP prompt (``prompts``) or has resources attached, or None when it is the message as typed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync
from django.core.exceptions import ValidationError

from agents.models import Agent, McpServer, Message
from agents.runtime.sanitize import bidi_visible
from agents.runtime.scrub import scrub_secrets
from agents.runtime.tools import ToolError

from . import sdk_client
from .endpoints import endpoint_for
from .prompts import PROMPT_META, prompt_expand

RESOURCES_META = "mcp_resources"  # in a turn's ``Trace.meta``: [{"server", "uri", "label"}]
MAX_ATTACHED = 5


@dataclass(frozen=True)
class AttachableResource:
    server_id: int
    server: str
    uri: str
    label: str
    description: str
    mime_type: str

    @property
    def value(self) -> str:
        """The form's value for it: ``<server id> <uri>``."""
        return f"{self.server_id} {self.uri}"


def agent_resources(agent: Agent) -> list[AttachableResource]:
    """The resources a person may attach in ``agent``'s conversations, by server and URI."""
    servers = (McpServer.objects.filter(team_id=agent.team_id, enabled=True, tools__agents=agent)
               .exclude(resources=[]).distinct().only("pk", "name", "resources").order_by("name"))
    found = []
    for server in servers:
        for item in server.resources if isinstance(server.resources, list) else []:
            if not isinstance(item, dict) or item.get("template") or not item.get("uri"):
                continue
            found.append(AttachableResource(
                server_id=server.pk, server=server.name, uri=str(item["uri"]),
                label=" ".join(str(item.get("title") or item.get("name") or item["uri"]).split())[:80],
                description=" ".join(str(item.get("description") or "").split())[:200],
                mime_type=str(item.get("mime_type") or "")))
    return found


def resource_refs(agent: Agent, values: list[str]) -> list[dict[str, Any]]:
    """The resources a message's form names (``AttachableResource.value``), checked against the
    agent's; ``ValidationError`` for one it may not attach, or too many."""
    wanted = list(dict.fromkeys(v.strip() for v in values if v.strip()))
    if not wanted:
        return []
    if len(wanted) > MAX_ATTACHED:
        raise ValidationError(f"Attach at most {MAX_ATTACHED} resources to one message.")
    offered = {r.value: r for r in agent_resources(agent)}
    refs = []
    for value in wanted:
        resource = offered.get(value)
        if resource is None:
            raise ValidationError("A resource attached to this message is not one of this agent's "
                                  "MCP servers' (any more). Choose again from the list.")
        refs.append({"server": resource.server_id, "uri": resource.uri, "label": resource.label})
    return refs


def resources_read(refs: list[dict[str, Any]], servers: list[McpServer], *,
                   user_id: int | None = None) -> list[str]:
    """The contents of the attached resources, each under a line naming it; ``ToolError``
    when one cannot be read."""
    parts = []
    for ref in refs:
        server = next((s for s in servers if s.pk == ref.get("server")), None)
        if server is None:
            raise ToolError(f"The resource “{ref.get('uri')}” belongs to an MCP server this agent "
                            "no longer uses, so it could not be read.")
        result = async_to_sync(sdk_client().read_resource)(
            endpoint_for(server, user_id=user_id), str(ref.get("uri")), timeout_s=server.timeout_s,
            max_bytes=server.max_result_bytes, kept=False)
        parts.append(f"[Attached resource {ref.get('uri')} from the MCP server “{server.name}”]\n"
                     f"{result.text}")
    return parts


def message_for_model(meta: dict[str, Any], servers: list[McpServer], message: Message, text: str,
                      *, user_id: int | None = None) -> str | None:
    """What the model gets for the turn's ``message`` (typed as ``text``) when it runs an MCP
    prompt or has resources attached (see the module); None when it gets ``text``. Its blocks,
    which later turns' history reads, become that text."""
    call, refs = meta.get(PROMPT_META), meta.get(RESOURCES_META)
    if not call and not refs:
        return None
    # What the server sent is scrubbed of credentials, as a tool's output is; what was typed is not.
    served = [*([prompt_expand(call, servers, user_id=user_id)] if call else []),
              *resources_read(refs or [], servers, user_id=user_id)]
    parts = [*([] if call else [text]), *(bidi_visible(scrub_secrets(p)) for p in served)]
    full = "\n\n".join(p for p in parts if p.strip())
    others = [b for b in message.blocks or [] if isinstance(b, dict) and b.get("type") != "text"]
    message.blocks = [{"type": "text", "text": full}, *others]
    Message.objects.filter(pk=message.pk).update(blocks=message.blocks)
    return full
