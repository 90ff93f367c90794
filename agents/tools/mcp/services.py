"""MCP servers' tools as Tool rows: discover what a server offers, and keep its rows in step.

``mcp_server_refresh`` lists the server's tools and syncs the rows of kind MCP: the name the
model calls is ``<server>_<tool>`` (the tool's own name with anything outside
``[a-zA-Z0-9_-]`` replaced by ``_``), shortened to 64 characters with a hash suffix when it is
longer or taken (by another tool of the team, a built-in's name, or another of the server's
tools that cleans up to the same name) — so a server can never shadow a built-in or another
tool. Names are given in sorted order, so the same list always gives the same names.
Descriptions, schemas and annotations follow the server; tools it no longer offers are deleted
(agents lose them); new ones start enabled with the server's ``default_policy``. A refresh
that fails changes no tool row and stores the error on the server.

``mcp_refresh_if_stale`` is the cheap check a turn makes: a server is refreshed when its list
is older than ``min(ttl_s, the ttl the server advertised)``; after a failure it is not tried
again for ``RETRY_AFTER_FAILURE_S``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from asgiref.sync import async_to_sync
from django.db import transaction
from django.utils import timezone

from agents.models import McpServer, McpSignIn
from agents.models import Tool as ToolRow
from agents.runtime.tools import ToolError
from agentsite.audit import audit_record, snapshot
from agentsite.models import AuditEvent

from ..names import BUILTIN_NAMES
from ..validation import schema_problem
from . import sdk_client
from .credentials import client_store
from .endpoints import endpoint_for
from .types import READ_RESOURCE, Discovery, RemoteTool

NAME_MAX = 64
HASH_LEN = 8
RETRY_AFTER_FAILURE_S = 60
ADVERTISED_TTL_KEY = "tools_ttl_s"  # kept in server_info next to what the server said
EMPTY_SCHEMA = {"type": "object", "properties": {}}


def tool_name(server_name: str, remote_name: str, taken: set[str] = frozenset()) -> str:  # type: ignore[assignment]
    """The model-facing name of ``remote_name`` on ``server_name``, avoiding ``taken``."""
    clean = re.sub(r"[^a-zA-Z0-9_-]", "_", remote_name) or "_"
    name = f"{server_name}_{clean}"
    if len(name) <= NAME_MAX and name not in taken and name not in BUILTIN_NAMES:
        return name
    digest = hashlib.sha256(f"{server_name}\0{remote_name}".encode()).hexdigest()
    for extra in range(0, 64):
        suffix = digest[extra: extra + HASH_LEN]
        candidate = f"{name[: NAME_MAX - HASH_LEN - 1]}_{suffix}"
        if candidate not in taken and candidate not in BUILTIN_NAMES:
            return candidate
    raise ToolError(f"No free name for the tool “{remote_name}” of MCP server “{server_name}”.")


def mcp_server_discover(server: McpServer, *, user_id: int | None = None) -> Discovery:
    """What ``server`` offers now (asked with ``user_id``'s sign-in, when it needs one);
    nothing is saved. ``ToolError`` when it cannot be asked."""
    endpoint = endpoint_for(server, user_id=user_id)
    return async_to_sync(sdk_client().discover)(endpoint, timeout_s=server.timeout_s)


@dataclass
class Refresh:
    ok: bool
    error: str = ""
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    # What was cut to size, one sentence each (shown in the admin with the refresh).
    warnings: list[str] = field(default_factory=list)


# A server's words go to the model with every request of every agent that uses its tools: past
# these sizes they are cut (a 100 KB description is some 25,000 tokens a request).
DESCRIPTION_MAX_CHARS = 2_000
SCHEMA_MAX_CHARS = 16_000
SCHEMA_DESCRIPTION_MAX_CHARS = 300
INSTRUCTIONS_MAX_CHARS = 4_000
CUT_NOTE = " … [cut by agentsite: the server sent {chars:,} characters]"


def _cut(text: str, limit: int) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    return text[:limit] + CUT_NOTE.format(chars=len(text)), True


def _tokens(chars: int) -> str:
    return f"about {max(chars // 4, 1):,} tokens"


def _short_descriptions(value: Any) -> Any:
    """``value`` (a JSON schema) with every ``description`` cut to a few hundred characters."""
    if isinstance(value, dict):
        return {k: (_cut(v, SCHEMA_DESCRIPTION_MAX_CHARS)[0] if k == "description" and isinstance(v, str)
                    else _short_descriptions(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_short_descriptions(v) for v in value]
    return value


def _schema(tool: RemoteTool, warnings: list[str] | None = None) -> dict[str, Any]:
    schema = tool.input_schema or dict(EMPTY_SCHEMA)
    if schema_problem(schema) is not None:
        return dict(EMPTY_SCHEMA)
    size = len(json.dumps(schema, ensure_ascii=False))
    if size <= SCHEMA_MAX_CHARS:
        return schema
    shorter = _short_descriptions(schema)
    kept = len(json.dumps(shorter, ensure_ascii=False))
    if kept <= SCHEMA_MAX_CHARS:
        if warnings is not None:
            warnings.append(f"“{tool.name}”: its parameters' descriptions were cut ({size:,} → "
                            f"{kept:,} characters, {_tokens(size - kept)} a request saved).")
        return shorter
    if warnings is not None:
        warnings.append(f"“{tool.name}”: its parameters' schema is {size:,} characters (over "
                        f"{SCHEMA_MAX_CHARS:,}, {_tokens(size)} a request): the model gets it "
                        "without parameters.")
    return dict(EMPTY_SCHEMA)


def _description(tool: RemoteTool, warnings: list[str]) -> str:
    text = tool.description or tool.title or ""
    cut, was_cut = _cut(text, DESCRIPTION_MAX_CHARS)
    if was_cut:
        warnings.append(f"“{tool.name}”: its description was cut from {len(text):,} to "
                        f"{DESCRIPTION_MAX_CHARS:,} characters ({_tokens(len(text) - len(cut))} "
                        "a request saved).")
    return cut


def mcp_server_refresh(server: McpServer, actor: Any = None, *, user_id: int | None = None) -> Refresh:
    """List ``server``'s tools and sync its Tool rows (see the module docstring); a server that
    needs sign-in is asked with the sign-in of ``user_id`` (by default the ``actor``'s)."""
    before_server = snapshot(server)
    try:
        found = mcp_server_discover(server, user_id=user_id if user_id is not None else getattr(actor, "pk", None))
    except ToolError as exc:
        server.last_error = str(exc)
        server.save(update_fields=["last_error", "updated_at"])
        audit_record(actor=actor, action=AuditEvent.Action.UPDATE, instance=server,
                     before=before_server, after=snapshot(server))
        return Refresh(ok=False, error=str(exc))
    result = Refresh(ok=True)
    with transaction.atomic():
        rows = {r.remote_name: r for r in ToolRow.objects.select_for_update().filter(
            mcp_server=server, kind=ToolRow.Kind.MCP)}
        remote_tools = offered_tools(server, found)
        offered = {t.name for t in remote_tools}
        for remote, row in sorted(rows.items()):
            if remote not in offered:
                audit_record(actor=actor, action=AuditEvent.Action.DELETE, instance=row,
                             before=snapshot(row))
                result.deleted.append(row.name)
                row.delete()
        kept = {r.pk for remote, r in rows.items() if remote in offered}
        taken = set(ToolRow.objects.filter(team_id=server.team_id).exclude(pk__in=kept)
                    .values_list("name", flat=True))
        for remote in remote_tools:
            name = tool_name(server.name, remote.name, taken)
            taken.add(name)
            values = {"name": name, "description": _description(remote, result.warnings),
                      "parameters": _schema(remote, result.warnings),
                      "annotations": remote.annotations,
                      "idempotent": bool(remote.annotations.get("readOnlyHint")),
                      "timeout_s": server.timeout_s,
                      "max_response_bytes": server.max_result_bytes}
            row = rows.get(remote.name)
            if row is None:
                row = ToolRow.objects.create(team_id=server.team_id, kind=ToolRow.Kind.MCP,
                                             mcp_server=server, remote_name=remote.name,
                                             enabled=True, policy=server.default_policy,
                                             **values)
                audit_record(actor=actor, action=AuditEvent.Action.CREATE, instance=row,
                             after=snapshot(row))
                result.created.append(name)
                continue
            before = snapshot(row)
            if all(getattr(row, k) == v for k, v in values.items()):
                continue
            for key, value in values.items():
                setattr(row, key, value)
            row.save()
            audit_record(actor=actor, action=AuditEvent.Action.UPDATE, instance=row,
                         before=before, after=snapshot(row))
            result.updated.append(name)
        info = dict(found.server_info)
        if found.ttl_s:
            info[ADVERTISED_TTL_KEY] = found.ttl_s
        server.protocol_version = found.protocol_version
        server.server_info = info
        server.instructions, cut = _cut(found.instructions or "", INSTRUCTIONS_MAX_CHARS)
        if cut:
            result.warnings.append(f"The server's instructions were cut from "
                                   f"{len(found.instructions):,} to {INSTRUCTIONS_MAX_CHARS:,} "
                                   "characters.")
        server.prompts = [dataclasses.asdict(prompt) for prompt in found.prompts]
        server.resources = [dataclasses.asdict(resource) for resource in found.resources]
        server.last_refreshed_at = timezone.now()
        server.last_error = ""
        server.save(update_fields=["protocol_version", "server_info", "instructions", "prompts",
                                   "resources", "last_refreshed_at", "last_error", "updated_at"])
        audit_record(actor=actor, action=AuditEvent.Action.UPDATE, instance=server,
                     before=before_server, after=snapshot(server))
    return result


def mcp_server_ttl(server: McpServer) -> float:
    advertised = (server.server_info or {}).get(ADVERTISED_TTL_KEY)
    if isinstance(advertised, int | float) and advertised > 0:
        return min(float(server.ttl_s), float(advertised))
    return float(server.ttl_s)


def mcp_server_is_stale(server: McpServer, *, now: Any = None) -> bool:
    now = now or timezone.now()
    if server.last_error and server.updated_at and \
            now < server.updated_at + timedelta(seconds=RETRY_AFTER_FAILURE_S):
        return False
    if server.last_refreshed_at is None:
        return True
    return now >= server.last_refreshed_at + timedelta(seconds=mcp_server_ttl(server))


def mcp_refresh_if_stale(servers: Iterable[McpServer], *, actor: Any = None,
                         user_id: int | None = None) -> list[Refresh]:
    """Refresh the enabled servers whose tool list is out of date (with ``user_id``'s sign-in
    where one is needed); the others cost nothing."""
    return [mcp_server_refresh(s, actor=actor, user_id=user_id) for s in servers
            if s.enabled and mcp_server_is_stale(s)]


def mcp_server_disable(server: McpServer, *, actor: Any = None) -> None:
    before = snapshot(server)
    server.enabled = False
    server.save(update_fields=["enabled", "updated_at"])
    audit_record(actor=actor, action=AuditEvent.Action.UPDATE, instance=server, before=before,
                 after=snapshot(server))


def mcp_server_save(*, server: McpServer, headers: list[tuple[str, str]] | None = None,
                    clear_headers: bool = False, oauth_client: Any = None,
                    forget_oauth_client: bool = False) -> McpServer:
    """Save ``server``; ``headers`` replace the stored ones (encrypted), None keeps them;
    ``oauth_client`` (the SDK's ``OAuthClientInformationFull``) replaces its OAuth client.
    When its URL or kind of sign-in changes, its sign-ins are forgotten (a token is never sent
    to another server than the one it was got for) with the client this site registered."""
    before = McpServer.objects.filter(pk=server.pk).values("url", "sign_in").first() if server.pk else None
    moved = before is not None and (before["url"] != server.url or before["sign_in"] != server.sign_in)
    if moved or forget_oauth_client:
        client_store(server, None)
    if oauth_client is not None:
        client_store(server, oauth_client)
    if moved or not server.sign_in:
        McpSignIn.objects.filter(server_id=server.pk).delete()
    if clear_headers:
        server.set_headers({})
    elif headers:
        server.set_headers(dict(headers))
    if server.transport == McpServer.Transport.STDIO:
        server.url = ""
        server.headers_encrypted = ""
    else:
        server.operator_key = ""
    server.save()
    return server


def with_server_instructions(system_prompt: str, servers: Iterable[McpServer]) -> str:
    """``system_prompt`` followed by the instructions of the ``servers`` whose admin ticked
    ``use_instructions`` (those that gave any), each under a heading naming its server, in the
    servers' name order: the same text turn after turn, so the prompt stays cache-friendly."""
    parts = [f"## Instructions from the MCP server “{server.name}”\n{server.instructions.strip()}"
             for server in sorted(servers, key=lambda s: s.name)
             if server.use_instructions and server.instructions.strip()]
    return "\n\n".join([p for p in (system_prompt.rstrip(), *parts) if p]) if parts else system_prompt


def offered_tools(server: McpServer, found: Discovery) -> list[RemoteTool]:
    """The server's tools, and when it lists resources, one more that reads them
    (``READ_RESOURCE``, "<server>_resources_read"), under the server's policy like the rest."""
    if not found.resources:
        return list(found.tools)
    lines = [f"Reads a resource of the MCP server “{server.name}” by its URI and returns its "
             "contents (text; binary contents are only named). Its resources:"]
    for resource in found.resources:
        about = " — ".join(p for p in (resource.title or resource.name, resource.description) if p)
        kind = " (a template: fill in the {placeholders})" if resource.template else ""
        mime = f" [{resource.mime_type}]" if resource.mime_type else ""
        lines.append(f"- {resource.uri}{kind}: {about}{mime}")
    schema = {"type": "object", "required": ["uri"], "properties": {"uri": {
        "type": "string", "description": "The URI of one of the resources listed, or made from a template."}}}
    return [*found.tools, RemoteTool(name=READ_RESOURCE, title="Read a resource",
                                     description="\n".join(lines), input_schema=schema,
                                     annotations={"readOnlyHint": True})]
