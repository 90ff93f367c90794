"""``/api/v1/conversations``: the key's person's conversations and their messages, and sending
a message (scope ``chat``).

Who sees a conversation is the chat's rule (``agents.access``): its owner, the team's owners and
admins, and everyone in the team once it is shared; any other is a 404. Sending is for its owner
and the team's admins, never a viewer (403). A message starts a turn like one sent in the chat,
tied to the key (its rate limits and budgets); ``wait`` holds the answer until the turn ends.
A W3C ``traceparent`` header (with its ``tracestate``) makes the turn part of the caller's
trace; an invalid one is ignored (``agents.api.trace_context``). An ``X-Agentsite-End-User``
header names the end user of the key's application a request is for (``agents.api.end_users``):
a conversation started with it is theirs, and the lists and reads show theirs only."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.http import HttpRequest
from django.urls import reverse
from ninja import Field, Query, Router, Schema, Status

from agents.access import conversation_act_check, conversation_get_or_404, conversations_visible
from agents.api.auth import scope_check
from agents.api.end_users import END_USER_HEADER, end_user_conversations, request_end_user
from agents.api.errors import errors
from agents.api.rest.common import AgentRef, agent_get_or_404, agent_ref
from agents.api.rest.pagination import PageParams, paginate
from agents.api.rest.traces import TraceOut, trace_out
from agents.api.trace_context import request_trace_context
from agents.api.turn_stream import TurnTimeout, turn_wait
from agents.models import Conversation, Message
from agents.models.conversations import END_USER_MAX_CHARS
from agents.turns.quotas import budgets_admit
from agents.turns.services import MAX_MESSAGE_CHARS, turn_send
from agents.turns.services import conversation_create as turn_conversation_create
from agents.turns.tool_cards import ToolCard, card_steps, tool_cards
from agentsite.api_keys import Caller
from agentsite.db import db_async
from agentsite.models import ApiKey
from traces.models import Trace

router = Router(tags=["conversations"])
Scope = ApiKey.Scope
MESSAGE_COLUMNS = ("id", "uuid", "role", "text", "blocks", "outcome", "usage", "created_at", "conversation_id",
                   "trace__uuid", "parent_turn__uuid", "author__username")


class ConversationOut(Schema):
    id: str
    title: str
    agent: AgentRef
    owner: str | None = Field(description="The username of the person who started it.")
    model: str = Field(description="The model its turns use (the agent's, unless switched for it).")
    shared: bool
    archived: bool
    ephemeral: bool = Field(description="Made for one stateless request of /v1/chat/completions.")
    end_user: str | None = Field(description="The end user of the key's application it is for (the "
                                             "`user` or `X-Agentsite-End-User` it was started with).")
    created_at: datetime
    updated_at: datetime


class ConversationPage(Schema):
    data: list[ConversationOut]
    next_cursor: str | None


class ConversationIn(Schema):
    agent: str = Field(description="The agent's id or slug.")
    title: str = Field("", max_length=200)


# Every operation here takes the end user a call is for (agents.api.end_users), in the schema too.
END_USER_PARAM = {"parameters": [{
    "in": "header", "name": END_USER_HEADER, "required": False,
    "schema": {"type": "string", "maxLength": END_USER_MAX_CHARS},
    "description": "The end user of the key's application this call is for: only their conversations "
                   "and memory (required when the key says so)."}]}


class ConversationQuery(PageParams):
    include_ephemeral: bool = Field(False, description="Also list the conversations of stateless "
                                                       "/v1/chat/completions requests.")


class ToolCallOut(Schema):
    """A tool call an assistant message made, and how it went (what the chat's tool card shows)."""

    call_id: str = Field(description="The call's id; the tool message answering it names it too.")
    name: str = Field(description="The tool.")
    arguments: dict[str, Any] = Field(description="What the model called it with.")
    status: str = Field(description="ok, error, denied (a person said no), timeout (nobody decided in "
                                    "time), cancelled (the turn was stopped), waiting (for approval), "
                                    "running; unknown when its trace is gone.")
    result: str = Field(description="The start of what the tool returned (the whole of it is in the tool "
                                    "message's `tool_results`).")
    result_chars: int = Field(description="How long the whole result is.")
    error: str
    duration_ms: float | None
    needs_approval: bool = Field(description="Its tool's policy asked a person first.")
    decided_by: str | None = Field(description="Who approved or denied it.")


class ToolResultOut(Schema):
    """A tool's result, as a tool message carries it to the model."""

    call_id: str
    name: str
    output: str
    is_error: bool


class MessageOut(Schema):
    id: str
    role: str = Field(description="user, assistant, tool or system.")
    text: str = Field(description="The visible text (empty for a message that only calls tools, and "
                                  "for a tool message).")
    tool_calls: list[ToolCallOut] = Field(description="An assistant message's tool calls, with their "
                                                      "status and a summary of their results.")
    tool_results: list[ToolResultOut] = Field(description="A tool message's results.")
    outcome: str = Field(description="Empty for a whole answer; else length, refusal, filtered or interrupted.")
    trace: str | None = Field(description="The turn that stored it (for a user message, the turn answering it).")
    parent_turn: str | None = Field(description="For a user message: the turn it continues (its branch).")
    author: str | None
    usage: dict[str, Any] | None
    created_at: datetime


class MessagePage(Schema):
    data: list[MessageOut]
    next_cursor: str | None


class MessageIn(Schema):
    text: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARS)
    wait: bool = Field(False, description="Answer once the turn has ended (200), instead of at once (202).")
    timeout_s: float | None = Field(None, gt=0, description="With `wait`: the longest wait, at most the agent's "
                                                            "hard time limit (also the default).")
    client_id: str = Field("", max_length=64, description="Your id for this message: sending the same id again "
                                                          "returns the first send's turn instead of a new one.")


