"""A turn's actions: send a message (start a turn), regenerate an answer, edit and resend a
message, stop a turn or a conversation's turns, decide on a tool call that waits for approval.

Who may act is checked here: the conversation's owner or a team admin, never a viewer
(``agents.access``); views resolve the objects through the access helpers first, so a
conversation the person may not see (another team's, or a teammate's private one) is a 404
before this runs.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from agents.access import Acting, chat_check, conversation_act_check
from agents.models import Agent, Attachment, Conversation, Message
from agents.runtime.history import estimate_tokens
from agents.runtime.messages import Message as RuntimeMessage
from agents.turns.announce import announcements
from agents.turns.attachments import attachments_for_message, image_block
from agents.turns.lifecycle import (
    conversation_lock,
    trace_cancel_queued,
    trace_enqueue,
    trace_request_cancel,
)
from agents.turns.providers import TurnSetupError, runtime_provider
from agents.turns.quotas import turn_admit
from agents.turns.selectors import (
    active_traces_read,
    conversation_active_traces,
    newest_turn_read,
    sent_message_read,
)
from agents.turns.windows import ESTIMATE_MARGIN, agent_window
from agentsite.db.returning import create, save_fields
from agentsite.models import ApiKey, Membership
from traces.export.ids import parse_traceparent
from traces.models import Trace
from traces.record.live import announce_sync

MAX_MESSAGE_CHARS = 32_000
INTERRUPT_REASON = "interrupted by a new message"
TRACESTATE_MAX_CHARS = 512


def conversation_create(*, membership: Membership, agent: Agent, title: str = "",
                        api_key: ApiKey | None = None, ephemeral: bool = False,
                        conversation_uuid: uuid.UUID | None = None, end_user: str = "") -> Conversation:
    """A new conversation of ``membership``'s person with one of its team's agents (a member,
    not a viewer). ``api_key``: started through the API with that key; ``ephemeral``: a
    stateless API request's record, left out of the chat's lists; ``end_user``: for that end
    user of the key's application (already checked by the API), whose memory its turns use."""
    chat_check(membership)
    if agent.team_id != membership.team_id:
        raise PermissionDenied("That agent belongs to another team.")
    fields = {"uuid": conversation_uuid} if conversation_uuid is not None else {}
    return create(Conversation, team_id=membership.team_id, agent=agent,
                  created_by_id=membership.user_id, api_key=api_key,
                  ephemeral=ephemeral, title=(title or "").strip()[:200],
                  end_user=end_user, **fields)


def message_text_clean(text: str, *, images: int = 0) -> str:
    """The message as it is stored, or a ValidationError saying what is wrong with it."""
    text = (text or "").strip()
    if not text and images:
        return "(image attached)" if images == 1 else f"({images} images attached)"
    if not text:
        raise ValidationError("Write a message before sending it.")
    if len(text) > MAX_MESSAGE_CHARS:
        raise ValidationError(
            f"Your message is {len(text):,} characters long; the limit is {MAX_MESSAGE_CHARS:,}. "
            "Shorten it or send it in parts.")
    return text


# A message estimated below this fits every model's window: it is not looked at further.
FITS_ANY_WINDOW_TOKENS = 1_000


def message_fits_check(agent: Agent, conversation: Conversation, text: str) -> None:
    """A ValidationError, before anything is stored, for a message that cannot fit the context
    window of the conversation's model beside the agent's system prompt and the room kept for
    the answer, however much of the history is left out: sent, it would fail this turn and
    every later one (the history keeps it). It says how long the message may be."""
    tokens = estimate_tokens([{"role": "user", "content": text}])
    if tokens < FITS_ANY_WINDOW_TOKENS:
        return
    model = conversation.model_override or agent.model
    window, reserve = agent_window(agent, model)
    room = window - reserve - estimate_tokens([{"role": "system", "content": agent.system_prompt}])
    if tokens * ESTIMATE_MARGIN <= room:
        return
    fits = max(int(room / ESTIMATE_MARGIN), 0)
    raise ValidationError(
        f"Your message is about {tokens:,} tokens long; {model} reads at most {window:,} tokens "
        f"at once, answer included, so a message here can be about {fits:,} tokens "
        f"(some {fits * 4:,} characters). Shorten it or send it in parts.")


