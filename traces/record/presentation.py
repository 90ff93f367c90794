"""What the inspector shows beside the stored rows: timeline bar geometry and state diffs."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from django.db.models import F, Max
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from ..models import Step, Trace, TrajectoryState

LIST_FIELDS = ("evidence", "uncertainties", "failures")
TEXT_FIELDS = ("objective", "next_plan")


def timeline_scale(trace: Trace) -> float:
    """Milliseconds that the full width of the timeline stands for."""
    if trace.duration_ms:
        return float(trace.duration_ms)
    end = trace.steps.aggregate(end=Max(F("offset_ms") + F("duration_ms")))["end"] if trace.step_count else None
    return float(end or 1.0)


FLAGGED_OUTCOMES = ("length", "refusal", "filtered")


def decorate_steps(steps: Iterable[Step], *, scale: float) -> None:
    """Bar position and width in percent of the timeline (a visible minimum for instant steps)."""
    scale = max(scale, 1.0)
    for step in steps:
        meta = step.meta or {}
        offset = ran_from(step)
        step.run_offset_ms = int(offset)
        start = min(offset / scale * 100, 100.0)
        width = ((step.duration_ms or 0.0) / scale) * 100
        step.bar_x = round(start, 3)
        step.bar_w = round(max(min(width, 100.0 - start), 0.4), 3)
        step.tools_available = meta.get("tools_available") or []
        called = meta.get("tool_calls") or []
        step.tools_called = [c.get("name", "") if isinstance(c, dict) else str(c) for c in called]
        step.decision_url = _decision_url(step)
        # What the row flags, read from ``meta`` once here: the template's lookup of a key a
        # step's meta does not have costs three exceptions and a dir() each, nine times a row.
        outcome = meta.get("outcome")
        step.flagged_outcome = outcome if outcome in FLAGGED_OUTCOMES else ""
        step.usage_estimated = bool(meta.get("usage_estimated"))
        step.unpriced = bool(meta.get("unpriced"))


def _decision_url(step: Step) -> str:
    """Where a person approves or denies the call this approval step waits for ("" when it is
    not waiting, or its id cannot travel in a URL: then the chat decides)."""
    if step.kind != Step.Kind.APPROVAL or step.status != Step.Status.WAITING or not step.call_id:
        return ""
    try:
        return reverse("approval_decision", args=[step.trace.uuid, step.call_id])
    except NoReverseMatch:
        return ""


def state_diff(state: TrajectoryState, previous: TrajectoryState | None) -> dict[str, Any]:
    """Per field: what was added and removed since the previous iteration's state."""
    now = state.fields or {}
    before = (previous.fields if previous else {}) or {}
    diff: dict[str, Any] = {}
    for name in LIST_FIELDS:
        current, earlier = list(now.get(name) or []), list(before.get(name) or [])
        diff[name] = {
            "added": [x for x in current if x not in earlier],
            "removed": [x for x in earlier if x not in current],
            "kept": [x for x in current if x in earlier],
        }
    for name in TEXT_FIELDS:
        diff[name] = {"value": now.get(name) or "", "previous": before.get(name) or "",
                      "changed": previous is not None and (now.get(name) or "") != (before.get(name) or "")}
    diff["tool_calls"] = list(now.get("tool_calls") or [])
    return diff


_UNREAD: Any = object()


def decorate_states(states: list[TrajectoryState], *, trace: Trace | None = None,
                    previous: TrajectoryState | None = _UNREAD) -> list[TrajectoryState]:
    """Attach ``state.diff``. When only later states are given (a live update), the one before
    the first is loaded so its diff is right, unless the caller read it (``previous``, None:
    there is none)."""
    if previous is _UNREAD:
        previous = None
        if states and trace is not None and states[0].iteration > 1:
            previous = (trace.trajectory_states.filter(iteration__lt=states[0].iteration)
                        .order_by("-iteration").first())
    for state in states:
        state.diff = state_diff(state, previous)
        previous = state
    return states


# -- payloads as a conversation ------------------------------------------------------------------
READABLE_TEXT_CHARS = 20_000


def readable_payload(kind: str, data: Any) -> dict[str, Any] | None:
    """A model request or response as people read it: the system prompt, the messages (text,
    tool calls with their arguments, tool results), the tools offered. None when the payload is
    not one (the raw JSON is shown instead)."""
    if not isinstance(data, dict):
        return None
    if kind == "request" and isinstance(data.get("messages"), list):
        system = [str(b.get("text", "")) for b in data.get("system") or [] if isinstance(b, dict)]
        specs = [{"name": str(s.get("name", "")), "description": str(s.get("description", "")),
                  "parameters": _json(s.get("parameters") or s.get("input_schema") or {})}
                 for s in data.get("tool_specs") or [] if isinstance(s, dict)]
        return {"system": "\n\n".join(t for t in system if t)[:READABLE_TEXT_CHARS],
                "messages": [_readable_message(m) for m in data["messages"] if isinstance(m, dict)],
                "offset": int(data.get("message_offset") or 0),
                "tools": [str(t) for t in data.get("tools") or []], "tool_specs": specs}
    if kind == "message" and isinstance(data.get("blocks"), list):
        return {"messages": [_readable_message(data)]}
    if kind == "response" and isinstance(data.get("message"), dict):
        return {"messages": [_readable_message(data["message"])],
                "stop_reason": str(data.get("stop_reason") or "")}
    return None


