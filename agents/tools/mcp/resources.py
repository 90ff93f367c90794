"""MCP resources a person attaches to a message, and what the model gets of a chat message.

The chat's resource menu (beside "+") lists the resources of the enabled servers whose tools
the conversation's agent uses (``agent_resources``, from their last discovery), and their
resource templates (RFC 6570: ``notes://{name}``), each a box to type the URI into, begun with
the template's fixed start. The chosen ones go with the message (``resource_refs`` checks that
each is one of those, or fits one of the templates); the turn's worker reads
them (``resources/read``, through the SDK) and the model gets their contents after the
message's text, each under a line naming it, scrubbed of credentials as a tool's output is. The message shows what was typed and the names
of what was attached; its blocks, which later turns' history reads, hold what the model got.

``message_for_model`` is what the worker asks: the text the model gets for a message that runs
an MCP prompt (``prompts``) or has resources attached, or None when it is the message as typed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync
from django.core.exceptions import ValidationError

from agents.models import Agent, McpServer, Message
from agents.runtime.patterns import PatternError, compile_pattern
from agents.runtime.sanitize import bidi_visible
from agents.runtime.scrub import scrub_secrets
from agents.runtime.tools import ToolError

from . import sdk_client
from .endpoints import endpoint_for
from .prompts import PROMPT_META, prompt_expand

RESOURCES_META = "mcp_resources"  # in a turn's ``Trace.meta``: [{"server", "uri", "label"}]
MAX_ATTACHED = 5
MAX_URI_CHARS = 2000
# What each RFC 6570 expression of a template may stand for (by its operator), for checking a
# URI typed from a template: one segment for a simple {name}, anything without spaces for
# {+path} and {#part}, path segments, labels, parameters and a query for the others.
EXPANSIONS = {"": r"[^/?#\s]*", "+": r"\S*", "#": r"(?:#\S*)?", "/": r"(?:/[^/?#\s]*)*",
              ".": r"(?:\.[^/?#\s]*)*", ";": r"(?:;[^/?#\s]*)*", "?": r"(?:\?[^#\s]*)?",
              "&": r"(?:&[^#\s]*)*"}
EXPRESSION = re.compile(r"\{([+#./;?&]?)[A-Za-z0-9_.%,*:]+\}")


def template_pattern(template: str) -> Any:
    """The URIs ``template`` (RFC 6570, the server's) can expand to, as a regular expression
    compiled with RE2 (matching stays linear whatever the template); None when it cannot be."""
    parts, last = [], 0
    for match in EXPRESSION.finditer(template):
        parts += [re.escape(template[last:match.start()]), EXPANSIONS[match.group(1)]]
        last = match.end()
    try:
        return compile_pattern("".join([*parts, re.escape(template[last:])]))
    except PatternError:
        return None


@dataclass(frozen=True)
class AttachableResource:
    server_id: int
    server: str
    uri: str  # a template's: its RFC 6570 template
    label: str
    description: str
    mime_type: str
    template: bool = False

    @property
    def value(self) -> str:
        """The form's value for it: ``<server id> <uri>``."""
        return f"{self.server_id} {self.uri}"

    @property
    def prefix(self) -> str:
        """A template's fixed start (what its box begins with)."""
        return self.uri.split("{", 1)[0]

    def fits(self, uri: str) -> bool:
        pattern = template_pattern(self.uri) if self.template else None
        return pattern is not None and pattern.fullmatch(uri) is not None


def agent_resources(agent: Agent) -> list[AttachableResource]:
    """The resources a person may attach in ``agent``'s conversations, by server and URI."""
    servers = (McpServer.objects.filter(team_id=agent.team_id, enabled=True, tools__agents=agent)
               .exclude(resources=[]).distinct().only("pk", "name", "resources").order_by("name"))
    found = []
    for server in servers:
        for item in server.resources if isinstance(server.resources, list) else []:
            if not isinstance(item, dict) or not item.get("uri"):
                continue
            found.append(AttachableResource(
                server_id=server.pk, server=server.name, uri=str(item["uri"]),
                label=" ".join(str(item.get("title") or item.get("name") or item["uri"]).split())[:80],
                description=" ".join(str(item.get("description") or "").split())[:200],
                mime_type=str(item.get("mime_type") or ""), template=bool(item.get("template"))))
    return sorted(found, key=lambda r: r.template)  # the resources, then the templates


def resource_refs(agent: Agent, values: list[str],
                  typed: Iterable[tuple[str, str]] = ()) -> list[dict[str, Any]]:
    """The resources a message's form names (``AttachableResource.value``; ``typed``: pairs of
    a server id and a URI typed from one of its templates, as a form sent without the page's
    script has them), checked against the agent's; ``ValidationError`` for one it may not
    attach, or too many. A template's box left at its fixed start attaches nothing."""
    offered = agent_resources(agent) if values or typed else []
    untouched = {r.value.split("{", 1)[0] for r in offered if r.template}
    wanted = [v for v in dict.fromkeys(
        [*(v.strip() for v in values), *(f"{s.strip()} {u.strip()}" for s, u in typed if u.strip())])
        if v and v.split(" ", 1)[-1] and v not in untouched]
    if not wanted:
        return []
    if len(wanted) > MAX_ATTACHED:
        raise ValidationError(f"Attach at most {MAX_ATTACHED} resources to one message.")
    listed = {r.value: r for r in offered if not r.template}
    refs = []
    for value in wanted:
        resource = listed.get(value)
        if resource is not None:
            refs.append({"server": resource.server_id, "uri": resource.uri, "label": resource.label})
            continue
        server, _, uri = value.partition(" ")
        template = next((r for r in offered if str(r.server_id) == server and len(uri) <= MAX_URI_CHARS
                         and r.fits(uri)), None)
        if template is None:
            raise ValidationError("A resource attached to this message is not one of this agent's "
                                  "MCP servers' (any more), nor fits one of their templates. "
                                  "Choose again from the list.")
        refs.append({"server": template.server_id, "uri": uri, "label": uri[:80]})
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
