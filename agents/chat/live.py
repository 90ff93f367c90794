"""The chat's live fragments: what a conversation's page receives while its turns run.

Each announcement is the inspector's (``traces.live``) sent to the conversation's group too,
with what the chat shows of it: a tool card for tool calls and approvals, tokens and cost for
model requests, a sent message with its place in the conversation's tree, and a finished turn's
answer and meter. Fragments come from the same ``{% partialdef %}`` partials as the page.
``CHAT`` bundles them for the recorder; ``agents.apps`` hands it to the turns.
"""

from __future__ import annotations

from typing import Any

from traces import live
from traces.live import Announcement, Announcements, render

from .selectors import TurnView, tool_card_for_step, turn_view


def groups_for(trace: Any) -> list[str]:
    return [live.trace_group(trace.uuid), live.conversation_group(trace.conversation.uuid)]


def step_fragment(step: Any) -> dict[str, Any]:
    """What the chat shows of ``step``: a tool card for tool calls and approvals, tokens and
    cost for model requests."""
    if step.kind == "llm_request":
        meta = step.meta if isinstance(step.meta, dict) else {}
        return {"kind": "llm", "tokens": step.total_tokens, "cost": str(step.cost_usd or 0),
                "estimated": bool(meta.get("usage_estimated"))}
    card = tool_card_for_step(step)
    if card is None:
        return {"kind": step.kind}
    return {"kind": step.kind, "card_id": card.dom_id, "card_seq": card.seq,
            "card": render("chat/conversation.html#tool-card", {"card": card})}


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
    parent = message.parent_turn.uuid if message.parent_turn_id else None
    payload["turn"] = message.trace.uuid.hex
    payload["parent"] = parent.hex if parent else ""
    payload["html"] = render("chat/conversation.html#sent", {
        "turn": TurnView(message.trace, message), "conversation": message.conversation})
    return payload


def chat_answer(trace: Any) -> dict[str, Any]:
    """The chat's fragments for a turn that ended: its answer (replacing the pending one) and
    the conversation's meter."""
    turn, meter = turn_view(trace)
    context = {"turn": turn, "conversation": trace.conversation}
    return {"answer": render("chat/conversation.html#answer", context),
            "meter": render("chat/conversation.html#meter", {"meter": meter})}


def delta_frame(payload: dict[str, Any]) -> str:
    """A text delta as the chat receives it: ``~<step>|<offset>|<text>``. Deltas are most of a
    turn's frames and the chat needs only the text (its running answer is the only one
    streaming) and where it starts (a page that loaded the text so far joins without a gap or
    a repeat); the final answer replaces the text in any case."""
    return f"~{payload.get('step', 0)}|{payload.get('offset', 0)}|{payload.get('text', '')}"


def step_announcement(step: Any) -> Announcement:
    return groups_for(step.trace), {**live.step_payload(step), **step_fragment(step)}


def state_announcement(state: Any) -> Announcement:
    return groups_for(state.trace), live.state_payload(state)


def trace_announcement(trace: Any) -> Announcement:
    payload = live.trace_payload(trace)
    if trace.status not in ("queued", "running") and trace.conversation_id:
        payload.update(chat_answer(trace))
    return groups_for(trace), payload


def message_announcement(message: Any) -> Announcement:
    return [live.conversation_group(message.conversation.uuid)], message_payload(message)


CHAT = Announcements(step=step_announcement, state=state_announcement,
                     trace=trace_announcement, message=message_announcement, groups=groups_for)
