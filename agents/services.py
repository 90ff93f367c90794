"""Actions on conversations and turns: start a conversation, send a message (start a turn),
stop a turn, decide on a tool call that waits for approval. And the configuration actions the
admin calls: save a provider (its key encrypted), test its connection, save an agent keeping a
version of every change, compare and revert versions.

Who may act is checked here (a team member who can chat); views resolve the objects through
the team-scoped access helpers first, so another team's object is a 404 before this runs.
"""

from __future__ import annotations

import asyncio
import copy
import difflib
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from typing import Any

import httpx
from asgiref.sync import async_to_sync
from django.core.exceptions import FieldDoesNotExist, PermissionDenied, ValidationError
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models, transaction
from django.utils import timezone

from agents.runtime.commands import HELP_TEXT, CommandName, parse_command, unknown_command_reply
from agents.runtime.messages import Message as RuntimeMessage
from agents.runtime.providers import ChatRequest, ErrorKind, ProviderError
from agentsite.access import membership_for
from agentsite.audit import audit_record
from agentsite.audit import snapshot as audit_snapshot
from agentsite.crypto import SecretUnreadable, decrypt, encrypt
from agentsite.models import AuditEvent, Membership, Team
from traces import live
from traces.models import Trace
from traces.services import (
    announce_sync,
    conversation_lock,
    trace_cancel_queued,
    trace_enqueue,
    trace_request_cancel,
)

from .builder import TurnSetupError, runtime_provider
from .models import Agent, AgentVersion, Conversation, Message, Provider, Tool
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


class _Latest:
    """``turn_start(parent=LATEST)``: continue the conversation's newest turn."""


LATEST: Any = _Latest()


def turn_start(*, conversation: Conversation, user: Any, text: str, parent: Trace | None | Any = LATEST,
               client_id: str = "") -> Trace:
    """Store the user's message and a queued trace for it, in one transaction; the turn task is
    sent once it commits.

    ``parent`` is the turn the message continues: the branch the person is looking at (None
    starts a branch from the beginning; by default the conversation's newest turn).
    ``client_id`` is the browser's id for the message: sending the same id again (a resend
    after a dropped connection) returns the first turn instead of starting another.

    One turn runs per conversation at a time: while another is queued or running, the new trace
    waits and is sent when the earlier ones end. If the agent interrupts on a new message, the
    earlier turns are stopped instead and the new one goes next."""
    _chat_membership(user, conversation.team_id)
    text = _clean_text(text)
    _check_open(conversation)
    client_id = (client_id or "").strip()[:64]
    agent = Agent.objects.get(pk=conversation.agent_id)
    with transaction.atomic():
        conversation_lock(conversation.pk)
        if client_id:
            sent = _sent_before(conversation, client_id)
            if sent is not None:
                return sent
        if parent is LATEST:
            parent_id = (Trace.objects.filter(conversation_id=conversation.pk)
                         .order_by("-id").values_list("id", flat=True).first())
        else:
            parent_id = _parent_in(conversation, parent)
        message = Message.objects.create(
            conversation=conversation, role=Message.Role.USER,
            blocks=RuntimeMessage.user(text).to_dict()["blocks"], text=text, author=user,
            parent_turn_id=parent_id, client_id=client_id)
        trace = _turn_create(conversation=conversation, agent=agent, user=user, message=message)
        message.trace = trace
        message.save(update_fields=["trace"])
        if not conversation.title:
            conversation.title = _title_from(text)
            Conversation.objects.filter(pk=conversation.pk).update(title=conversation.title)
        message.conversation = conversation
        transaction.on_commit(lambda: announce_sync(live.message_announcement, message))
    return trace


def _check_open(conversation: Conversation) -> None:
    if conversation.deleted_at is not None:
        raise ValidationError("This conversation was deleted.")
    if conversation.archived:
        raise ValidationError("This conversation is archived. Unarchive it, or start a new one "
                              "to keep chatting.")


