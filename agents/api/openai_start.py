"""Starting a turn for ``POST /v1/chat/completions``: the request checked and admitted
(``chat_prepare``: the key's scope, the agent and model, the messages, the bound conversation,
the budgets and rate limits), then stored and queued (``chat_commit``: its conversation, message
and trace, in one transaction). The answer itself, whole or streamed, is ``agents.api.openai``'s.
"""

from __future__ import annotations

import copy
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import HttpRequest

from agents.access import Acting, chat_check, conversation_act_check, conversation_acting_or_404
from agents.api.auth import scope_check
from agents.api.end_users import end_user_clean, end_user_conversations
from agents.api.errors import ApiError
from agents.api.openai_params import chat_overrides, fields_sent
from agents.api.openai_schemas import ChatCompletionIn, ChatMessageIn
from agents.api.trace_context import request_trace_context
from agents.models import Agent, Conversation, Message
from agents.runtime.history import estimate_tokens
from agents.team_config import kept, team_config_read
from agents.turns.quotas import budgets_admit, turn_admit
from agents.turns.services import (
    conversation_check_open,
    conversation_create,
    message_text_clean,
    turn_cancel,
    turn_send,
)
from agentsite.api_keys import Caller
from agentsite.db import commit_unwaited
from agentsite.models import ApiKey, Membership
from traces.models import Trace

Scope = ApiKey.Scope
CONVERSATION_HEADER = "X-Agentsite-Conversation"


@dataclass
class Prepared:
    """A request checked and admitted (its rate-limit places taken), not yet written: its trace
    and conversation ids are chosen, so the answer's headers can go before the turn is stored."""

    caller: Caller
    agent: Agent
    override: str
    history: list[tuple[str, str]]
    text: str
    # A bound conversation, as the access rules found the key's person may send there; None:
    # a new ephemeral one.
    acting: Acting | None
    conversation_uuid: uuid.UUID
    trace_uuid: uuid.UUID
    quota_keys: list[str]
    model: str
    # The caller's W3C trace context (``traceparent``, ``tracestate``), when valid.
    trace_context: dict[str, str] = field(default_factory=dict)
    # The end user of the key's application it is for (``user``; ``agents.api.end_users``).
    end_user: str = ""
    # The request's model parameters over the agent's settings (``openai_params``).
    overrides: dict[str, Any] = field(default_factory=dict)
    # The turn of ``conversation`` it continues (None: the newest), and what its trace keeps.
    parent: Trace | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Started:
    trace: Trace
    conversation: Conversation
    agent: Agent
    model: str


def agent_for(team: Any, name: str) -> tuple[Agent, str]:
    slug, _, model = (name or "").strip().partition("/")
    found = kept(team.pk, ("agent by slug", slug),
                 lambda: Agent.objects.select_related("provider").filter(team=team, slug=slug).first())
    agent = copy.copy(found)  # kept for every request of the process: this one's own copy
    if agent is None:
        raise ApiError(404, f"The model {name!r} does not exist: no agent of this team has the slug "
                            f"{slug!r}. GET /v1/models lists the agents this key may call.",
                       param="model", code="model_not_found")
    if not model:
        return agent, ""
    choices = agent.model_choices()
    chosen = next((m for m in choices if m.lower() == model.lower()), None)
    if chosen is None:
        raise ApiError(400, f"{model!r} is not one of the models the agent {agent.slug!r} may use "
                            f"({', '.join(choices)}).", param="model", code="model_not_allowed")
    return agent, "" if chosen == agent.model else chosen


def _text_of(message: ChatMessageIn, index: int) -> str:
    content = message.content
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for part in content:
        if part.type != "text":
            raise ApiError(400, f"Content parts of type {part.type!r} are not accepted; send text.",
                           param=f"messages[{index}].content", code="unsupported_content")
        texts.append(part.text or "")
    return "\n".join(texts)