class SentOut(Schema):
    conversation: str
    message: MessageOut
    trace: TraceOut
    answer: str | None = Field(description="The answer, once the turn has completed.")
    resent: bool = Field(description="The message had been sent before with this client_id.")
    events_url: str = Field(description="Its live events, as server-sent events.")
    trace_url: str


def conversation_out(conversation: Conversation) -> dict[str, Any]:
    owner = conversation.created_by
    return {
        "id": str(conversation.uuid), "title": conversation.title, "agent": agent_ref(conversation.agent),
        "owner": owner.get_username() if owner else None,
        "model": conversation.model_override or conversation.agent.model, "shared": conversation.shared,
        "archived": conversation.archived, "ephemeral": conversation.ephemeral,
        "end_user": conversation.end_user or None,
        "created_at": conversation.created_at, "updated_at": conversation.updated_at,
    }


def _blocks(message: Message, kind: str) -> list[dict[str, Any]]:
    return [b for b in message.blocks or [] if isinstance(b, dict) and b.get("type") == kind]


def _tool_call_out(block: dict[str, Any], card: ToolCard | None) -> dict[str, Any]:
    arguments = block.get("input")
    return {
        "call_id": str(block.get("id") or ""), "name": str(block.get("name") or ""),
        "arguments": arguments if isinstance(arguments, dict) else {},
        "status": card.state if card else "unknown", "result": card.output if card else "",
        "result_chars": card.output_chars if card else 0, "error": card.error if card else "",
        "duration_ms": card.duration_ms if card else None,
        "needs_approval": card.needs_approval if card else False,
        "decided_by": (card.decided_by or None) if card else None,
    }


def _tool_result_out(block: dict[str, Any]) -> dict[str, Any]:
    output = block.get("output")
    return {"call_id": str(block.get("tool_use_id") or ""), "name": str(block.get("name") or ""),
            "output": output if isinstance(output, str) else json.dumps(output), "is_error": bool(block.get("is_error"))}