def _sent_before(conversation: Conversation, client_id: str) -> Trace | None:
    message = Message.objects.filter(conversation_id=conversation.pk, client_id=client_id).first()
    if message is None:
        return None
    trace = Trace.objects.filter(user_message=message).order_by("id").first()
    if trace is not None:
        trace.user_message = message
        trace.resent = True
    return trace


def _parent_in(conversation: Conversation, parent: Trace | None) -> int | None:
    if parent is None:
        return None
    if parent.conversation_id != conversation.pk:
        raise ValidationError("That turn belongs to another conversation.")
    return parent.pk


def _title_from(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= 80 else line[:79].rstrip() + "…"


def _turn_create(*, conversation: Conversation, agent: Agent, user: Any, message: Message) -> Trace:
    """A queued trace answering ``message``: sent now when nothing else of the conversation is
    in flight, else queued behind it (or, when the agent says so, interrupting it). Call inside
    a transaction that holds the conversation's lock."""
    now = timezone.now()
    earlier = list(conversation_active_traces(conversation=conversation))
    trace = Trace.objects.create(
        team_id=conversation.team_id, conversation=conversation, agent=agent,
        agent_version=agent.version, user=user, user_message=message,
        status=Trace.Status.QUEUED)
    trace.user_message = message
    Conversation.objects.filter(pk=conversation.pk).update(updated_at=now)
    if not earlier:
        trace_enqueue(trace=trace, now=now)
    elif agent.interrupt_on_new_message:
        for older in earlier:
            if not trace_cancel_queued(trace=older, reason=INTERRUPT_REASON, now=now):
                trace_request_cancel(trace=older, reason=INTERRUPT_REASON, now=now)
    return trace


def turn_regenerate(*, conversation: Conversation, trace: Trace, user: Any) -> Trace:
    """Answer the user message of ``trace`` again, as a new branch beside that answer (which
    stays reachable)."""
    _chat_membership(user, conversation.team_id)
    _check_open(conversation)
    if trace.conversation_id != conversation.pk or trace.user_message_id is None:
        raise ValidationError("That answer cannot be regenerated.")
    if trace.is_active:
        raise ValidationError("This answer is still being written. Stop it first, or wait for it.")
    agent = Agent.objects.get(pk=conversation.agent_id)
    with transaction.atomic():
        conversation_lock(conversation.pk)
        message = Message.objects.get(pk=trace.user_message_id)
        return _turn_create(conversation=conversation, agent=agent, user=user, message=message)


def turn_edit(*, conversation: Conversation, message: Message, user: Any, text: str) -> Trace:
    """Send an edited version of an earlier user message: a new branch from the point where
    ``message`` was sent. The original and everything after it stay reachable."""
    _chat_membership(user, conversation.team_id)
    text = _clean_text(text)
    _check_open(conversation)
    if message.conversation_id != conversation.pk or message.role != Message.Role.USER:
        raise ValidationError("Only your messages in this conversation can be edited.")
    agent = Agent.objects.get(pk=conversation.agent_id)
    with transaction.atomic():
        conversation_lock(conversation.pk)
        edited = Message.objects.create(
            conversation=conversation, role=Message.Role.USER,
            blocks=RuntimeMessage.user(text).to_dict()["blocks"], text=text, author=user,
            parent_turn_id=message.parent_turn_id)
        trace = _turn_create(conversation=conversation, agent=agent, user=user, message=edited)
        edited.trace = trace
        edited.save(update_fields=["trace"])
        edited.conversation = conversation
        transaction.on_commit(lambda: announce_sync(live.message_announcement, edited))
    return trace


def conversation_stop(*, conversation: Conversation, user: Any) -> int:
    """Stop every queued or running turn of the conversation; how many there were."""
    _chat_membership(user, conversation.team_id)
    stopped = 0
    for trace in conversation_active_traces(conversation=conversation):
        turn_cancel(trace=trace, user=user)
        stopped += 1
    return stopped


# -- managing conversations ----------------------------------------------------------------------
def _manage_membership(user: Any, conversation: Conversation, action: str) -> Membership:
    membership = _chat_membership(user, conversation.team_id)
    if conversation.created_by_id != user.pk and not membership.has_role(Membership.Role.ADMIN):
        raise PermissionDenied(f"Only the person who started this conversation or a team admin "
                               f"can {action} it.")
    return membership


def conversation_rename(*, conversation: Conversation, user: Any, title: str) -> Conversation:
    _manage_membership(user, conversation, "rename")
    title = " ".join((title or "").split())
    if not title:
        raise ValidationError("Give the conversation a title.")
    if len(title) > 200:
        raise ValidationError(f"The title is {len(title)} characters long; the limit is 200.")
    conversation.title = title
    conversation.save(update_fields=["title", "updated_at"])
    return conversation


def conversation_archive(*, conversation: Conversation, user: Any, archived: bool = True) -> Conversation:
    """Archive (hide from the list, read-only) or bring back a conversation."""
    _manage_membership(user, conversation, "archive")
    conversation.archived = bool(archived)
    conversation.save(update_fields=["archived", "updated_at"])
    return conversation


def conversation_delete(*, conversation: Conversation, user: Any) -> None:
    """Delete a conversation for the chat: it is gone from the lists and its page. Its running
    turns stop; their traces stay, as the team's record of what was spent."""
    _manage_membership(user, conversation, "delete")
    for trace in conversation_active_traces(conversation=conversation):
        turn_cancel(trace=trace, user=user)
    conversation.deleted_at = timezone.now()
    conversation.save(update_fields=["deleted_at", "updated_at"])


# -- commands typed in the chat ------------------------------------------------------------------
@dataclass(frozen=True)
class CommandReply:
    """What a command answered, shown in the chat and never sent to the model. ``redirect_to``:
    the page to go to (``/new``)."""

    command: str
    text: str
    redirect_to: Conversation | None = None
    changed_model: bool = False


def chat_command(*, conversation: Conversation, user: Any, text: str) -> CommandReply | None:
    """Run ``text`` when it is a chat command (``/new``, ``/model``, ``/models``, ``/stop``,
    ``/help``); None when it is an ordinary message. An unknown command answers with the help
    text. No command reaches the model or starts a turn."""
    command = parse_command(text or "")
    if command is None:
        return None
    _chat_membership(user, conversation.team_id)
    agent = Agent.objects.get(pk=conversation.agent_id)
    name = command.name
    if name is CommandName.NEW:
        fresh = conversation_create(team=conversation.team, agent=agent, user=user)
        return CommandReply("new", f"Started a new conversation with {agent.name}.", redirect_to=fresh)
    if name is CommandName.STOP:
        stopped = conversation_stop(conversation=conversation, user=user)
        return CommandReply("stop", "Stopped the reply." if stopped else "Nothing is running here.")
    if name is CommandName.MODELS:
        return CommandReply("models", _models_text(conversation, agent))
    if name is CommandName.MODEL:
        return _model_command(conversation, agent, command.argument)
    if name is CommandName.HELP:
        return CommandReply("help", HELP_TEXT)
    return CommandReply("unknown", unknown_command_reply(command))


def _allowed_models(agent: Agent) -> list[str]:
    models_ = [str(m).strip() for m in agent.allowed_models or [] if str(m).strip()]
    return [agent.model, *[m for m in models_ if m != agent.model]]


def _models_text(conversation: Conversation, agent: Agent) -> str:
    current = conversation.model_override or agent.model
    choices = _allowed_models(agent)
    if len(choices) == 1:
        return (f"This conversation uses {current}. The agent {agent.name} has no other models "
                "to switch to; an admin can add some to its allowed models.")
    lines = [f"{'• ' if m == current else '  '}{m}{' (the agent’s default)' if m == agent.model else ''}"
             for m in choices]
    return "Models you can switch to with /model <name>:\n" + "\n".join(lines)


def _model_command(conversation: Conversation, agent: Agent, argument: str) -> CommandReply:
    current = conversation.model_override or agent.model
    if not argument:
        return CommandReply("model", f"This conversation uses {current}. Switch with "
                                     "/model <name>; /models lists the choices.")
    choices = _allowed_models(agent)
    chosen = next((m for m in choices if m.lower() == argument.lower()), None)
    if chosen is None:
        listed = ", ".join(choices)
        return CommandReply("model", f"“{argument}” is not one of the models this agent may use. "
                                     f"Choose one of: {listed}.")
    override = "" if chosen == agent.model else chosen
    Conversation.objects.filter(pk=conversation.pk).update(model_override=override)
    conversation.model_override = override
    return CommandReply("model", f"This conversation now uses {chosen}.", changed_model=True)


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


# -- configuration: providers --------------------------------------------------------------------
# The admin's "Test connection": one short chat, a few tokens, a short time limit.
CONNECTION_TEST_PROMPT = "Reply with the single word OK."
CONNECTION_TEST_MAX_TOKENS = 8
CONNECTION_TEST_TIMEOUT_S = 20.0
# The model tried when no agent of the team uses the provider yet.
CONNECTION_TEST_MODELS = {"openai": "gpt-4o-mini", "anthropic": "claude-haiku-4-5", "demo": "demo"}


class KeyChange(StrEnum):
    """What a save did to a provider's stored API key."""

    KEPT = "kept"
    SET = "set"
    REPLACED = "replaced"
    CLEARED = "cleared"


@transaction.atomic
def provider_save(*, provider: Provider, api_key: str = "", clear_api_key: bool = False,
                  user: Any = None) -> KeyChange:
    """Save ``provider``. A non-empty ``api_key`` is encrypted and replaces the stored key;
    ``clear_api_key`` removes it; otherwise the stored key is kept. The clear key is never kept
    anywhere else (not on the instance, not in the audit trail).

    Fallbacks name providers: a rename is carried into the fallbacks of the team's agents (a new
    version and an audit row for each agent changed), so that they keep working."""
    api_key = (api_key or "").strip()
    if api_key and clear_api_key:
        raise ValidationError("Either enter a new API key or remove the stored one, not both.")
    stored = (Provider.objects.filter(pk=provider.pk).values("team_id", "name").first()
              if provider.pk is not None else None)
    if stored is not None and stored["team_id"] != provider.team_id:
        raise ValidationError("A provider cannot move to another team: its agents and routes "
                              "stay with their team. Create a new provider there instead.")
    had_key = bool(provider.api_key_encrypted)
    change = KeyChange.KEPT
    if clear_api_key and had_key:
        provider.api_key_encrypted = ""
        change = KeyChange.CLEARED
    elif api_key:
        provider.api_key_encrypted = encrypt(api_key)
        change = KeyChange.REPLACED if had_key else KeyChange.SET
    provider.save()
    if stored is not None and stored["name"] != provider.name:
        _fallbacks_rename(team_id=provider.team_id, old=stored["name"], new=provider.name, user=user)
    return change


def _fallbacks_rename(*, team_id: int, old: str, new: str, user: Any) -> None:
    for agent in Agent.objects.filter(team_id=team_id).select_related("team", "provider"):
        entries = agent.fallbacks if isinstance(agent.fallbacks, list) else []
        if not any(isinstance(e, dict) and e.get("provider") == old for e in entries):
            continue
        before = audit_snapshot(agent)
        agent.fallbacks = [{**e, "provider": new} if isinstance(e, dict) and e.get("provider") == old
                           else e for e in entries]
        agent_save(agent=agent, user=user)
        audit_record(actor=user, action=AuditEvent.Action.UPDATE, instance=agent, before=before,
                     after=audit_snapshot(agent))


@dataclass(frozen=True)
class ConnectionCheck:
    """The outcome of ``provider_test_connection``: ``message`` is a plain sentence for the page."""

    provider: str
    ok: bool
    message: str
    model: str
    latency_ms: int | None = None


def provider_test_model(provider: Provider) -> str:
    """The model a connection test asks for: the one an agent of the team uses with this
    provider, or a small model of the provider's kind."""
    used = (Agent.objects.filter(provider=provider).exclude(model="").order_by("name")
            .values_list("model", flat=True).first())
    return used or CONNECTION_TEST_MODELS.get(provider.kind, "demo")


def provider_test_connection(*, provider: Provider, model: str | None = None,
                             transport: httpx.AsyncBaseTransport | None = None) -> ConnectionCheck:
    """Send one tiny chat through ``provider`` as configured (decrypted key, headers, options)
    and report the latency or what went wrong, in plain words. ``transport`` replaces the
    network (tests pass an ``httpx.MockTransport``)."""
    return provider_test_connections(providers=[provider], model=model, transport=transport)[0]


def provider_test_connections(*, providers: list[Provider], model: str | None = None,
                              transport: httpx.AsyncBaseTransport | None = None,
                              ) -> list[ConnectionCheck]:
    """``provider_test_connection`` for several providers at once (they run concurrently)."""
    prepared: list[tuple[Provider, str, Any]] = []
    for row in providers:
        chosen = model or provider_test_model(row)
        try:
            prepared.append((row, chosen, _test_runtime_provider(row, transport)))
        except TurnSetupError as exc:
            prepared.append((row, chosen, ConnectionCheck(row.name, False, str(exc), chosen)))

    async def run_all() -> list[ConnectionCheck]:
        return list(await asyncio.gather(*(
            _connection_check(row, chosen, runtime) for row, chosen, runtime in prepared)))

    return async_to_sync(run_all)()


def _test_runtime_provider(row: Provider, transport: httpx.AsyncBaseTransport | None) -> Any:
    # Built by the same code as a turn's provider, from a copy of the row (never saved) with a
    # short timeout and, when given, a client on the injected transport. Kinds without HTTP
    # (the demo model) do not take a client; build_provider leaves it out for them.
    probe = copy.copy(row)
    probe.timeout_s = min(float(row.timeout_s or CONNECTION_TEST_TIMEOUT_S), CONNECTION_TEST_TIMEOUT_S)
    options = dict(row.options) if isinstance(row.options, dict) else {}
    if transport is not None:
        options["http_client"] = httpx.AsyncClient(transport=transport)
    probe.options = options
    return runtime_provider(probe)


async def _connection_check(row: Provider, model: str, runtime: Any) -> ConnectionCheck:
    if isinstance(runtime, ConnectionCheck):
        return runtime
    request = ChatRequest(model=model, messages=[RuntimeMessage.user(CONNECTION_TEST_PROMPT)],
                          max_tokens=CONNECTION_TEST_MAX_TOKENS)
    started = time.perf_counter()
    try:
        await asyncio.wait_for(runtime.chat(request), timeout=CONNECTION_TEST_TIMEOUT_S + 5)
    except ProviderError as exc:
        return ConnectionCheck(row.name, False, connection_error_message(exc, row=row, model=model,
                                                                         runtime=runtime), model)
    except TimeoutError:
        return ConnectionCheck(row.name, False, (
            f"The provider did not answer within {CONNECTION_TEST_TIMEOUT_S:.0f} seconds. Check "
            "that the server is up and reachable from this machine."), model)
    finally:
        client = getattr(runtime, "_client", None)
        await runtime.aclose()
        if client is not None and not getattr(runtime, "_owns_client", True):
            await client.aclose()
    latency_ms = round((time.perf_counter() - started) * 1000)
    what = " (the offline demo model)" if row.kind == Provider.Kind.DEMO else ""
    return ConnectionCheck(row.name, True, (
        f"Connected: the model “{model}” answered in {latency_ms} ms{what}."), model, latency_ms)


def connection_error_message(exc: ProviderError, *, row: Provider, model: str, runtime: Any = None) -> str:
    """A failed connection test in plain words: what it means, what to do, then the provider's
    own (already redacted) message."""
    where = (getattr(runtime, "base_url", "") or row.base_url or "the provider's endpoint")
    if exc.kind == ErrorKind.AUTH:
        if not row.has_api_key:
            headline = ("The provider asked for an API key and none is set. Enter the key, save, "
                        "and test again.")
        else:
            headline = ("The API key was rejected. Enter the current key for this account, save, "
                        "and test again.")
    elif exc.kind == ErrorKind.NETWORK:
        headline = (f"Could not reach {where}. Check the base URL and that the server is running "
                    "and reachable from this machine.")
    elif exc.kind == ErrorKind.TIMEOUT:
        headline = (f"{where} did not answer in time. Check that the server is up, or raise the "
                    "provider's timeout.")
    elif exc.kind == ErrorKind.MODEL_NOT_FOUND:
        headline = (f"The connection and the key work, but the provider does not know the model "
                    f"“{model}”. Check the model name of the agents that use this provider.")
    elif exc.kind == ErrorKind.RATE_LIMIT:
        headline = ("The key works, but the provider refused the request for rate-limit or quota "
                    "reasons. Wait a moment, or check the account's plan and credit.")
    elif exc.kind == ErrorKind.SERVER:
        headline = "The provider had a server error. This is usually temporary; test again shortly."
    elif exc.kind == ErrorKind.MALFORMED:
        headline = ("The server answered, but not like a chat API. Check that the base URL points "
                    "at the API (for OpenAI-compatible servers it usually ends in /v1).")
    else:
        headline = "The provider rejected the test request."
    detail = exc.message
    key = _clear_key_or_empty(row)
    if key:
        detail = detail.replace(key, "[redacted]")
    return f"{headline} Details: {detail}"


def _clear_key_or_empty(row: Provider) -> str:
    try:
        return decrypt(row.api_key_encrypted)
    except SecretUnreadable:
        return ""


# -- configuration: agents and their versions ----------------------------------------------------
# Fields of an agent that are not its configuration (identity, ownership, bookkeeping).
_NOT_CONFIG = {"id", "uuid", "team", "provider", "created_at", "updated_at", "version"}


def _config_fields() -> list[Any]:
    return [f for f in Agent._meta.concrete_fields if f.name not in _NOT_CONFIG]


def _snapshot_value(field: Any, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(field, models.DecimalField):
        # The same amount reads back from the database with all its decimal places; compare
        # like with like so that saving an unchanged form keeps no new version.
        return str(Decimal(value).quantize(Decimal(1).scaleb(-field.decimal_places)))
    return value


def agent_snapshot(agent: Agent) -> dict[str, Any]:
    """The agent's configuration as plain JSON (for ``AgentVersion``): every config field, the
    provider by name and the tools by name. No secrets: a provider's key is not part of it."""
    data = {f.name: _snapshot_value(f, getattr(agent, f.attname)) for f in _config_fields()}
    data["provider"] = agent.provider.name if agent.provider_id else None
    data["tools"] = sorted(agent.tools.values_list("name", flat=True)) if agent.pk else []
    return json.loads(json.dumps(data, cls=DjangoJSONEncoder))


def agent_config_check(*, agent: Agent, tools: list[Tool] | None = None) -> None:
    """Raise ``ValidationError`` when the agent would link to another team's objects."""
    errors: dict[str, list[str]] = {}
    if agent.provider_id is not None:
        provider_team = Provider.objects.filter(pk=agent.provider_id).values_list("team_id", flat=True).first()
        if provider_team != agent.team_id:
            errors["provider"] = ["Choose a provider of the agent's own team."]
    if tools is not None and any(t.team_id != agent.team_id for t in tools):
        errors["tools"] = ["Choose tools of the agent's own team only."]
    entries = agent.fallbacks if isinstance(agent.fallbacks, list) else None
    if entries is None:
        errors["fallbacks"] = ["Fallbacks must be a list."]
    else:
        names = {str(e.get("provider", "")) for e in entries if isinstance(e, dict)}
        known = set(Provider.objects.filter(team_id=agent.team_id, name__in=names)
                    .values_list("name", flat=True))
        unknown = sorted(names - known)
        if unknown or any(not isinstance(e, dict) for e in entries):
            errors["fallbacks"] = [
                "Every fallback must name a provider of the agent's team"
                + (f"; unknown: {', '.join(unknown)}." if unknown else ".")]
    if agent.pk is not None:
        stored_team = Agent.objects.filter(pk=agent.pk).values_list("team_id", flat=True).first()
        if stored_team is not None and stored_team != agent.team_id:
            errors["team"] = ["An agent cannot move to another team."]
    if errors:
        raise ValidationError(errors)


@transaction.atomic
def agent_save(*, agent: Agent, tools: Iterable[Tool] | None = None, user: Any = None) -> AgentVersion | None:
    """Save the agent (and set its tools when given). When its configuration differs from the
    last kept version, keep a new immutable ``AgentVersion`` and raise ``Agent.version`` to its
    number; return that version, or None when nothing changed."""
    tool_list = list(tools) if tools is not None else None
    agent_config_check(agent=agent, tools=tool_list)
    if agent.pk is not None:
        # One save at a time per agent, so version numbers never collide.
        stored = Agent.objects.select_for_update().select_related("provider").get(pk=agent.pk)
        if not stored.versions.exists():
            # An agent made before versions were kept: its current state becomes the baseline,
            # under the number traces already recorded for it.
            AgentVersion.objects.create(agent=stored, number=stored.version,
                                        snapshot=agent_snapshot(stored), created_by=None)
    agent.save()
    if tool_list is not None:
        agent.tools.set(tool_list)
    return _agent_version_keep(agent=agent, user=user)


def _agent_version_keep(*, agent: Agent, user: Any) -> AgentVersion | None:
    current = agent_snapshot(agent)
    latest = agent.versions.order_by("-number").first()
    if latest is not None and latest.snapshot == current:
        return None
    number = latest.number + 1 if latest is not None else agent.version or 1
    version = AgentVersion.objects.create(
        agent=agent, number=number, snapshot=current,
        created_by=user if getattr(user, "is_authenticated", False) else None)
    Agent.objects.filter(pk=agent.pk).update(version=number)
    agent.version = number
    return version


@dataclass(frozen=True)
class FieldDiff:
    """One field that differs between two versions. ``kind`` says how to show it: "text" has
    unified-diff ``lines`` as (tag, text) pairs, "list" has ``added``/``removed``, "value" just
    ``before``/``after`` (already formatted for reading)."""

    name: str
    label: str
    kind: str
    before: str = ""
    after: str = ""
    lines: tuple[tuple[str, str], ...] = ()
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()


_TEXT_FIELDS = {"system_prompt", "description"}
_SET_FIELDS = {"tools", "allowed_models"}


def _field_label(name: str) -> str:
    try:
        return str(Agent._meta.get_field(name).verbose_name).capitalize()
    except FieldDoesNotExist:
        return name.replace("_", " ").capitalize()


def _field_order() -> list[str]:
    names = [f.name for f in _config_fields()]
    return [names[0], "provider", *names[1:], "tools"]


def version_value_text(name: str, value: Any) -> str:
    """A snapshot value as a person reads it."""
    if value is None or value == "":
        return "—"
    if isinstance(value, bool):
        return "on" if value else "off"
    if name == "fallbacks" and isinstance(value, list):
        return "\n".join(f"{e.get('provider', '')} / {e.get('model', '')}" if isinstance(e, dict)
                         else str(e) for e in value) or "—"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "—"
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value)


def agent_version_diff(*, old: AgentVersion | dict[str, Any], new: AgentVersion | dict[str, Any]) -> list[FieldDiff]:
    """The fields that differ from ``old`` to ``new``, in form order. Long texts (the system
    prompt, the description) come as a unified line diff; tools and allowed models as what was
    added and removed."""
    before = old.snapshot if isinstance(old, AgentVersion) else old
    after = new.snapshot if isinstance(new, AgentVersion) else new
    order = _field_order()
    names = [n for n in order if n in before or n in after]
    names += sorted((set(before) | set(after)) - set(order))
    diffs: list[FieldDiff] = []
    for name in names:
        a, b = before.get(name), after.get(name)
        if a == b:
            continue
        label = _field_label(name)
        if name in _TEXT_FIELDS:
            diffs.append(FieldDiff(name, label, "text", lines=_unified_lines(str(a or ""), str(b or ""))))
        elif name in _SET_FIELDS and isinstance(a or [], list) and isinstance(b or [], list):
            a_set, b_set = [str(v) for v in a or []], [str(v) for v in b or []]
            diffs.append(FieldDiff(
                name, label, "list", before=version_value_text(name, a), after=version_value_text(name, b),
                added=tuple(v for v in b_set if v not in a_set),
                removed=tuple(v for v in a_set if v not in b_set)))
        else:
            diffs.append(FieldDiff(name, label, "value", before=version_value_text(name, a),
                                   after=version_value_text(name, b)))
    return diffs


def _unified_lines(before: str, after: str) -> tuple[tuple[str, str], ...]:
    lines: list[tuple[str, str]] = []
    diff = difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=2)
    for line in diff:
        if line.startswith(("---", "+++")):
            continue
        if line.startswith("@@"):
            lines.append(("hunk", line))
        elif line.startswith("+"):
            lines.append(("add", line[1:]))
        elif line.startswith("-"):
            lines.append(("remove", line[1:]))
        else:
            lines.append(("same", line[1:]))
    return tuple(lines)