def _readable_message(message: dict[str, Any]) -> dict[str, Any]:
    parts = []
    for block in message.get("blocks") or message.get("content") or []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append({"kind": "text", "text": str(block.get("text", ""))[:READABLE_TEXT_CHARS]})
        elif kind == "thinking":
            parts.append({"kind": "thinking", "text": str(block.get("thinking", ""))[:READABLE_TEXT_CHARS]})
        elif kind == "tool_use":
            parts.append({"kind": "tool_use", "name": str(block.get("name", "")),
                          "id": str(block.get("id", "")), "text": _json(block.get("input", {}))})
        elif kind == "image":
            parts.append({"kind": "image", "media_type": str(block.get("media_type", "")),
                          "attachment": str(block.get("attachment", ""))})
        elif kind == "tool_result":
            parts.append({"kind": "tool_result", "name": str(block.get("name", "")),
                          "id": str(block.get("tool_use_id", "")), "error": bool(block.get("is_error")),
                          "text": str(block.get("output", ""))[:READABLE_TEXT_CHARS]})
    return {"role": str(message.get("role", "")), "parts": parts}


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)[:READABLE_TEXT_CHARS]


# -- the turn as a tree ----------------------------------------------------------------------------
TREE_MAX_STEPS = 2000


def turn_tree(trace: Trace, steps: list[Step]) -> list[dict[str, Any]]:
    """The turn as nested spans, in rows: each iteration, under it its model requests (with the
    retries, restarts and compactions that happened around them), the approval waits and the
    tool calls, marking calls that ran at the same time as parallel. Bars are percentages of
    the turn's length, as in the timeline."""
    if trace.is_active and trace.started_at:
        # running and waiting spans reach to now
        now_ms = (timezone.now() - trace.started_at).total_seconds() * 1000
        for step in steps:
            if step.status in (Step.Status.RUNNING, Step.Status.WAITING) and step.duration_ms is None:
                step.duration_ms = max(now_ms - ran_from(step), 0.0)
    end = max([float(trace.duration_ms or 0)] + [ran_from(s) + float(s.duration_ms or 0) for s in steps])
    scale = max(float(trace.duration_ms or 0) or end, 1.0)
    rows: list[dict[str, Any]] = [_row("turn", trace.agent.name if trace.agent_id else "Turn", 0,
                                       0, end or None, trace.status, scale)]
    by_iteration: dict[int, list[Step]] = {}
    for step in steps:
        by_iteration.setdefault(step.iteration, []).append(step)
    for iteration in sorted(by_iteration):
        group = by_iteration[iteration]
        start = min(s.offset_ms for s in group)
        finish = max(ran_from(s) + float(s.duration_ms or 0) for s in group)
        label = f"Iteration {iteration}" if iteration else "Before the first request"
        rows.append(_row("iteration", label, 1, start, finish - start, "", scale))
        tools = [s for s in group if s.kind == Step.Kind.TOOL_CALL]
        for step in sorted(group, key=lambda s: (ran_from(s), s.seq)):
            depth = 2
            if step.kind in (Step.Kind.RETRY, Step.Kind.COMPACTION):
                depth = 3  # nested under the request they happened around
            row = _row(step.kind, step.name or step.get_kind_display(), depth, ran_from(step),
                       step.duration_ms, step.status, scale)
            row["seq"] = step.seq
            row["kind_label"] = step.short_kind
            if step.kind == Step.Kind.APPROVAL:
                row["label"] = f"waiting for approval: {step.name}"
            if step.kind == Step.Kind.HOOK:
                meta = step.meta if isinstance(step.meta, dict) else {}
                on = f" on {meta['tool']}" if meta.get("tool") else ""
                row["label"] = f"{meta.get('event', 'hook')} hook {step.name}{on}: {meta.get('decision', '')}"
            if step.kind == Step.Kind.TOOL_CALL:
                row["parallel"] = any(o is not step and _overlap(step, o) for o in tools)
            rows.append(row)
    return rows


def ran_from(step: Step) -> float:
    """When the step's work started (ms into the turn). A tool call that waited for approval
    is recorded from when it could run; one recorded before that was, kept its start before
    the wait and the wait as ``approval_wait_ms``, which is added here."""
    meta = step.meta if isinstance(step.meta, dict) else {}
    return step.offset_ms + float(meta.get("approval_wait_ms") or 0)


def _overlap(a: Step, b: Step) -> bool:
    a_start, b_start = ran_from(a), ran_from(b)
    a_end, b_end = a_start + float(a.duration_ms or 0), b_start + float(b.duration_ms or 0)
    return a_start < b_end and b_start < a_end


def _row(kind: str, label: str, depth: int, offset: float, duration: float | None, status: str,
         scale: float) -> dict[str, Any]:
    start = min(offset / scale * 100, 100.0)
    width = max(min((duration or 0) / scale * 100, 100.0 - start), 0.4)
    return {"kind": kind, "label": label, "depth": depth, "bar_x": round(start, 3),
            "bar_w": round(width, 3), "duration_ms": duration, "status": status, "parallel": False}
