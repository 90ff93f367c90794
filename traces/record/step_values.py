"""What each event of a turn writes on its step: the step's columns, its meta and its payloads,
made from the event (and from the little the recorder knows beside it: who decided, what the
request cost, how long the call waited for approval). Which step an event lands on, and the
write itself, are the recorder's (``recorder``); the pages and the exporter read what is here.

Payloads are stored as text, scrubbed of credentials and cut to ``PAYLOAD_MAX_CHARS``
(``payload_json``, ``payload_text``)."""

from __future__ import annotations

import json
import math
from typing import Any

from agents.runtime.events import (
    ApprovalDecided,
    ApprovalRequested,
    Compacted,
    HookRan,
    LlmRequestFinished,
    LlmRequestStarted,
    LlmStreamRestarted,
    Retry,
    ToolFinished,
    ToolPolicyDecided,
    ToolStarted,
    TurnError,
)
from agents.runtime.providers.base import Outcome
from agents.runtime.scrub import scrub_secrets

from ..models import Step

# Payloads above this many characters are stored as a JSON note with their beginning.
PAYLOAD_MAX_CHARS = 2_000_000
JSON = "application/json"
TEXT = "text/plain"
APPROVAL_ERRORS = {
    "denied": "Denied by user.",
    "timeout": "Nobody decided in time, so the call was denied.",
    "cancelled": "The turn was stopped while this call waited for approval.",
}
Kind, StepStatus = Step.Kind, Step.Status
Values = dict[str, Any]
Payloads = dict[str, tuple[str, str]]  # kind -> (content, content type)
Written = tuple[Values, Payloads | None]


def payload_json(data: Any) -> tuple[str, str]:
    """``data`` as scrubbed JSON for a ``StepPayload``."""
    text = scrub_secrets(json.dumps(data, ensure_ascii=False, default=str))
    if len(text) > PAYLOAD_MAX_CHARS:
        text = json.dumps({"truncated": True, "chars": len(text), "head": text[:PAYLOAD_MAX_CHARS]},
                          ensure_ascii=False)
    return text, JSON


def payload_text(text: str) -> tuple[str, str]:
    text = scrub_secrets(text or "")
    if len(text) > PAYLOAD_MAX_CHARS:
        text = text[:PAYLOAD_MAX_CHARS] + f"\n… ({len(text) - PAYLOAD_MAX_CHARS} more characters)"
    return text, TEXT