def message_cards(messages: list[Message]) -> dict[tuple[int, str], ToolCard]:
    """The tool cards of the calls ``messages`` made (``agents.turns.tool_cards``, as the chat
    reads them), by (trace id, call id): one query, however many there are."""
    traces = {m.trace_id: m.trace.uuid for m in messages
              if m.trace_id and m.role == Message.Role.ASSISTANT and _blocks(m, "tool_use")}
    if not traces:
        return {}
    steps, _ = card_steps(list(traces), arguments_chars=0)
    return tool_cards(steps, {}, traces)


def message_out(message: Message, cards: dict[tuple[int, str], ToolCard] | None = None) -> dict[str, Any]:
    """``cards``: the tool cards of its trace (``message_cards``), for its calls' status."""
    cards = cards or {}
    return {
        "id": str(message.uuid), "role": message.role, "text": message.text, "outcome": message.outcome,
        "tool_calls": [_tool_call_out(b, cards.get((message.trace_id, str(b.get("id") or ""))))
                       for b in _blocks(message, "tool_use")],
        "tool_results": [_tool_result_out(b) for b in _blocks(message, "tool_result")],
        "trace": str(message.trace.uuid) if message.trace else None,
        "parent_turn": str(message.parent_turn.uuid) if message.parent_turn else None,
        "author": message.author.get_username() if message.author else None,
        "usage": message.usage if isinstance(message.usage, dict) else None, "created_at": message.created_at,
    }


def _conversation(request: HttpRequest, caller: Caller, conversation_id: str) -> Conversation:
    """One conversation the key's person may see, and the request's end user's when it names one."""
    rows = end_user_conversations(Conversation.objects.select_related("agent", "created_by"),
                                  caller, request_end_user(request, caller))
    return conversation_get_or_404(caller.membership, rows, uuid=conversation_id,
                                   deleted_at__isnull=True)


def conversation_start(*, caller: Caller, agent_id: str, title: str, end_user: str = "") -> Conversation:
    """A conversation of the key's person with one of the team's agents, started through the
    key (the chat's rule: a team member, not a viewer), for ``end_user`` when one is named."""
    agent = agent_get_or_404(caller.team, agent_id)
    return turn_conversation_create(membership=caller.membership, agent=agent, title=title,
                                    api_key=caller.key, end_user=end_user)


@router.get("", response={200: ConversationPage, **errors(400)}, summary="List conversations", openapi_extra=END_USER_PARAM)
def conversation_list(request: HttpRequest, query: Query[ConversationQuery]) -> dict[str, Any]:
    """The conversations the key's person may see (their own, shared ones, and every one of the
    team for its admins), newest first; with `X-Agentsite-End-User`, that end user's only.
    Scope `chat`."""
    caller = scope_check(request, Scope.CHAT)
    rows = end_user_conversations(
        conversations_visible(caller.membership).filter(deleted_at__isnull=True)
        .select_related("agent", "created_by"), caller, request_end_user(request, caller))
    if not query.include_ephemeral:
        rows = rows.filter(ephemeral=False)
    page, next_cursor = paginate(rows, query)
    return {"data": [conversation_out(c) for c in page], "next_cursor": next_cursor}


@router.post("", response={201: ConversationOut, **errors(400, 404)}, summary="Start a conversation", openapi_extra=END_USER_PARAM)
def conversation_create(request: HttpRequest, body: ConversationIn) -> Status:
    """A new conversation with an agent of the team, for the end user `X-Agentsite-End-User`
    names (if any). Scope `chat`; not for a viewer."""
    caller = scope_check(request, Scope.CHAT)
    conversation = conversation_start(caller=caller, agent_id=body.agent, title=body.title,
                                      end_user=request_end_user(request, caller))
    return Status(201, conversation_out(conversation))


@router.get("/{conversation_id}", response={200: ConversationOut, **errors(400, 404)},
            summary="Read a conversation", openapi_extra=END_USER_PARAM)
