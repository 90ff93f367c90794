"""A turn as a response object of OpenAI's Responses protocol, read from what the turn stored.

Its output items, in the order they happened: each assistant message of the turn with text is a
``message`` item (``msg_<trace>_<n>``, the n-th one with text); each tool call the agent made on
the server is an ``mcp_call`` item (``server_label`` ``"agentsite"``; ``id`` ``mcp_<call id>``),
with its arguments, its result (``output``) or what went wrong (``error``), and, for a call that
waited for a person, ``approval_request_id`` (the call's id: where the REST API decides it). A
client reads them the way it reads a hosted tool's calls: they are not its own to run.
"""

from __future__ import annotations

import json
from typing import Any

from django.db.models import Q
from django.http import HttpRequest

from agents.api.openai import trace_ref, turn_error
from agents.api.responses_request import response_id
from agents.models import Message
from agents.turns.tool_cards import ToolCard, card_steps, tool_cards
from traces.models import Trace

SERVER_LABEL = "agentsite"
FAILED_CALLS = frozenset({"error", "denied", "timeout", "cancelled"})
# A turn's status as a response's.
STATUSES = {Trace.Status.QUEUED: "queued", Trace.Status.RUNNING: "in_progress",
            Trace.Status.COMPLETED: "completed", Trace.Status.FAILED: "failed",
            Trace.Status.TIMED_OUT: "failed", Trace.Status.CANCELLED: "cancelled",
            Trace.Status.INTERRUPTED: "cancelled"}
INCOMPLETE = {"length": "max_output_tokens", "filtered": "content_filter"}


def message_item(trace_uuid: Any, n: int, text: str, *, status: str = "completed") -> dict[str, Any]:
    return {"type": "message", "id": f"msg_{trace_uuid.hex}_{n}", "status": status,
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}


def call_item(call_id: str, name: str, arguments: Any, *, card: ToolCard | None,
              result: dict[str, Any] | None = None) -> dict[str, Any]:
    """A server-side tool call as an ``mcp_call`` item: ``result`` is the tool message's block
    (the whole result); without it, the card's summary."""
    state = card.state if card else ("error" if result and result.get("is_error") else "ok")
    output: Any = result.get("output") if result else (card.output if card else None)
    if output is not None and not isinstance(output, str):
        output = json.dumps(output)
    failed = state in FAILED_CALLS or bool(result and result.get("is_error"))
    done = failed or state == "ok" or result is not None
    return {"type": "mcp_call", "id": f"mcp_{call_id}", "server_label": SERVER_LABEL,
            "name": name, "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments or {}),
            "output": None if failed else output,
            "error": ((card.error if card else "") or output or (card.label if card else "failed"))
            if failed else None,
            "status": "failed" if failed else ("completed" if done else "in_progress"),
            "approval_request_id": call_id if card and card.needs_approval else None}


def _blocks(message: Message, kind: str) -> list[dict[str, Any]]:
    return [b for b in message.blocks or [] if isinstance(b, dict) and b.get("type") == kind]


def output_items(trace: Trace) -> list[dict[str, Any]]:
    """The turn's output items as stored so far (two queries: its messages, its tool cards)."""
    messages = list(Message.objects.filter(trace=trace).filter(
        Q(role=Message.Role.ASSISTANT) | Q(role=Message.Role.TOOL)).order_by("id")
        .only("id", "role", "text", "blocks"))
    results = {str(b.get("tool_use_id") or ""): b for m in messages if m.role == Message.Role.TOOL
               for b in _blocks(m, "tool_result")}
    cards: dict[tuple[int, str], ToolCard] = {}
    if any(_blocks(m, "tool_use") for m in messages):
        steps, _ = card_steps([trace.pk], arguments_chars=0)
        cards = tool_cards(steps, {}, {trace.pk: trace.uuid})
    items: list[dict[str, Any]] = []
    texts = 0
    for message in messages:
        if message.role != Message.Role.ASSISTANT:
            continue
        if message.text:
            items.append(message_item(trace.uuid, texts, message.text))
            texts += 1
        for block in _blocks(message, "tool_use"):
            call_id = str(block.get("id") or "")
            items.append(call_item(call_id, str(block.get("name") or ""), block.get("input"),
                                   card=cards.get((trace.pk, call_id)), result=results.get(call_id)))
    return items


