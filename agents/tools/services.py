"""Actions on a team's tools: keep the built-in rows in step with the code, save an HTTP tool
(its headers encrypted), switch tools on and off, and try a tool from the admin.

``tool_try`` runs the tool through ``agents.runtime.loop.run_turn`` itself, with a scripted
one-call model, so a try passes through exactly what a turn does: the argument checks, the
SSRF guard and the tool's limits, the loop's time limit, credential scrubbing and output
truncation. An admin pressing "Run" is the approval for tools that require one.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync
from django.db import transaction

from agents.models import Agent, ToolPolicy
from agents.models import Tool as ToolRow
from agents.runtime.events import RecordingObserver, ToolFinished
from agents.runtime.loop import CompactionSettings, TurnConfig, run_turn
from agents.runtime.messages import Message, Role, TextBlock, ToolUseBlock
from agents.runtime.providers.base import Capabilities, ChatRequest, ChatResponse, Provider
from agents.runtime.tools import Tool
from agentsite.audit import audit_record, snapshot
from agentsite.models import AuditEvent, Team

from .context import ToolContext
from .http import headers_decrypt, headers_encrypt
from .mcp import mcp_connections_close
from .registry import BUILTINS, ToolUnavailable, runtime_tool_for_row

TRY_CALL_ID = "call_try_1"
TRY_EXTRA_TIMEOUT_S = 5.0


# -- built-in rows --------------------------------------------------------------------------------
def tools_sync_builtins_for_teams(team_ids: Iterable[int]) -> int:
    """Create the missing built-in Tool rows of these teams and refresh the description and
    schema of existing ones from the code, keeping each team's enabled and approval choices.
    A constant number of queries whatever the number of teams. Returns the rows created."""
    team_ids = sorted(set(team_ids))
    if not team_ids:
        return 0
    existing = {(r.team_id, r.name): r for r in ToolRow.objects.filter(
        team_id__in=team_ids, name__in=list(BUILTINS)).only(
        "id", "team_id", "name", "kind", "description", "parameters")}
    missing: list[ToolRow] = []
    stale: list[ToolRow] = []
    for team_id in team_ids:
        for builtin in BUILTINS.values():
            row = existing.get((team_id, builtin.name))
            if row is None:
                missing.append(ToolRow(team_id=team_id, name=builtin.name,
                                       kind=ToolRow.Kind.BUILTIN,
                                       description=builtin.description,
                                       parameters=builtin.parameters,
                                       policy=(ToolPolicy.ASK if builtin.approval_by_default
                                               else ToolPolicy.ALLOW)))
            elif row.kind == ToolRow.Kind.BUILTIN and (
                    row.description != builtin.description or row.parameters != builtin.parameters):
                row.description, row.parameters = builtin.description, builtin.parameters
                stale.append(row)
    with transaction.atomic():
        if missing:
            ToolRow.objects.bulk_create(missing, ignore_conflicts=True)
        if stale:
            ToolRow.objects.bulk_update(stale, ["description", "parameters"])
    return len(missing)


def tools_sync_builtins(team: Team) -> int:
    """``team``'s built-in Tool rows, created or refreshed from the code (see above)."""
    return tools_sync_builtins_for_teams([team.pk])


# -- saving and switching -------------------------------------------------------------------------
def tool_save(*, tool: ToolRow, headers: list[tuple[str, str]] | None = None,
              clear_headers: bool = False) -> ToolRow:
    """Save ``tool``. ``headers`` replaces the stored headers (encrypted); None keeps them;
    ``clear_headers`` removes them."""
    if clear_headers:
        tool.headers_encrypted = ""
    elif headers:
        tool.headers_encrypted = headers_encrypt(headers)
    tool.save()
    return tool


def tool_header_names(tool: ToolRow) -> list[str] | None:
    """The names of the stored headers (never the values); None when they cannot be read."""
    try:
        return [name for name, _ in headers_decrypt(tool.headers_encrypted)]
    except Exception:  # noqa: BLE001 - unreadable secrets are reported, not raised, on a page
        return None


def tools_set_flags(*, tools: Iterable[ToolRow], actor: Any, enabled: bool | None = None,
                    policy: str | None = None) -> int:
    """Switch tools on or off, or set their policy (allow / ask / deny); each change is audited.
    Returns how many tools changed."""
    changed = 0
    with transaction.atomic():
        for tool in tools:
            before = snapshot(tool)
            if enabled is not None:
                tool.enabled = enabled
            if policy is not None:
                tool.policy = policy
            after = snapshot(tool)
            if after == before:
                continue
            tool.save(update_fields=["enabled", "policy", "updated_at"])
            audit_record(actor=actor, action=AuditEvent.Action.UPDATE, instance=tool,
                         before=before, after=snapshot(tool))
            changed += 1
    return changed