def trace_context_meta(traceparent: str = "", tracestate: str = "") -> dict[str, str]:
    """The W3C trace context a turn was sent with, as its trace keeps it in ``meta``:
    ``traceparent`` when it is valid (``traces.export.ids.parse_traceparent``), with
    ``tracestate`` when one is given, of printable ASCII and at most ``TRACESTATE_MAX_CHARS``
    long. An invalid ``traceparent`` is ignored, its ``tracestate`` with it, as the W3C
    recommendation says: never an error."""
    traceparent = (traceparent or "").strip()
    if parse_traceparent(traceparent) is None:
        return {}
    meta = {"traceparent": traceparent}
    tracestate = (tracestate or "").strip()
    if tracestate and len(tracestate) <= TRACESTATE_MAX_CHARS and all(
            " " <= c <= "~" for c in tracestate):
        meta["tracestate"] = tracestate
    return meta


class _Latest:
    """``turn_start(parent=LATEST)``: continue the conversation's newest turn."""


LATEST: Any = _Latest()


@dataclass(frozen=True)
class SentTurn:
    """What sending a message started: its turn's trace, and whether the message had been sent
    before (the same ``client_id``), so that this is the first send's turn, not a new one."""

    trace: Trace
    resent: bool = False


def turn_start(*, conversation: Conversation, membership: Membership, text: str,
               parent: Trace | None | Any = LATEST, client_id: str = "") -> Trace:
    """``turn_send``'s trace, for a ``membership`` and ``conversation`` not checked yet (checked
    here: PermissionDenied unless it may send there)."""
    acting = conversation_act_check(membership, conversation, "send messages in it")
    return turn_send(acting=acting, text=text, parent=parent, client_id=client_id).trace


def turn_send(*, acting: Acting, text: str,
              parent: Trace | None | Any = LATEST, client_id: str = "",
              attachments: Sequence[str] = (), api_key: ApiKey | None = None,
              prompt_tokens: int | None = None, trace_uuid: uuid.UUID | None = None,
              quota_keys: list[str] | None = None, traceparent: str = "", tracestate: str = "",
              agent: Agent | None = None, new_conversation: bool = False,
              overrides: dict[str, Any] | None = None,
              meta: dict[str, Any] | None = None) -> SentTurn:
    """Store the user's message and a queued trace for it, in one transaction; the turn task is
    sent once it commits.

    ``parent`` is the turn the message continues: the branch the person is looking at (None
    starts a branch from the beginning; by default the conversation's newest turn).
    ``client_id`` is the browser's id for the message: sending the same id again (a resend
    after a dropped connection) returns the first turn instead of starting another.

    One turn runs per conversation at a time: while another is queued or running, the new trace
    waits and is sent when the earlier ones end. If the agent interrupts on a new message, the
    earlier turns are stopped instead and the new one goes next.

    ``attachments``: public ids of images the person uploaded for this message; a model that
    cannot read images refuses them here, before anything is stored or sent.

    The person's and the key's (``api_key``) rate limits are taken here (``QuotaExceeded``);
    ``prompt_tokens`` is the request's size for the tokens-per-minute limits (by default, the
    message's estimate). A caller that took them already (``turn_admit``, with ``trace_uuid``
    as the request's id) passes the windows it holds as ``quota_keys``.

    ``traceparent`` and ``tracestate``: the W3C trace context of the request that sent the
    message (an API call's headers); kept in the new trace's ``meta`` when valid, so the turn's
    spans join the caller's trace (``trace_context_meta``; an invalid one is ignored).

    ``overrides``: the request's own model parameters for this turn (``max_tokens``,
    ``temperature``, ``top_p``, ``stop`` …, as ``agents.runtime.providers.base.REQUEST_PARAMS``
    name them), checked by the caller; kept in the trace's ``meta`` and merged over the agent's
    settings when the turn is built (``agents.turns.builder.turn_overrides_apply``).
    ``meta``: more that the new trace keeps in its ``meta`` (the Responses API's own fields).

    ``acting``: the sender's membership (as the request, socket or API key resolved it) and the
    conversation, as the access rules found that it may send there (``agents.access``); neither
    is looked up or checked again. Nor is what else the caller resolved already: ``agent`` (the
    conversation's, with its provider), and ``new_conversation`` (the conversation was created
    in the caller's transaction: nothing of it runs and there is no earlier turn to continue)."""
    conversation, membership = acting.conversation, acting.membership
    conversation_check_open(conversation)
    client_id = (client_id or "").strip()[:64]
    if agent is None or agent.pk != conversation.agent_id:
        agent = Agent.objects.select_related("provider").get(pk=conversation.agent_id)
    images = attachments_for_message(conversation=conversation, membership=membership, ids=attachments) if attachments else []
    text = message_text_clean(text, images=len(images))
    if images:
        _check_vision(conversation, agent, len(images))
    message_fits_check(agent, conversation, text)
    if client_id:
        sent = _sent_before(conversation, client_id)
        if sent is not None:
            return SentTurn(sent, resent=True)
    trace_uuid = trace_uuid or uuid.uuid4()
    if quota_keys is None:
        if prompt_tokens is None:
            prompt_tokens = estimate_tokens([{"role": "user", "content": text}])
        quota_keys = turn_admit(membership=membership, api_key=api_key, request_id=trace_uuid.hex,
                                end_user=conversation.end_user,
                                tokens=prompt_tokens)
    # Without a savepoint of its own inside a caller's transaction (the API's, which stores the
    # conversation first): a failure here fails the caller's transaction as a whole, which its
    # caller lets go; a savepoint cost two statements more inside the write lock.
    with transaction.atomic(savepoint=False):
        if not new_conversation:  # one created in this transaction is the caller's alone
            conversation_lock(conversation.pk)
        if client_id:
            sent = _sent_before(conversation, client_id)
            if sent is not None:
                return SentTurn(sent, resent=True)
        parent_turn = None
        if parent is LATEST and not new_conversation:
            parent_turn = newest_turn_read.first(conversation.pk)
        elif parent is not LATEST and _parent_in(conversation, parent) is not None:
            parent_turn = parent
        blocks = RuntimeMessage.user(text).to_dict()["blocks"] + [image_block(a).to_dict() for a in images]
        message = create(
            Message, conversation=conversation, role=Message.Role.USER, blocks=blocks, text=text, author_id=membership.user_id,
            parent_turn=parent_turn, client_id=client_id)
        if images:
            Attachment.objects.filter(pk__in=[a.pk for a in images]).update(message=message)
        trace_meta: dict[str, Any] = {**trace_context_meta(traceparent, tracestate), **(meta or {})}
        if overrides:
            trace_meta["overrides"] = dict(overrides)
        trace = _turn_create(conversation=conversation, agent=agent, user_id=membership.user_id,
                             message=message, new_conversation=new_conversation, uuid=trace_uuid, api_key=api_key,
                             quota_keys=quota_keys, **({"meta": trace_meta} if trace_meta else {}))
        message.trace = trace
        save_fields(message, ["trace"])
        if not conversation.title:
            conversation.title = _title_from(text)
            Conversation.objects.filter(pk=conversation.pk).update(title=conversation.title)
        message.conversation = conversation
        if not conversation.ephemeral:  # a stateless API request's conversation has no viewers
            transaction.on_commit(lambda: announce_sync(announcements().message, message))
    return SentTurn(trace)