@dataclass
class RevertResult:
    """What ``agent_revert`` did: the new version (None when the agent already matched) and what
    of the old configuration could not be restored, in plain sentences."""

    version: AgentVersion | None
    missing_tools: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def agent_revert(*, agent: Agent, version: AgentVersion, user: Any) -> RevertResult:
    """Make the agent's configuration what ``version`` recorded, as a new version (history is
    never rewritten). Tools, a provider or fallback providers that no longer exist are reported
    in the result, not silently dropped; the rest is restored. Writes an audit row."""
    if version.agent_id != agent.pk:
        raise ValidationError("That version belongs to another agent.")
    with transaction.atomic():
        agent = Agent.objects.select_for_update().select_related("team", "provider").get(pk=agent.pk)
        before = audit_snapshot(agent)
        snap = version.snapshot
        result = RevertResult(version=None)
        for f in _config_fields():
            if f.name in snap:
                setattr(agent, f.attname, f.to_python(snap[f.name]))
        _revert_provider(agent, snap, result)
        _revert_fallbacks(agent, result)
        tools = _revert_tools(agent, snap, result)
        try:
            agent.full_clean()
        except ValidationError as exc:
            raise ValidationError(
                f"Version {version.number} cannot be restored as it was: "
                f"{' '.join(exc.messages)}") from exc
        result.version = agent_save(agent=agent, tools=tools, user=user)
        audit_record(actor=user, action=AuditEvent.Action.UPDATE, instance=agent, before=before,
                     after=audit_snapshot(agent))
    return result