def _ms(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(float(value), 3)


# -- model requests -------------------------------------------------------------------------------
def llm_started(event: LlmRequestStarted) -> Written:
    return {
        "kind": Kind.LLM_REQUEST, "name": event.model[:200], "iteration": event.iteration,
        "status": StepStatus.RUNNING, "success": None, "provider": event.provider[:100],
        "model": event.model[:200],
        "meta": {"tools_available": list(event.tools_available),
                 "messages_count": event.messages_count,
                 "estimated_input_tokens": event.estimated_input_tokens,
                 **({"cache_min_tokens": event.cache_min_tokens}
                    if event.cache_min_tokens is not None else {})},
    }, {"request": payload_json(event.request)}


def llm_finished(event: LlmRequestFinished, *, provider: str, price: Values,
                 outcome: Outcome | None) -> Written:
    """A finished request: ``provider`` answered it (a failover may have moved it); ``price``:
    the columns and meta that record its cost (``recorder.price_fields``); ``outcome``: how a
    successful answer ended (complete, tool_use, length, refusal, filtered), so that a cut-off
    or refused answer does not read as a whole one."""
    recorded = dict(price)
    meta: dict[str, Any] = {
        "first_token_ms": _ms(event.first_token_ms),
        "first_chunk_ms": _ms(event.first_chunk_ms),
        "stop_reason": event.stop_reason,
        "tool_calls": [str(c.get("name", "")) for c in event.tool_calls],
        **recorded.pop("meta"),
    }
    if event.usage_estimated:
        meta["usage_estimated"] = True
    if outcome is not None:
        meta["outcome"] = str(outcome)
    return {
        "kind": Kind.LLM_REQUEST, "iteration": event.iteration, "model": event.model[:200],
        "provider": provider[:100],
        "status": StepStatus.OK if event.success else StepStatus.ERROR,
        "success": event.success, "duration_ms": _ms(event.latency_ms),
        "error": scrub_secrets(event.error or ""), "meta": meta, **recorded,
        **event.usage.to_dict(),
    }, {"response": payload_json(event.response)} if event.response else None


def restarted(event: LlmStreamRestarted, *, restarted_step: int) -> Written:
    """A streamed answer that broke off and starts over: a retry step holding what had been
    streamed of request ``restarted_step``."""
    return {
        "kind": Kind.RETRY, "name": f"{event.provider} · {event.model}"[:200],
        "status": StepStatus.ERROR, "success": False, "provider": event.provider[:100],
        "model": event.model[:200], "error": scrub_secrets(event.reason),
        "iteration": event.iteration,
        "meta": {"restart": True, "restarted_step": restarted_step, "failover": (
                     (event.next_provider, event.next_model) != (event.provider, event.model)),
                 "next_provider": event.next_provider, "next_model": event.next_model,
                 "partial_chars": len(event.partial_text)},
    }, {"output": payload_text(event.partial_text)}


def retry(event: Retry, *, iteration: int) -> Written:
    return {
        "kind": Kind.RETRY, "name": f"{event.provider} · {event.model}"[:200],
        "status": StepStatus.ERROR, "success": False, "provider": event.provider[:100],
        "model": event.model[:200], "error": scrub_secrets(event.error),
        "iteration": iteration,
        "meta": {"attempt": event.attempt, "backoff_ms": event.backoff_ms,
                 "failover": event.failover, "next_provider": event.next_provider,
                 "next_model": event.next_model, **({"skipped": True} if event.skipped else {})},
    }, None


# -- tools, approvals and hooks -------------------------------------------------------------------
def tool_started(event: ToolStarted) -> Written:
    return {
        "kind": Kind.TOOL_CALL, "name": event.name[:200], "iteration": event.iteration,
        "status": StepStatus.RUNNING, "success": None, "call_id": event.call_id[:200],
    }, {"arguments": payload_json(event.arguments)}


def tool_finished(event: ToolFinished, *, with_arguments: bool,
                  permission: dict[str, Any] | None, approval_wait_ms: float | None) -> Written:
    """A call's result. ``with_arguments``: its start was not recorded, so its arguments go
    with it; ``permission``: an allowed call's policy outcome (``tool_permission``), kept for
    this write; ``approval_wait_ms``: the wait for approval (its own step), which the call's
    start and duration leave out (``approval_waited_ms``; a step recorded before kept its
    start before the wait and said so as ``approval_wait_ms``, ``ran_from``)."""
    payloads = {"output": payload_text(event.output)}
    if with_arguments:
        payloads["arguments"] = payload_json(event.arguments)
    meta: dict[str, Any] = {"output_preview": scrub_secrets(event.output_preview),
                            "output_chars": len(event.output), **event.meta}
    if permission is not None:
        meta["permission"] = permission
    if approval_wait_ms:
        meta["approval_waited_ms"] = approval_wait_ms
    return {
        "kind": Kind.TOOL_CALL, "name": event.name[:200], "iteration": event.iteration,
        "call_id": event.call_id[:200],
        "status": StepStatus.OK if event.success else StepStatus.ERROR,
        "success": event.success, "duration_ms": _ms(event.duration_ms),
        "error": scrub_secrets(event.error or ""),
        "meta": meta,
    }, payloads


def tool_permission(event: ToolPolicyDecided) -> dict[str, Any]:
    """The permission outcome of a call (Claw Code's), as its step's meta keeps it."""
    policy = {"policy": event.policy, "outcome": event.outcome, "source": event.source}
    if event.reason:
        policy["reason"] = scrub_secrets(event.reason)[:1000]
    return policy


def tool_permission_decided(event: ToolPolicyDecided) -> Written:
    """A call that asks or is denied shows why at once, on the call's own step."""
    return {
        "kind": Kind.TOOL_CALL, "name": event.name[:200], "iteration": event.iteration,
        "call_id": event.call_id[:200], "meta": {"permission": tool_permission(event)}}, None


def _approval_error(reason: str) -> str:
    """What the approval step says when the call may not run: a person's decline reads as their
    decision ("Declined by a team admin."), not as a failure."""
    if reason.lower().startswith("declined by "):
        return reason[:1].upper() + reason[1:] + "."
    return APPROVAL_ERRORS.get(reason, reason)


def approval_requested(event: ApprovalRequested) -> Written:
    return {
        "kind": Kind.APPROVAL, "name": event.name, "iteration": event.iteration,
        "status": StepStatus.WAITING, "success": None, "call_id": event.call_id[:200],
        "meta": {"timeout_s": event.timeout_s},
    }, {"arguments": payload_json(event.arguments)}


def approval_decided(event: ApprovalDecided, *, decided_by: str | None) -> Written:
    meta: dict[str, Any] = {"reason": event.reason}
    if decided_by:
        meta["decided_by"] = decided_by
    return {
        "kind": Kind.APPROVAL, "name": event.name, "iteration": event.iteration,
        "call_id": event.call_id[:200],
        "status": StepStatus.OK if event.approved else StepStatus.ERROR,
        "success": event.approved, "duration_ms": _ms(event.waited_ms),
        "error": "" if event.approved else _approval_error(event.reason),
        "meta": meta,
    }, None


def hook_ran(event: HookRan) -> Written:
    """A hook's run: which hook, on what, its decision and what it said."""
    ok = event.decision in ("allow", "warn", "rewrite")
    messages = [scrub_secrets(m)[:2000] for m in event.messages[:10]]
    meta: dict[str, Any] = {"event": event.event, "hook_kind": event.hook_kind,
                            "decision": event.decision, "tool": event.tool[:200]}
    if event.detail:
        meta["detail"] = event.detail[:200]
    return {
        "kind": Kind.HOOK, "name": event.hook[:200], "iteration": event.iteration,
        "status": StepStatus.OK if ok else StepStatus.ERROR, "success": ok,
        "call_id": event.call_id[:200], "duration_ms": _ms(event.duration_ms),
        "error": "" if ok else "\n".join(messages)[:2000],
        "meta": meta,
    }, {"output": payload_json({"decision": event.decision, "messages": messages})}


# -- the turn -------------------------------------------------------------------------------------
def compacted(event: Compacted, *, iteration: int) -> Written:
    return {
        "kind": Kind.COMPACTION, "name": event.reason, "status": StepStatus.OK,
        "success": True, "iteration": iteration,
        "meta": {"reason": event.reason,
                 "removed_message_count": event.removed_message_count},
    }, {"output": payload_text(event.summary)} if event.summary else None


def turn_error(event: TurnError, *, name: str) -> Written:
    return {
        "kind": Kind.ERROR, "name": name[:200], "iteration": event.iteration,
        "status": StepStatus.ERROR, "success": False,
        "error": scrub_secrets(event.message), "meta": {"error_kind": event.error_kind},
    }, {"output": payload_text(event.details)} if event.details else None


def resumed(*, name: str, iteration: int, meta: dict[str, Any]) -> Written:
    """The step that says an attempt continues the turn from its record."""
    return {
        "kind": Kind.RESUME, "name": name[:200], "iteration": iteration,
        "status": StepStatus.OK, "success": True, "meta": meta,
    }, None
