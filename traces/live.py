"""Live announcements of what a turn does, on the channel layer.

The database is the truth and these are notifications: every persisted change carries the
trace's event sequence number ``seq`` so that a client which sees a gap, reconnects, or opens a
running trace late asks the server for everything after the last number it holds. Token deltas
are not persisted; they carry the current ``seq`` and their own ``index`` within the model step.

Fragments are rendered from the same ``{% partialdef %}`` partials the pages use, so a row that
arrives live and a row rendered on reload are the same HTML.

Groups: ``trace_<hex>`` (the inspector) and ``conversation_<hex>`` (the chat).
"""

from __future__ import annotations

import logging
from typing import Any

from channels.layers import get_channel_layer
from django.template.loader import render_to_string

logger = logging.getLogger(__name__)

EVENT_TYPE = "live.event"  # handled by the consumers' ``live_event``


def trace_group(trace_uuid: Any) -> str:
    return f"trace_{_hex(trace_uuid)}"


def conversation_group(conversation_uuid: Any) -> str:
    return f"conversation_{_hex(conversation_uuid)}"


def _hex(value: Any) -> str:
    return value.hex if hasattr(value, "hex") else str(value).replace("-", "")


def render(partial: str, context: dict[str, Any]) -> str:
    return render_to_string(partial, context)


# -- payloads (plain dicts: the consumers forward them as JSON) ----------------------------------
def step_payload(step: Any, *, chat: bool = False) -> dict[str, Any]:
    """The inspector's row for ``step``; with ``chat``, also what the chat shows of it: a tool
    card for tool calls and approvals, tokens and cost for model requests."""
    from .presentation import decorate_steps

    if not hasattr(step, "bar_x"):
        # The client rescales every bar to the trace's current length; this is a first guess.
        decorate_steps([step], scale=step.offset_ms + (step.duration_ms or 0) or 1.0)
    payload = {
        "event": "step",
        "trace": step.trace.uuid.hex,
        "seq": step.event_seq,
        "id": f"step-{step.seq}",
        "step": step.seq,
        "status": step.status,
        "html": render("traces/trace_detail.html#step-row", {"step": step, "trace": step.trace, "live": True}),
    }
    if chat:
        payload.update(_chat_step(step))
    return payload


def _chat_step(step: Any) -> dict[str, Any]:
    from agents.chat.selectors import tool_card_for_step

    if step.kind == "llm_request":
        return {"kind": "llm", "tokens": step.total_tokens, "cost": str(step.cost_usd or 0)}
    card = tool_card_for_step(step)
    if card is None:
        return {"kind": step.kind}
    return {"kind": step.kind, "card_id": card.dom_id, "card_seq": card.seq,
            "card": render("chat/conversation.html#tool-card", {"card": card})}


def state_payload(state: Any) -> dict[str, Any]:
    from .presentation import decorate_states

    if not hasattr(state, "diff"):
        decorate_states([state], trace=state.trace)
    return {
        "event": "state",
        "trace": state.trace.uuid.hex,
        "seq": state.event_seq,
        "id": f"state-{state.iteration}",
        "html": render("traces/trace_detail.html#state-row", {"state": state, "trace": state.trace}),
    }


def trace_payload(trace: Any) -> dict[str, Any]:
    return {
        "event": "trace",
        "trace": trace.uuid.hex,
        "seq": trace.event_seq,
        "id": "trace-header",
        "status": trace.status,
        # The cost so far, for meters outside the inspector (the chat): bumped as each model
        # request finishes.
        "totals": trace_totals(trace),
        "html": render("traces/trace_detail.html#trace-header", {"trace": trace}),
    }


def trace_totals(trace: Any) -> dict[str, Any]:
    return {
        "cost_usd": str(trace.cost_usd),
        "input_tokens": trace.input_tokens, "output_tokens": trace.output_tokens,
        "cache_write_tokens": trace.cache_write_tokens, "cache_read_tokens": trace.cache_read_tokens,
        "reasoning_tokens": trace.reasoning_tokens, "total_tokens": trace.total_tokens,
        "unpriced_calls": getattr(trace, "unpriced_calls", 0),
        "prefix_priced_calls": getattr(trace, "prefix_priced_calls", 0),
    }


