"""Read queries for conversations and turns."""

from __future__ import annotations

from django.db.models import F, Q, QuerySet

from agentsite.models import Team
from traces.models import Step, Trace

from .models import Agent, Conversation, Message


def conversation_active_traces(*, conversation: Conversation | int) -> QuerySet[Trace]:
    """The conversation's queued and running traces, oldest first."""
    conversation_id = conversation.pk if isinstance(conversation, Conversation) else conversation
    return (Trace.objects.filter(conversation_id=conversation_id, status__in=Trace.ACTIVE)
            .order_by("created_at", "id"))


def conversation_history_rows(*, trace: Trace, limit: int) -> list[Message]:
    """The messages before ``trace``'s turn, oldest first, at most ``limit`` of them.

    Messages are ordered by the turn that stored them, then by id: a message sent while an
    earlier turn ran is stored before that turn's answer, but belongs after it. Messages of
    later turns (queued behind this one) and the trace's own user message are left out."""
    rows = (Message.objects.filter(conversation_id=trace.conversation_id)
            .filter(Q(trace_id__lt=trace.pk) | Q(trace__isnull=True))
            .exclude(pk=trace.user_message_id)
            .order_by(F("trace_id").desc(nulls_last=True), "-id"))
    if limit > 0:
        rows = rows[:limit]
    return list(reversed(list(rows)))


def approval_waiting(*, trace: Trace, call_id: str) -> Step | None:
    """The approval step of ``trace`` that waits for a decision on ``call_id``, if any."""
    return (Step.objects.filter(trace=trace, kind=Step.Kind.APPROVAL, call_id=call_id,
                                status=Step.Status.WAITING).order_by("-seq").first())


# -- the chat ------------------------------------------------------------------------------------
def agent_choices(*, team: Team) -> QuerySet[Agent]:
    return Agent.objects.filter(team=team).only("uuid", "name", "description", "model").order_by("name")


def conversation_list(*, team: Team, user, limit: int = 100) -> QuerySet[Conversation]:
    return (
        Conversation.objects.filter(team=team, created_by=user, archived=False)
        .select_related("agent")
        .only("uuid", "title", "updated_at", "agent__name")
        .order_by("-updated_at")[:limit]
    )


def conversation_messages(conversation: Conversation) -> list[Message]:
    """The messages a person reads (user and assistant turns; tool plumbing stays in traces),
    in the order the model saw them: by turn, then by id — a message sent while a turn ran
    comes after that turn's answer."""
    rows = list(
        conversation.messages.filter(role__in=[Message.Role.USER, Message.Role.ASSISTANT])
        .select_related("trace")
        .only("uuid", "role", "text", "blocks", "created_at", "trace__uuid", "trace__status", "conversation_id")
        .order_by(F("trace_id").asc(nulls_first=True), "id")
    )
    for row in rows:
        row.conversation = conversation
        row.tool_names = [b.get("name", "") for b in row.blocks or [] if isinstance(b, dict) and b.get("type") == "tool_use"]
    return [r for r in rows if r.text or r.tool_names]


def conversation_active_trace(conversation: Conversation) -> Trace | None:
    """The turn the chat shows as in progress (the oldest queued or running one)."""
    return conversation_active_traces(conversation=conversation).only("uuid", "status", "event_seq", "conversation_id").first()
