"""The chat's live updates: what a conversation's page receives while its turns run.

A turn announces data (``traces.record.live``: which row changed, its status, its event number), to
the trace's group and the conversation's, with what the chat needs of a model request as data
(its tokens and cost, for the meter). The chat's fragments — a tool card for tool calls and
approvals, a sent message with its place in the conversation's tree, a finished turn's answer
and meter — are rendered by the conversation's socket when the event reaches an open page
(``chat_payload``), from the same ``{% partialdef %}`` partials as the page: nothing is
rendered for a conversation nobody watches. ``CHAT`` bundles the announcements for the
recorder; ``agents.apps`` hands it to the turns.
"""

from __future__ import annotations

from typing import Any

from agents.models import Message
from agents.turns.tool_cards import tool_card_for_step
from traces.costs.budgets import banner_lines, budget_states
from traces.models import Step, Trace
from traces.record import live
from traces.record.live import Announcement, Announcements, render

from .selectors import TurnView, turn_view

ENDED = frozenset(s for s in Trace.Status.values if s not in Trace.ACTIVE)


def groups_for(trace: Any) -> list[str]:
    """Where a trace's changes go: its inspector, and its conversation's page unless the
    conversation is a stateless API request's record, which no chat page lists or follows."""
    groups = [live.trace_group(trace.uuid)]
    if not trace.conversation.ephemeral:
        groups.append(live.conversation_group(trace.conversation.uuid))
    return groups


# -- events: what a turn announces (data, no query) -----------------------------------------------
def step_data(step: Any) -> dict[str, Any]:
    """What the chat shows of a model request without rendering: its tokens and cost."""
    if step.kind == "llm_request":
        meta = step.meta if isinstance(step.meta, dict) else {}
        return {"kind": "llm", "tokens": step.total_tokens, "cost": str(step.cost_usd or 0),
                "estimated": bool(meta.get("usage_estimated"))}
    return {"kind": step.kind}


def message_event(message: Any) -> dict[str, Any]:
    """A new message of the conversation; a user's also says where it sits in the
    conversation's tree (``turn`` continues ``parent``). Answers arrive with their turn's final
    ``trace`` event instead."""
    payload: dict[str, Any] = {
        "event": "message",
        "conversation": message.conversation.uuid.hex,
        "trace": message.trace.uuid.hex if message.trace_id else None,
        "id": f"message-{message.uuid.hex}",
        "message": message.uuid.hex,
        "role": message.role,
    }
    if message.role == "user" and message.trace_id:
        payload["turn"] = message.trace.uuid.hex
        payload["parent"] = message.parent_turn.uuid.hex if message.parent_turn_id else ""
    return payload


def step_announcement(step: Any) -> Announcement:
    return groups_for(step.trace), {**live.step_event(step), **step_data(step)}


def state_announcement(state: Any) -> Announcement:
    return groups_for(state.trace), live.state_event(state)


def trace_announcement(trace: Any) -> Announcement:
    return groups_for(trace), live.trace_event(trace)


def message_announcement(message: Any) -> Announcement:
    return [live.conversation_group(message.conversation.uuid)], message_event(message)


CHAT = Announcements(step=step_announcement, state=state_announcement,
                     trace=trace_announcement, message=message_announcement, groups=groups_for)


# -- payloads: what an open conversation page receives ------------------------------------------
def step_fragment(step: Any) -> dict[str, Any]:
    """What the chat shows of ``step``: a tool card for tool calls and approvals, tokens and
    cost for model requests."""
    card = tool_card_for_step(step)
    if card is None:
        return step_data(step)
    return {"kind": step.kind, "card_id": card.dom_id, "card_seq": card.seq,
            "card": render("chat/conversation.html#tool-card", {"card": card})}


def message_payload(message: Any) -> dict[str, Any]:
    """A new user message with the chat's fragment for it and its pending answer."""
    payload = message_event(message)
    if message.role != "user" or not message.trace_id:
        return payload
    payload["html"] = render("chat/conversation.html#sent", {
        "turn": TurnView(message.trace, message), "conversation": message.conversation})
    return payload


def chat_answer(trace: Any, viewer: Any = None) -> dict[str, Any]:
    """The chat's fragments for a turn that ended: its answer (replacing the pending one), the
    conversation's meter and, for ``viewer``, the site's budget banner (what the turn spent may
    have crossed a threshold)."""
    turn, meter = turn_view(trace)
    context = {"turn": turn, "conversation": trace.conversation}
    fragments = {"answer": render("chat/conversation.html#answer", context),
                 "meter": render("chat/conversation.html#meter", {"meter": meter}),
                 "model": render("chat/conversation.html#model", {"meter": meter})}
    if viewer is not None:
        states = budget_states(team_id=trace.team_id, user_id=viewer.pk, related=False)
        fragments["banner"] = render("costs/_budget_banner.html",
                                     {"budget_banner": banner_lines(states)})
    return fragments


def chat_payload(event: dict[str, Any], viewer: Any = None) -> dict[str, Any]:
    """An announced event as the conversation's socket sends it to ``viewer``, with the chat's
    fragments rendered from the record now: a tool call's card, a sent message, an ended turn's
    answer, meter and budget banner. Other events, and those whose row is gone, go as they
    are."""
    kind = event.get("event")
    if kind == "message":
        if event.get("role") != "user" or not event.get("trace"):
            return event
        message = (Message.objects.select_related("trace", "conversation", "parent_turn")
                   .filter(uuid=event.get("message")).first())
        return {**event, **message_payload(message)} if message is not None and message.trace_id else event
    if kind == "step" and event.get("kind") in (Step.Kind.TOOL_CALL, Step.Kind.APPROVAL):
        step = (Step.objects.select_related("trace").filter(trace__uuid=event.get("trace"), seq=event.get("step"))
                .first())
        return {**event, **step_fragment(step)} if step is not None else event
    if kind == "trace" and event.get("status") in ENDED:
        trace = Trace.objects.select_related(*live.LIVE_RELATED).filter(uuid=event.get("trace")).first()
        if trace is None or trace.conversation_id is None:
            return event
        return {**event, **chat_answer(trace, viewer)}
    return event


def delta_frame(payload: dict[str, Any]) -> str:
    """A text delta as the chat receives it: ``~<step>|<offset>|<text>``. Deltas are most of a
    turn's frames and the chat needs only the text (its running answer is the only one
    streaming) and where it starts (a page that loaded the text so far joins without a gap or
    a repeat); the final answer replaces the text in any case."""
    return f"~{payload.get('step', 0)}|{payload.get('offset', 0)}|{payload.get('text', '')}"
