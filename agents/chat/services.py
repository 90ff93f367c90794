"""The chat's actions on conversations: create, rename, archive, delete, share; and the commands
typed in the chat (``/new``, ``/model``, ``/models``, ``/stop``, ``/help``), which never reach a
model. Turns themselves start through ``agents.turns.services``. Only the conversation's owner
or a team admin acts on it (``agents.access``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.utils import timezone

from agents.access import Acting, conversation_act_check
from agents.models import Agent, Conversation
from agents.runtime.commands import HELP_TEXT, CommandName, parse_command, unknown_command_reply
from agents.tools.mcp.prompts import prompt_arguments, prompt_call, prompt_command_find
from agents.turns.services import conversation_create, conversation_stop
from agentsite.live import announce_lists_on_commit, recheck_sockets_on_commit
from agentsite.models import Membership


# -- managing conversations ----------------------------------------------------------------------
def conversation_rename(*, conversation: Conversation, membership: Membership, title: str) -> Conversation:
    conversation_act_check(membership, conversation, "rename it")
    title = " ".join((title or "").split())
    if not title:
        raise ValidationError("Give the conversation a title.")
    if len(title) > 200:
        raise ValidationError(f"The title is {len(title)} characters long; the limit is 200.")
    conversation.title = title
    conversation.save(update_fields=["title", "updated_at"])
    announce_lists_on_commit(conversation.created_by_id)
    return conversation


def conversation_archive(*, conversation: Conversation, membership: Membership, archived: bool = True) -> Conversation:
    """Archive (hide from the list, read-only) or bring back a conversation."""
    conversation_act_check(membership, conversation, "archive it")
    conversation.archived = bool(archived)
    conversation.save(update_fields=["archived", "updated_at"])
    announce_lists_on_commit(conversation.created_by_id)
    return conversation


def conversation_pin(*, conversation: Conversation, membership: Membership, pinned: bool = True) -> Conversation:
    """Keep a conversation at the top of its owner's list (or not)."""
    conversation_act_check(membership, conversation, "pin it")
    Conversation.objects.filter(pk=conversation.pk).update(pinned=bool(pinned))
    conversation.pinned = bool(pinned)
    announce_lists_on_commit(conversation.created_by_id)
    return conversation


def conversation_delete(*, conversation: Conversation, membership: Membership) -> None:
    """Delete a conversation for the chat: it is gone from the lists and its page. Its running
    turns stop; their traces stay, as the team's record of what was spent."""
    conversation_act_check(membership, conversation, "delete it")
    conversation_stop(conversation=conversation, membership=membership)
    conversation.deleted_at = timezone.now()
    conversation.save(update_fields=["deleted_at", "updated_at"])
    announce_lists_on_commit(conversation.created_by_id)


def conversation_share(*, conversation: Conversation, membership: Membership, shared: bool) -> Conversation:
    """Share the conversation with the whole team (everyone in it may read it and its traces;
    still only its owner and the team's admins act in it), or make it private again."""
    conversation_act_check(membership, conversation, "share it or make it private")
    shared = bool(shared)
    if conversation.shared == shared:
        return conversation
    conversation.shared = shared
    conversation.save(update_fields=["shared", "updated_at"])
    if not shared:
        # Their open sockets on it (the chat's and its traces') check their access again.
        recheck_sockets_on_commit(_people_who_lost_sight(conversation))
    return conversation


def _people_who_lost_sight(conversation: Conversation) -> list[int]:
    """Who saw the conversation only because it was shared: the team's members and viewers
    other than its owner."""
    return list(Membership.objects.filter(team_id=conversation.team_id)
                .filter(role__in=[Membership.Role.MEMBER, Membership.Role.VIEWER])
                .exclude(user_id=conversation.created_by_id).values_list("user_id", flat=True))


# -- commands typed in the chat ------------------------------------------------------------------
@dataclass(frozen=True)
class CommandReply:
    """What a command answered, shown in the chat and never sent to the model. ``redirect_to``:
    the page to go to (``/new``)."""

    command: str
    text: str
    redirect_to: Conversation | None = None
    changed_model: bool = False
    # An MCP prompt's command: not answered here but sent as the turn's message, which runs
    # the prompt (``Trace.meta[PROMPT_META]``: ``agents.tools.mcp.prompts``).
    prompt: dict[str, Any] | None = None


def chat_command(*, acting: Acting, text: str) -> CommandReply | None:
    """Run ``text`` when it is a chat command (``/new``, ``/model``, ``/models``, ``/stop``,
    ``/help``); None when it is an ordinary message. An unknown command answers with the help
    text. No command reaches the model or starts a turn, but an MCP prompt's, whose reply
    carries the ``prompt`` the caller sends the message with. Commands are typed where messages are
    sent: ``acting`` is who may send in the conversation (``agents.access``)."""
    command = parse_command(text or "")
    if command is None:
        return None
    conversation, membership = acting.conversation, acting.membership
    agent = Agent.objects.get(pk=conversation.agent_id)
    name = command.name
    if name is CommandName.NEW:
        fresh = conversation_create(membership=membership, agent=agent)
        return CommandReply("new", f"Started a new conversation with {agent.name}.", redirect_to=fresh)
    if name is CommandName.STOP:
        stopped = conversation_stop(conversation=conversation, membership=membership)
        return CommandReply("stop", "Stopped the reply." if stopped else "Nothing is running here.")
    if name is CommandName.MODELS:
        return CommandReply("models", _models_text(conversation, agent))
    if name is CommandName.MODEL:
        return _model_command(conversation, agent, command.argument)
    if name is CommandName.HELP:
        return CommandReply("help", HELP_TEXT)
    prompt = prompt_command_find(agent, command.token)
    if prompt is not None:
        try:
            arguments = prompt_arguments(prompt, command.argument)
        except ValidationError as exc:
            return CommandReply("prompt", " ".join(exc.messages))
        return CommandReply("prompt", "", prompt=prompt_call(prompt, arguments))
    return CommandReply("unknown", unknown_command_reply(command))


def allowed_models(agent: Agent) -> list[str]:
    """The models a conversation with ``agent`` may use (``Agent.model_choices``)."""
    return agent.model_choices()


def _models_text(conversation: Conversation, agent: Agent) -> str:
    current = conversation.model_override or agent.model
    choices = allowed_models(agent)
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
    choices = allowed_models(agent)
    chosen = next((m for m in choices if m.lower() == argument.lower()), None)
    if chosen is None:
        listed = ", ".join(choices)
        return CommandReply("model", f"“{argument}” is not one of the models this agent may use. "
                                     f"Choose one of: {listed}.")
    override = "" if chosen == agent.model else chosen
    Conversation.objects.filter(pk=conversation.pk).update(model_override=override)
    conversation.model_override = override
    return CommandReply("model", f"This conversation now uses {chosen}.", changed_model=True)
