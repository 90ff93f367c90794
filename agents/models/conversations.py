"""What agents say: conversations, their messages and the images attached to them."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q

from agents.models.agents import Agent
from agentsite.models import Team

# The longest end-user id the API accepts (OpenAI's ``user`` is an opaque string).
END_USER_MAX_CHARS = 256


class Conversation(models.Model):
    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="conversations")
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="conversations")
    # Its owner: the person who started it (``agents.access`` says who sees and acts in it).
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="conversations")
    # Private (its owner and the team's admins) until its owner shares it with the whole team.
    shared = models.BooleanField(default=False)
    title = models.CharField(max_length=200, blank=True)
    archived = models.BooleanField(default=False)
    # Kept at the top of its owner's conversation list.
    pinned = models.BooleanField(default=False)
    # Set by /model for this conversation only: one of the agent's allowed models.
    model_override = models.CharField(max_length=200, blank=True)
    # Deleting a conversation hides it everywhere in the chat; its traces stay (they are the
    # team's record of what was spent), so the row stays as their anchor.
    deleted_at = models.DateTimeField(null=True, blank=True)
    # Started through the API with this key; ``ephemeral``: a stateless request's conversation
    # (the history the request sent, then its answer), kept for its trace but left out of the
    # chat's lists.
    api_key = models.ForeignKey("agentsite.ApiKey", on_delete=models.SET_NULL, null=True, blank=True,
                                related_name="conversations")
    ephemeral = models.BooleanField(default=False)
    # The end user of the key's application it is for (the API's ``user`` or its
    # ``X-Agentsite-End-User`` header): an opaque id of the key's person, who may act for many;
    # empty for the person's own conversations. Its turns recall that end user's memory only.
    end_user = models.CharField(max_length=END_USER_MAX_CHARS, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]
        indexes = [
            models.Index(fields=["team", "created_by", "-updated_at"], name="conversation_team_user"),
            # An end user's conversations (the API's lists and reads); partial, so the person's
            # own conversations (most of them) cost it nothing.
            models.Index(fields=["team", "created_by", "end_user"], condition=~Q(end_user=""),
                         name="conversation_end_user"),
        ]

    def __str__(self) -> str:
        if self.title:
            return self.title
        name = self.agent.name if self.agent_id else ""
        return f"New conversation with {name}" if name else "New conversation"

    @property
    def group_name(self) -> str:
        return f"conversation_{self.uuid.hex}"


class Message(models.Model):
    """One message of a conversation, as content blocks (``agents.runtime.messages``).

    Branches: a conversation is a tree of turns (traces). A user message names the turn it
    continues (``parent_turn``; empty for the first message of a branch from the start). Its
    answers are the traces whose ``user_message`` it is: regenerating adds a trace for the same
    message, editing adds a new user message with the same ``parent_turn``. The messages a turn
    produced (assistant and tool) point at it through ``trace``."""

    class Role(models.TextChoices):
        SYSTEM = "system", "System"
        USER = "user", "User"
        ASSISTANT = "assistant", "Assistant"
        TOOL = "tool", "Tool"

    class Outcome(models.TextChoices):
        """How an assistant message ended when it is not a whole answer (the runtime's
        ``Outcome``, and a turn that stopped while the text streamed). Empty: complete."""

        COMPLETE = "", "Complete"
        LENGTH = "length", "Cut off (output limit)"
        REFUSAL = "refusal", "Refused"
        FILTERED = "filtered", "Stopped by the content filter"
        INTERRUPTED = "interrupted", "Interrupted"

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="messages")
    role = models.CharField(max_length=16, choices=Role.choices)
    blocks = models.JSONField(default=list)
    text = models.TextField(blank=True, help_text="The visible text, for search and lists.")
    usage = models.JSONField(null=True, blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, blank=True, default="")
    # The turn that stored it (a user message's own turn, or the turn that produced it).
    trace = models.ForeignKey("traces.Trace", on_delete=models.SET_NULL, null=True, blank=True, related_name="messages")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    parent_turn = models.ForeignKey("traces.Trace", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    # The id the browser gave a message it sent, so a resend after a dropped connection finds
    # the first one instead of starting a second turn.
    client_id = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["conversation_id", "id"]
        indexes = [models.Index(fields=["conversation", "id"], name="message_conversation_order")]
        constraints = [
            models.UniqueConstraint(fields=["conversation", "client_id"], condition=~models.Q(client_id=""),
                                    name="message_unique_client_id"),
        ]

    def __str__(self) -> str:
        return f"{self.role}: {self.text[:60]}"


class Attachment(models.Model):
    """An image a person attached to a message: the bytes are kept here, in the team's database,
    and served only to who may read the conversation (never as a static file)."""

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="attachments")
    uploaded_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True,
                                    related_name="+")
    # Set when the message that carries it is sent; until then it can be attached once.
    message = models.ForeignKey("Message", on_delete=models.SET_NULL, null=True, blank=True,
                                related_name="attachments")
    media_type = models.CharField(max_length=40)
    size = models.PositiveIntegerField()
    name = models.CharField(max_length=200, blank=True)
    data = models.BinaryField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return self.name or f"image {self.uuid.hex[:8]}"