def _check_vision(conversation: Conversation, agent: Agent, count: int) -> None:
    """ZeroClaw's capability check, before any request: the model that answers here must read
    images."""
    model = conversation.model_override or agent.model
    try:
        sees = runtime_provider(agent.provider).capabilities_for(model).vision
    except TurnSetupError:
        return  # the turn reports the provider's problem itself
    if not sees:
        what = "the image" if count == 1 else f"the {count} images"
        raise ValidationError(f"{model} cannot read images. Remove {what}, or switch this "
                              "conversation to a model that supports vision (the model menu, or "
                              "/model); an admin can say a model reads images in its provider's "
                              "settings.")


def conversation_check_open(conversation: Conversation) -> None:
    """A ValidationError when the conversation takes no messages (deleted, archived)."""
    if conversation.deleted_at is not None:
        raise ValidationError("This conversation was deleted.")
    if conversation.archived:
        raise ValidationError("This conversation is archived. Unarchive it, or start a new one "
                              "to keep chatting.")


def _sent_before(conversation: Conversation, client_id: str) -> Trace | None:
    """The first turn of the message the browser sent before with this id. Almost every send is
    new, so the message is looked for first in a query of one column; the turn only when it was
    sent before. (Asking for the trace with its message, two tables' every column, cost 0.75 ms
    of CPU in Django's compiler each time, a send asks twice, and SQLite answers in 0.02.)"""
    message_id = sent_message_read.first(conversation.pk, client_id)
    if message_id is None:
        return None
    return (Trace.objects.filter(user_message_id=message_id).select_related("user_message")
            .order_by("id").first())


def _parent_in(conversation: Conversation, parent: Trace | None) -> int | None:
    if parent is None:
        return None
    if parent.conversation_id != conversation.pk:
        raise ValidationError("That turn belongs to another conversation.")
    return parent.pk


