"""Actions on conversations and turns: start a conversation, send a message (start a turn),
stop a turn, decide on a tool call that waits for approval.

Who may act is checked here (a team member who can chat); views resolve the objects through
the team-scoped access helpers first, so another team's object is a 404 before this runs.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from agents.runtime.messages import Message as RuntimeMessage
from agentsite.access import membership_for
from agentsite.models import Membership, Team
from traces import live
from traces.models import Trace
from traces.services import (
    announce_sync,
    conversation_lock,
    trace_cancel_queued,
    trace_enqueue,
    trace_request_cancel,
)

from .models import Agent, Conversation, Message
from .selectors import approval_waiting, conversation_active_traces
from .turn_signals import approval_signal_send

MAX_MESSAGE_CHARS = 32_000
INTERRUPT_REASON = "interrupted by a new message"


def _chat_membership(user: Any, team: Team | int) -> Membership:
    membership = membership_for(user, team)
    if membership is None or not membership.can_chat:
        raise PermissionDenied("You need to be a team member (not a viewer) to chat with agents.")
    return membership


def _clean_text(text: str) -> str:
    text = (text or "").strip()
    if not text:
        raise ValidationError("Write a message before sending it.")
    if len(text) > MAX_MESSAGE_CHARS:
        raise ValidationError(
            f"Your message is {len(text):,} characters long; the limit is {MAX_MESSAGE_CHARS:,}. "
            "Shorten it or send it in parts.")
    return text


def conversation_create(*, team: Team, agent: Agent, user: Any, title: str = "") -> Conversation:
    _chat_membership(user, team)
    if agent.team_id != team.pk:
        raise PermissionDenied("That agent belongs to another team.")
    return Conversation.objects.create(team=team, agent=agent, created_by=user,
                                       title=(title or "").strip()[:200])


def turn_start(*, conversation: Conversation, user: Any, text: str) -> Trace:
    """Store the user's message and a queued trace for it, in one transaction; the turn task is
    sent once it commits.

    One turn runs per conversation at a time: while another is queued or running, the new trace
    waits and is sent when the earlier ones end. If the agent interrupts on a new message, the
    earlier turns are stopped instead and the new one goes next."""
    _chat_membership(user, conversation.team_id)
    text = _clean_text(text)
    if conversation.archived:
        raise ValidationError("This conversation is archived. Start a new one to keep chatting.")
    agent = Agent.objects.get(pk=conversation.agent_id)
    now = timezone.now()
    with transaction.atomic():
        conversation_lock(conversation.pk)
        earlier = list(conversation_active_traces(conversation=conversation))
        message = Message.objects.create(
            conversation=conversation, role=Message.Role.USER,
            blocks=RuntimeMessage.user(text).to_dict()["blocks"], text=text, author=user)
        trace = Trace.objects.create(
            team_id=conversation.team_id, conversation=conversation, agent=agent,
            agent_version=agent.version, user=user, user_message=message,
            status=Trace.Status.QUEUED)
        message.trace = trace
        message.save(update_fields=["trace"])
        Conversation.objects.filter(pk=conversation.pk).update(updated_at=now)
        if not earlier:
            trace_enqueue(trace=trace, now=now)
        elif agent.interrupt_on_new_message:
            for older in earlier:
                if not trace_cancel_queued(trace=older, reason=INTERRUPT_REASON, now=now):
                    trace_request_cancel(trace=older, reason=INTERRUPT_REASON, now=now)
        message.conversation = conversation
        transaction.on_commit(lambda: announce_sync(live.message_announcement, message))
    return trace


def turn_cancel(*, trace: Trace, user: Any) -> Trace:
    """Stop a turn: a queued one ends ``cancelled`` at once; a running one is signalled and its
    worker ends it. Stopping a turn that has ended does nothing."""
    _chat_membership(user, trace.team_id)
    reason = f"Cancelled by {user.get_username()}"
    if not trace_cancel_queued(trace=trace, reason=reason):
        trace_request_cancel(trace=trace, reason=reason)
    trace.refresh_from_db()
    return trace


def approval_decide(*, trace: Trace, call_id: str, approved: bool, user: Any) -> None:
    """Approve or deny a tool call that waits for approval in a running turn."""
    _chat_membership(user, trace.team_id)
    running = Trace.objects.filter(pk=trace.pk, status=Trace.Status.RUNNING).exists()
    if not running or approval_waiting(trace=trace, call_id=call_id) is None:
        raise ValidationError("This tool call is not waiting for approval any more.")
    if not approval_signal_send(trace_uuid=trace.uuid, call_id=call_id, approved=approved,
                                decided_by=user.get_username()):
        raise ValidationError("Your decision could not be delivered to the worker. Try again in "
                              "a moment.")