# -- trying a tool --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TryResult:
    success: bool
    output: str
    error: str | None
    duration_ms: float


def sample_arguments(schema: Any) -> dict[str, Any]:
    """Arguments to start from: each property's default, first example or enum value, else an
    empty value of its type."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return {}
    empty = {"string": "", "integer": 0, "number": 0, "boolean": False, "array": [], "object": {}}
    sample: dict[str, Any] = {}
    for name, spec in properties.items():
        spec = spec if isinstance(spec, dict) else {}
        if "default" in spec:
            sample[name] = spec["default"]
        elif isinstance(spec.get("examples"), list) and spec["examples"]:
            sample[name] = spec["examples"][0]
        elif isinstance(spec.get("enum"), list) and spec["enum"]:
            sample[name] = spec["enum"][0]
        else:
            kind = spec.get("type")
            sample[name] = empty.get(kind if isinstance(kind, str) else "string", "")
    return sample


class OneCallProvider(Provider):
    """A scripted model: calls one tool with the given arguments, then ends the turn."""

    kind = "try-it"
    default_capabilities = Capabilities(native_tool_calling=True)

    def __init__(self, tool_name: str, arguments: dict[str, Any]) -> None:
        super().__init__(name="try-it")
        self.tool_name = tool_name
        self.arguments = arguments

    async def chat(self, request: ChatRequest) -> ChatResponse:
        called = any(m.role is Role.TOOL or m.tool_results_blocks for m in request.messages)
        if called:
            return ChatResponse(Message(Role.ASSISTANT, [TextBlock("Done.")]), model="try-it",
                                provider=self.name, stop_reason="end_turn")
        call = ToolUseBlock(id=TRY_CALL_ID, name=self.tool_name, input=self.arguments)
        return ChatResponse(Message(Role.ASSISTANT, [call]), model="try-it", provider=self.name,
                            stop_reason="tool_use")


class _Approve:
    async def request(self, call: Any) -> bool:
        return True


async def tool_run_once(tool: Tool, arguments: dict[str, Any], *, timeout_s: float) -> TryResult:
    """Run ``tool`` once with ``arguments`` inside a real turn loop; what the loop recorded."""
    observer = RecordingObserver()
    config = TurnConfig(model="try-it", dispatcher="native", stream=False, trajectory_states=False,
                        loop_detection=False, compaction=CompactionSettings(enabled=False),
                        tool_timeout_s=timeout_s, step_timeout_s=timeout_s + TRY_EXTRA_TIMEOUT_S)
    started = time.perf_counter()
    await run_turn(provider=OneCallProvider(tool.name, arguments), config=config, history=[],
                   user_message="Try the tool.", tools=[tool], observer=observer,
                   approver=_Approve())
    finished = observer.of(ToolFinished)
    if not finished:
        return TryResult(False, "", "The tool did not run.", (time.perf_counter() - started) * 1000)
    event = finished[0]
    return TryResult(event.success, event.output, event.error, event.duration_ms)


def tool_try(*, tool: ToolRow, arguments: dict[str, Any], user: Any,
             agent: Agent | None = None, timezone: str = "UTC") -> TryResult:
    """Run a Tool row once for an admin, as a turn of ``agent`` (memory tools need one) by
    ``user`` would. Nothing is recorded in a trace."""
    context = ToolContext(team_id=tool.team_id, agent_id=agent.pk if agent else None,
                          user_id=getattr(user, "pk", None), timezone=timezone,
                          memory_recall_limit=agent.memory_recall_limit if agent else 5,
                          memory_min_relevance=agent.memory_min_relevance if agent else 0.0)
    try:
        runtime_tool = runtime_tool_for_row(tool, context)
    except ToolUnavailable as exc:
        return TryResult(False, "", str(exc), 0.0)
    timeout = float(tool.timeout_s) + TRY_EXTRA_TIMEOUT_S
    return async_to_sync(_run_once_and_close)(runtime_tool, arguments, timeout_s=timeout)


async def _run_once_and_close(tool: Tool, arguments: dict[str, Any], *,
                              timeout_s: float) -> TryResult:
    """``tool_run_once`` in the loop ``tool_try`` makes for it, closing the MCP connection the
    call kept (a stdio server's process ends) before the loop ends."""
    try:
        return await tool_run_once(tool, arguments, timeout_s=timeout_s)
    finally:
        await mcp_connections_close()