def _conversation_of(body: ChatCompletionIn) -> tuple[list[tuple[str, str]], str]:
    """The request's history as (role, text) and its last message, which must be the person's.
    System and developer messages become the caller's instructions at the head of the first
    user message (the agent's own system prompt stays the system prompt)."""
    if body.n not in (None, 1):
        raise ApiError(400, "Only one choice per request is supported (n = 1).", param="n")
    if body.tools:
        raise ApiError(400, "The agent's own tools run on the server; a request cannot add tools "
                            "of its own. Configure tools on the agent instead.", param="tools",
                       code="client_tools_unsupported")
    instructions: list[str] = []
    turns: list[tuple[str, str]] = []
    for index, message in enumerate(body.messages):
        if message.role == "tool" or message.tool_calls:
            raise ApiError(400, "Tool calls and tool results cannot be sent: the agent runs its own "
                                "tools on the server.", param=f"messages[{index}]",
                           code="client_tools_unsupported")
        text = _text_of(message, index)
        if message.role in ("system", "developer"):
            instructions.append(text)
        else:
            turns.append((message.role, text))
    return history_and_last(instructions, turns, param="messages")


def history_and_last(instructions: list[str], turns: list[tuple[str, str]], *,
                     param: str) -> tuple[list[tuple[str, str]], str]:
    """``turns`` (role, text) as a history and the last message, which must be the person's;
    the caller's ``instructions`` go at the head of the first user message (the agent's own
    system prompt stays the system prompt)."""
    if not turns or turns[-1][0] != "user":
        raise ApiError(400, "The last message must be the person's (role 'user').",
                       param=param, code="last_message_not_user")
    if instructions:
        head = "Instructions from the caller:\n" + "\n\n".join(instructions)
        first = next(i for i, (role, _) in enumerate(turns) if role == "user")
        role, text = turns[first]
        turns[first] = (role, f"{head}\n\n{text}")
    *history, (_, last) = turns
    return history, last


