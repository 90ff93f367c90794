"""Tool cards: each tool call of a turn, what it was called with, whether it waits for a
person's approval, how it ended and how long it took. The chat shows them; the API lists a
message's tool calls and a turn's waiting approvals from the same cards."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import OuterRef, Subquery
from django.db.models.functions import Substr
from django.urls import NoReverseMatch

from agentsite.links import link
from traces.models import Step, StepPayload

ARGUMENTS_MAX_CHARS = 4000
STEP_FIELDS = ("id", "trace_id", "seq", "kind", "name", "status", "success", "duration_ms",
               "error", "call_id", "meta", "started_at")
_UNSAFE_ID = re.compile(r"[^A-Za-z0-9_-]")


@dataclass
class ToolCard:
    """One tool call of a turn as the chat shows it: what was called with which arguments,
    whether it waited for approval, how it ended and how long it took."""

    trace_uuid: Any
    call_id: str
    name: str
    seq: int
    arguments: str = ""
    # The arguments as stored (JSON), as far as they were read (``card_steps``).
    arguments_json: str = ""
    state: str = "running"      # waiting, running, ok, error, denied, timeout, cancelled
    duration_ms: float | None = None
    output: str = ""
    output_chars: int = 0
    error: str = ""
    needs_approval: bool = False
    decided_by: str = ""
    deadline_ms: int | None = None
    timeout_s: int | None = None
    # When the approval was asked for (a call that needs one).
    waiting_since: datetime | None = None

    @property
    def dom_id(self) -> str:
        return f"call-{self.trace_uuid.hex}-{_UNSAFE_ID.sub('_', self.call_id)[:80]}"

    @property
    def label(self) -> str:
        return {
            "waiting": "Waiting for approval", "running": "Running…", "ok": "Done",
            "error": "Failed", "denied": "Denied", "timeout": "Denied: no decision in time",
            "cancelled": "Stopped",
        }.get(self.state, self.state)

    @property
    def output_clipped(self) -> bool:
        return self.output_chars > len(self.output)

    @property
    def is_open(self) -> bool:
        return self.state == "waiting"

    @property
    def seconds_left(self) -> int:
        if self.deadline_ms is None:
            return 0
        return max(int((self.deadline_ms - time.time() * 1000) // 1000), 0)

    @property
    def decision_url(self) -> str:
        try:
            return link("approval_decision", self.trace_uuid, self.call_id)
        except NoReverseMatch:  # an id the URL cannot carry: decide in the trace instead
            return ""


def _pretty_arguments(content: str) -> str:
    try:
        text = json.dumps(json.loads(content), indent=2, ensure_ascii=False)
    except ValueError:
        text = content
    if len(text) > ARGUMENTS_MAX_CHARS:
        text = text[:ARGUMENTS_MAX_CHARS] + "\n…"
    return text


def tool_cards(steps: Iterable[Step], arguments: dict[int, str], trace_uuids: dict[int, Any]
               ) -> dict[tuple[int, str], ToolCard]:
    """Cards keyed by (trace id, call id) from the tool-call and approval steps. A call that
    needs approval has both: the approval decides what the card says until it is given, the
    tool step after that."""
    grouped: dict[tuple[int, str], dict[str, Step]] = {}
    for step in sorted(steps, key=lambda s: (s.trace_id, s.seq)):
        key = (step.trace_id, step.call_id or f"step-{step.seq}")
        grouped.setdefault(key, {})[step.kind] = step
    cards: dict[tuple[int, str], ToolCard] = {}
    for key, kinds in grouped.items():
        tool, approval = kinds.get(Step.Kind.TOOL_CALL), kinds.get(Step.Kind.APPROVAL)
        first = min((s for s in (tool, approval) if s is not None), key=lambda s: s.seq)
        card = cards[key] = ToolCard(trace_uuids[key[0]], key[1], first.name, first.seq)
        for step in (approval, tool):
            if step is not None and step.pk in arguments:
                card.arguments_json = arguments[step.pk]
                card.arguments = _pretty_arguments(arguments[step.pk])
        if tool is not None:
            meta = tool.meta if isinstance(tool.meta, dict) else {}
            card.duration_ms = tool.duration_ms
            card.output = str(meta.get("output_preview") or "")
            card.output_chars = int(meta.get("output_chars") or len(card.output))
            card.error = tool.error
            card.state = {Step.Status.OK: "ok", Step.Status.ERROR: "error"}.get(tool.status, "running")
            if card.state == "error" and tool.error.strip().lower().startswith("cancel"):
                card.state = "cancelled"
        if approval is not None:
            _apply_approval(card, approval)
    return cards


def _apply_approval(card: ToolCard, step: Step) -> None:
    meta = step.meta if isinstance(step.meta, dict) else {}
    card.needs_approval = True
    card.timeout_s = int(meta.get("timeout_s") or 0) or None
    card.waiting_since = step.started_at
    if card.timeout_s and step.started_at:
        card.deadline_ms = int(step.started_at.timestamp() * 1000) + card.timeout_s * 1000
    card.decided_by = str(meta.get("decided_by") or "")
    if step.status == Step.Status.WAITING:
        card.state = "waiting"
    elif step.status == Step.Status.ERROR:
        reason = str(meta.get("reason") or "")
        if reason.startswith("declined by "):
            reason = "denied"
        card.state = reason if reason in ("denied", "timeout", "cancelled") else "error"
        card.error = step.error or card.error


def card_steps(trace_ids: list[int], call_id: str | None = None, *,
               arguments_chars: int | None = ARGUMENTS_MAX_CHARS + 1
               ) -> tuple[list[Step], dict[int, str]]:
    """The tool-call and approval steps of ``trace_ids`` (of one call, ``call_id``), and the
    start of each one's arguments (``arguments_chars`` characters; None: all of them, 0: none),
    in one query."""
    rows = Step.objects.filter(trace_id__in=trace_ids,
                               kind__in=[Step.Kind.TOOL_CALL, Step.Kind.APPROVAL])
    if call_id is not None:
        rows = rows.filter(call_id=call_id)
    rows = rows.only(*STEP_FIELDS)
    if arguments_chars == 0:
        return list(rows), {}
    payload = StepPayload.objects.filter(step_id=OuterRef("pk"), kind="arguments")
    if arguments_chars is None:
        head = payload.values("content")[:1]
    else:
        head = payload.annotate(head=Substr("content", 1, arguments_chars)).values("head")[:1]
    steps = list(rows.annotate(arguments_head=Subquery(head)))
    arguments = {s.pk: s.arguments_head for s in steps if s.arguments_head is not None}
    return steps, arguments


def tool_card_for_step(step: Step) -> ToolCard | None:
    """The card of the call ``step`` belongs to (for a live update)."""
    if step.kind not in (Step.Kind.TOOL_CALL, Step.Kind.APPROVAL):
        return None
    steps, arguments = card_steps([step.trace_id], step.call_id)
    cards = tool_cards(steps, arguments, {step.trace_id: step.trace.uuid})
    return next(iter(cards.values()), None)