def usage_of(trace: Trace) -> dict[str, Any]:
    return {"input_tokens": trace.prompt_tokens,
            "input_tokens_details": {"cached_tokens": trace.cache_read_tokens},
            "output_tokens": trace.output_tokens,
            "output_tokens_details": {"reasoning_tokens": trace.reasoning_tokens},
            "total_tokens": trace.total_tokens}


def response_fields(kept: dict[str, Any], *, response_uuid: Any, created_at: int, model: str,
                    overrides: dict[str, Any], end_user: str) -> dict[str, Any]:
    """What a response says of its request, before anything of its turn is known."""
    text_format = kept.get("text_format") or {"type": "text"}
    return {"id": response_id(response_uuid), "object": "response", "created_at": created_at,
            "status": "queued", "error": None, "incomplete_details": None,
            "instructions": kept.get("instructions"), "model": kept.get("model") or model,
            "output": [], "parallel_tool_calls": True,
            "previous_response_id": kept.get("previous_response_id"),
            "max_output_tokens": overrides.get("max_tokens"),
            "temperature": overrides.get("temperature"), "top_p": overrides.get("top_p"),
            "text": {"format": text_format}, "tool_choice": "auto", "tools": [],
            "truncation": "disabled", "store": kept.get("store", True),
            "metadata": kept.get("metadata") or {}, "user": end_user or None,
            "safety_identifier": end_user or None, "usage": None}


def response_body(request: HttpRequest, trace: Trace, *, outcome: str | None = None) -> dict[str, Any]:
    """The response that ``trace`` is (read with its conversation), as stored now. ``outcome``:
    its last answer's, when read already (``turn_stream``)."""
    meta = trace.meta or {}
    kept = meta.get("response") or {}
    # (A turn of the chat, read as a response, names its agent.)
    model = kept.get("model") or (trace.agent.slug if trace.agent_id and trace.agent else "")
    body = response_fields(kept, response_uuid=trace.uuid,
                           created_at=int(trace.created_at.timestamp()), model=model,
                           overrides=meta.get("overrides") or {},
                           end_user=trace.conversation.end_user)
    body["status"] = STATUSES.get(trace.status, "in_progress")
    body["output"] = output_items(trace)
    body["usage"] = usage_of(trace)
    body["agentsite"] = trace_ref(request, trace)
    if trace.status == Trace.Status.COMPLETED:
        if outcome is None:
            outcome = (Message.objects.filter(trace=trace, role=Message.Role.ASSISTANT)
                       .order_by("-id").values_list("outcome", flat=True).first())
        if outcome in INCOMPLETE:
            body["status"] = "incomplete"
            body["incomplete_details"] = {"reason": INCOMPLETE[outcome]}
        body["completed_at"] = int(trace.finished_at.timestamp()) if trace.finished_at else None
    elif trace.status not in Trace.ACTIVE:
        status, message, code = turn_error(trace)
        body["error"] = {"code": "rate_limit_exceeded" if status == 429 else "server_error",
                         "message": message, "agentsite_code": code}
    return body


def input_items(trace: Trace) -> list[dict[str, Any]]:
    """What the response was given, oldest first, as input message items: the person's message
    and, for the first response of a stateless request's conversation, the history it sent (the
    messages stored with the conversation before it)."""
    asked = (Message.objects.filter(trace=trace, role=Message.Role.USER).order_by("id")
             .only("id", "uuid", "role", "text").first())
    if asked is None:
        return []
    given = [asked]
    first = (Trace.objects.filter(conversation_id=trace.conversation_id).order_by("id")
             .values_list("id", flat=True).first())
    if first == trace.pk:
        given[:0] = (Message.objects.filter(conversation_id=trace.conversation_id, id__lt=asked.pk,
                                            trace__isnull=True)
                     .order_by("id").only("id", "uuid", "role", "text"))
    return [{"type": "message", "id": f"msg_{m.uuid.hex}", "role": m.role, "status": "completed",
             "content": [{"type": "output_text" if m.role == Message.Role.ASSISTANT else "input_text",
                          "text": m.text}]} for m in given]