def delta_payload(*, trace_uuid: Any, seq: int, step: int, index: int, text: str) -> dict[str, Any]:
    return {"event": "delta", "trace": _hex(trace_uuid), "seq": seq, "step": step, "index": index, "text": text}


def message_payload(message: Any) -> dict[str, Any]:
    """A new user message: the chat's fragment for it and its pending answer, and where it sits
    in the conversation's tree (``turn`` continues ``parent``). Answers arrive with their
    turn's final ``trace`` event instead, so other messages carry no fragment."""
    payload: dict[str, Any] = {
        "event": "message",
        "conversation": message.conversation.uuid.hex,
        "trace": message.trace.uuid.hex if message.trace_id else None,
        "id": f"message-{message.uuid.hex}",
        "role": message.role,
    }
    if message.role != "user" or not message.trace_id:
        return payload
    from agents.chat.selectors import TurnView

    parent = None
    if message.parent_turn_id:
        from .models import Trace

        parent = Trace.objects.filter(pk=message.parent_turn_id).values_list("uuid", flat=True).first()
    payload["turn"] = message.trace.uuid.hex
    payload["parent"] = parent.hex if parent else ""
    payload["html"] = render("chat/conversation.html#sent", {
        "turn": TurnView(message.trace, message), "conversation": message.conversation})
    return payload


def chat_answer(trace: Any) -> dict[str, Any]:
    """The chat's fragments for a turn that ended: its answer (replacing the pending one) and
    the conversation's meter."""
    from agents.chat.selectors import turn_view

    turn, meter = turn_view(trace)
    context = {"turn": turn, "conversation": trace.conversation}
    return {"answer": render("chat/conversation.html#answer", context),
            "meter": render("chat/conversation.html#meter", {"meter": meter})}


def delta_frame(payload: dict[str, Any]) -> str:
    """A text delta as the chat receives it: ``~<step>|<text>``. Deltas are most of a turn's
    frames and the chat needs only the text (its running answer is the only one streaming),
    so the frame carries nothing else; the final answer replaces the text in any case."""
    return f"~{payload.get('step', 0)}|{payload.get('text', '')}"


# -- sending ------------------------------------------------------------------------------------
async def publish(groups: list[str], payload: dict[str, Any]) -> None:
    """Send ``payload`` to ``groups``; a failure is logged, never raised (the DB has the truth)."""
    layer = get_channel_layer()
    if layer is None:
        return
    message = {"type": EVENT_TYPE, "payload": payload}
    for group in groups:
        try:
            await layer.group_send(group, message)
        except Exception:  # noqa: BLE001 - notifications must never break a turn
            logger.warning("could not announce %s to %s", payload.get("event"), group, exc_info=True)


def groups_for(trace: Any) -> list[str]:
    return [trace_group(trace.uuid), conversation_group(trace.conversation.uuid)]


# What each announcement sends, rendered synchronously: templates may read related rows, and
# the ORM refuses to run inside an event loop. A running turn renders these on its database
# thread and sends them with ``publish`` (``traces.recorder``); ``announce_sync`` does both
# from synchronous code.
Announcement = tuple[list[str], dict[str, Any]]


def step_announcement(step: Any) -> Announcement:
    return groups_for(step.trace), step_payload(step, chat=True)


def state_announcement(state: Any) -> Announcement:
    return groups_for(state.trace), state_payload(state)


def trace_announcement(trace: Any) -> Announcement:
    payload = trace_payload(trace)
    if trace.status not in ("queued", "running") and trace.conversation_id:
        payload.update(chat_answer(trace))
    return groups_for(trace), payload


def message_announcement(message: Any) -> Announcement:
    return [conversation_group(message.conversation.uuid)], message_payload(message)


async def step_changed(step: Any) -> None:
    await publish(*step_announcement(step))


async def state_recorded(state: Any) -> None:
    await publish(*state_announcement(state))


async def trace_changed(trace: Any) -> None:
    await publish(*trace_announcement(trace))


async def text_delta(trace: Any, *, step: int, index: int, text: str) -> None:
    await publish(groups_for(trace), delta_payload(trace_uuid=trace.uuid, seq=trace.event_seq, step=step, index=index, text=text))


async def message_added(message: Any) -> None:
    await publish(*message_announcement(message))