def _blocks(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


def chat_prepare(request: HttpRequest, body: ChatCompletionIn) -> Prepared:
    """Everything that can refuse the request, before anything is written: the key's scope, the
    agent and model, the messages, the bound conversation (seen and open to this person), the
    budgets, and the rate limits (whose places this takes, under the turn's id to be)."""
    caller = scope_check(request, Scope.CHAT)
    with team_config_read(caller.team.pk):  # the agent and budgets as this process has them
        agent, override = agent_for(caller.team, body.model)
        history, last = _conversation_of(body)
        overrides = chat_overrides(body, agent, fields_sent(request.body))
        chat_check(caller.membership)
        end_user = end_user_clean(body.user, param="user", caller=caller)
        bound = request.headers.get(CONVERSATION_HEADER, "").strip()
        acting = None
        if bound:  # with ``user``, only that end user's conversation (any other is a 404)
            acting = conversation_for(caller, agent, end_user, uuid=bound)
            history = []
        return turn_prepare(request, caller, agent=agent, override=override, model=body.model,
                            history=history, last=last, acting=acting,
                            end_user=end_user, overrides=overrides)


def conversation_for(caller: Caller, agent: Agent, end_user: str, **lookup: Any) -> Acting:
    """The stored conversation a request continues (``lookup``: its ``uuid``, or ``pk``): one
    the key's person may see and send in, the request's end user's when it names one (any other
    is a 404), with ``agent``."""
    acting = conversation_acting_or_404(
        caller.membership, "send messages in it",
        end_user_conversations(Conversation.objects.all(), caller, end_user), **lookup)
    conversation = acting.conversation
    if conversation.agent_id != agent.pk:
        raise ApiError(400, f"This conversation is with another agent; send model "
                            f"{conversation.agent.slug!r}.", param="model", code="agent_mismatch")
    return acting


def turn_prepare(request: HttpRequest, caller: Caller, *, agent: Agent, override: str, model: str,
                 history: list[tuple[str, str]], last: str, acting: Acting | None,
                 end_user: str, overrides: dict[str, Any], parent: Trace | None = None,
                 meta: dict[str, Any] | None = None) -> Prepared:
    """A turn's request, read from either protocol, checked and admitted: the message's text,
    the conversation it continues (open), the budgets and the rate limits."""
    try:
        last = message_text_clean(last)
        if acting is not None:
            conversation_check_open(acting.conversation)
    except ValidationError as exc:
        raise ApiError(400, " ".join(exc.messages), param="messages") from exc
    budgets_admit(team_id=caller.team.pk, user_id=caller.user.pk, api_key_id=caller.key.pk)
    sizes = [{"role": "system", "content": agent.system_prompt},
             *({"role": r, "content": t} for r, t in history), {"role": "user", "content": last}]
    trace_uuid = uuid.uuid4()
    quota_keys = turn_admit(membership=caller.membership, api_key=caller.key,
                            request_id=trace_uuid.hex, tokens=estimate_tokens(sizes),
                            end_user=end_user)
    return Prepared(caller, agent, override, history, last, acting,
                    acting.conversation.uuid if acting is not None else uuid.uuid4(), trace_uuid,
                    quota_keys, model, trace_context=request_trace_context(request),
                    end_user=end_user, overrides=overrides, parent=parent, meta=meta or {})


def chat_commit(prepared: Prepared) -> Started:
    """Store the request's conversation (a new ephemeral one holds the history it sent) and its
    message, and queue the turn (``turn_send``), in one transaction."""
    caller, acting = prepared.caller, prepared.acting
    new = acting is None
    with transaction.atomic():
        # Its client hears of the turn from its answer or its stream, never from this commit;
        # the turn's end waits for the disk, and so flushes this first.
        commit_unwaited()
        if acting is None:
            conversation = conversation_create(
                membership=caller.membership, agent=prepared.agent,
                title=" ".join(prepared.text.split())[:80], api_key=caller.key, ephemeral=True,
                conversation_uuid=prepared.conversation_uuid, end_user=prepared.end_user)
            Message.objects.bulk_create([
                Message(conversation=conversation, role=role, blocks=_blocks(text), text=text,
                        author=caller.user if role == "user" else None)
                for role, text in prepared.history])
            acting = conversation_act_check(caller.membership, conversation, "send messages in it")
        conversation = acting.conversation
        if prepared.override != conversation.model_override and (
                prepared.override or conversation.ephemeral):
            Conversation.objects.filter(pk=conversation.pk).update(model_override=prepared.override)
            conversation.model_override = prepared.override
        try:
            trace = turn_send(acting=acting, text=prepared.text, api_key=caller.key, trace_uuid=prepared.trace_uuid,
                              quota_keys=prepared.quota_keys, agent=prepared.agent,
                              new_conversation=new, overrides=prepared.overrides,
                              meta=prepared.meta,
                              **({"parent": prepared.parent} if prepared.parent else {}),
                              **prepared.trace_context).trace
        except ValidationError as exc:
            raise ApiError(400, " ".join(exc.messages), param="messages") from exc
    return Started(trace, conversation, prepared.agent, prepared.model)


def chat_start(request: HttpRequest, body: ChatCompletionIn) -> Started:
    """``chat_prepare`` then ``chat_commit``."""
    return chat_prepare_commit(request, body)[1]


def chat_prepare_commit(request: HttpRequest, body: ChatCompletionIn) -> tuple[Prepared, Started]:
    """``chat_prepare`` then ``chat_commit``, with what each gave."""
    prepared = chat_prepare(request, body)
    return prepared, chat_commit(prepared)


def turn_stop(trace: Trace, membership: Membership) -> None:
    """Stop the request's turn when it is still queued or running (the client left, or the wait
    ran out)."""
    trace = Trace.objects.select_related("conversation").get(pk=trace.pk)
    if trace.status in Trace.ACTIVE:
        turn_cancel(trace=trace, membership=membership)