def conversation_detail(request: HttpRequest, conversation_id: str) -> dict[str, Any]:
    """Scope `chat`. Another end user's conversation is a 404."""
    caller = scope_check(request, Scope.CHAT)
    return conversation_out(_conversation(request, caller, conversation_id))


@router.get("/{conversation_id}/messages", response={200: MessagePage, **errors(400, 404)},
            summary="List a conversation's messages", openapi_extra=END_USER_PARAM)
def message_list(request: HttpRequest, conversation_id: str, page: Query[PageParams]) -> dict[str, Any]:
    """Every message of the conversation, oldest first, on all its branches (an edited message
    or a regenerated answer is a branch: ``parent_turn`` and ``trace`` say where each one
    belongs). Scope `chat`."""
    caller = scope_check(request, Scope.CHAT)
    conversation = _conversation(request, caller, conversation_id)
    rows = (Message.objects.filter(conversation=conversation)
            .select_related("trace", "parent_turn", "author").only(*MESSAGE_COLUMNS))
    found, next_cursor = paginate(rows, page, newest_first=False)
    cards = message_cards(found)
    return {"data": [message_out(m, cards) for m in found], "next_cursor": next_cursor}


def _send(request: HttpRequest, conversation_id: str, body: MessageIn) -> tuple[Trace, bool, float]:
    """Queue the turn; returns its trace, whether it was a resend, and how long to wait for it."""
    caller = scope_check(request, Scope.CHAT)
    conversation = _conversation(request, caller, conversation_id)
    # Who may send comes before the budgets: a viewer is told so, not that a budget is spent.
    acting = conversation_act_check(caller.membership, conversation, "send messages in it")
    budgets_admit(team_id=caller.team.pk, user_id=caller.user.pk, api_key_id=caller.key.pk)
    sent = turn_send(acting=acting, text=body.text,
                     client_id=body.client_id, api_key=caller.key,
                     **request_trace_context(request))
    hard = conversation.agent.hard_time_limit_s
    return sent.trace, sent.resent, min(body.timeout_s, hard) if body.timeout_s else hard


def _sent_out(request: HttpRequest, trace_pk: int, resent: bool) -> dict[str, Any]:
    trace = (Trace.objects.select_related("agent", "conversation", "user", "user_message",
                                          "user_message__trace", "user_message__parent_turn",
                                          "user_message__author").get(pk=trace_pk))
    return {
        "conversation": str(trace.conversation.uuid), "message": message_out(trace.user_message),
        "trace": trace_out(trace), "answer": trace.answer if trace.status == Trace.Status.COMPLETED else None,
        "resent": resent,
        "events_url": request.build_absolute_uri(reverse("api:rest_trace_events", args=[trace.uuid.hex])),
        "trace_url": request.build_absolute_uri(reverse("api:rest_trace_detail", args=[trace.uuid.hex])),
    }


@router.post("/{conversation_id}/messages", response={200: SentOut, 202: SentOut, **errors(400, 404, 429)},
             summary="Send a message", openapi_extra=END_USER_PARAM)
async def message_send(request: HttpRequest, conversation_id: str, body: MessageIn) -> Status:
    """Send a message to the conversation's agent: its turn is queued for a worker. Without
    ``wait`` the answer is 202 at once, with the turn's trace (follow it at ``events_url``).
    With ``wait`` it is 200 once the turn has ended, with the answer; a turn still running
    when the wait is over is a 202 as without it. Scope `chat`; the conversation's owner or a
    team admin, never a viewer (403). Rate limits and blocking budgets answer 429."""
    trace, resent, wait_s = await db_async(_send)(request, conversation_id, body)
    if body.wait:
        try:
            await turn_wait(trace, timeout_s=wait_s)
        except TurnTimeout:
            pass
    out = await db_async(_sent_out)(request, trace.pk, resent)
    ended = out["trace"]["status"] not in Trace.ACTIVE
    return Status(200 if body.wait and ended else 202, out)