def _revert_provider(agent: Agent, snap: dict[str, Any], result: RevertResult) -> None:
    name = snap.get("provider")
    if not name or name == agent.provider.name:
        return
    provider = Provider.objects.filter(team_id=agent.team_id, name=name).first()
    if provider is None:
        result.problems.append(f"The provider “{name}” no longer exists; the agent keeps "
                               f"“{agent.provider.name}”.")
    else:
        agent.provider = provider


def _revert_fallbacks(agent: Agent, result: RevertResult) -> None:
    entries = [e for e in agent.fallbacks or [] if isinstance(e, dict)]
    known = set(Provider.objects.filter(team_id=agent.team_id).values_list("name", flat=True))
    kept = [e for e in entries if str(e.get("provider", "")) in known]
    for gone in sorted({str(e.get("provider", "")) for e in entries} - known):
        result.problems.append(f"The fallback provider “{gone}” no longer exists and was left out.")
    agent.fallbacks = kept


def _revert_tools(agent: Agent, snap: dict[str, Any], result: RevertResult) -> list[Tool]:
    names = [str(n) for n in snap.get("tools") or []]
    rows = list(Tool.objects.filter(team_id=agent.team_id, name__in=names))
    found = {t.name for t in rows}
    result.missing_tools = [n for n in names if n not in found]
    if result.missing_tools:
        result.problems.append("These tools no longer exist and were not restored: "
                               + ", ".join(result.missing_tools) + ".")
    return rows