def _title_from(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= 80 else line[:79].rstrip() + "…"


def _turn_create(*, conversation: Conversation, agent: Agent, user_id: int, message: Message,
                 new_conversation: bool = False, **fields: Any) -> Trace:
    """A queued trace answering ``message``: sent now when nothing else of the conversation is
    in flight, else queued behind it (or, when the agent says so, interrupting it). Call inside
    a transaction that holds the conversation's lock. ``new_conversation``: the conversation
    was created in this transaction (nothing of it is in flight)."""
    now = timezone.now()
    earlier = [] if new_conversation else active_traces_read(conversation.pk)
    trace = create(
        Trace, team_id=conversation.team_id, conversation=conversation, agent=agent,
        agent_version=agent.version, user_id=user_id, user_message=message,
        status=Trace.Status.QUEUED, enqueued_at=None if earlier else now, **fields)
    trace.user_message = message
    if not new_conversation:
        Conversation.objects.filter(pk=conversation.pk).update(updated_at=now)
    if not earlier:
        trace_enqueue(trace=trace, now=now, marked=True)
    elif agent.interrupt_on_new_message:
        for older in earlier:
            if not trace_cancel_queued(trace=older, reason=INTERRUPT_REASON, now=now):
                trace_request_cancel(trace=older, reason=INTERRUPT_REASON, now=now)
    return trace


def turn_regenerate(*, conversation: Conversation, trace: Trace, membership: Membership) -> Trace:
    """Answer the user message of ``trace`` again, as a new branch beside that answer (which
    stays reachable)."""
    conversation_act_check(membership, conversation, "regenerate its answers")
    conversation_check_open(conversation)
    if trace.conversation_id != conversation.pk or trace.user_message_id is None:
        raise ValidationError("That answer cannot be regenerated.")
    if trace.is_active:
        raise ValidationError("This answer is still being written. Stop it first, or wait for it.")
    agent = Agent.objects.get(pk=conversation.agent_id)
    with transaction.atomic():
        conversation_lock(conversation.pk)
        message = Message.objects.get(pk=trace.user_message_id)
        return _turn_create(conversation=conversation, agent=agent, user_id=membership.user_id,
                            message=message)


def turn_edit(*, conversation: Conversation, message: Message, membership: Membership,
              text: str) -> Trace:
    """Send an edited version of an earlier user message: a new branch from the point where
    ``message`` was sent. The original and everything after it stay reachable."""
    conversation_act_check(membership, conversation, "edit its messages")
    text = message_text_clean(text)
    conversation_check_open(conversation)
    if message.conversation_id != conversation.pk or message.role != Message.Role.USER:
        raise ValidationError("Only the messages sent to the agent in this conversation can be "
                              "edited, not its answers.")
    agent = Agent.objects.get(pk=conversation.agent_id)
    with transaction.atomic():
        conversation_lock(conversation.pk)
        edited = Message.objects.create(
            conversation=conversation, role=Message.Role.USER,
            blocks=RuntimeMessage.user(text).to_dict()["blocks"], text=text, author_id=membership.user_id,
            parent_turn_id=message.parent_turn_id)
        trace = _turn_create(conversation=conversation, agent=agent, user_id=membership.user_id,
                             message=edited)
        edited.trace = trace
        edited.save(update_fields=["trace"])
        edited.conversation = conversation
        transaction.on_commit(lambda: announce_sync(announcements().message, edited))
    return trace


def conversation_stop(*, conversation: Conversation, membership: Membership) -> int:
    """Stop every queued or running turn of the conversation; how many there were."""
    conversation_act_check(membership, conversation, "stop its turns")
    stopped = 0
    for trace in conversation_active_traces(conversation=conversation):
        _cancel(trace, membership)
        stopped += 1
    return stopped


def turn_cancel(*, trace: Trace, membership: Membership) -> Trace:
    """Stop a turn: a queued one ends ``cancelled`` at once; a running one is signalled and its
    worker ends it. Stopping a turn that has ended does nothing."""
    conversation_act_check(membership, trace.conversation, "stop its turns")
    _cancel(trace, membership)
    trace.refresh_from_db()
    return trace


def _cancel(trace: Trace, membership: Membership) -> None:
    reason = f"Cancelled by {membership.user.get_username()}"
    if not trace_cancel_queued(trace=trace, reason=reason):
        trace_request_cancel(trace=trace, reason=reason)
