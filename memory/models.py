"""What agents remember. Every entry belongs to a team and an agent, and to one scope:

* ``agent``: what the agent knows for everyone who talks to it (written in the admin);
* ``user``: what the agent remembers about one user, across their conversations (the memory
  tools' default, and auto-saved messages). A person's API key may speak for end users of its
  application (``end_user``, the API's ``user``): each end user's memory is their own, and the
  person's own memory is the entries without one;
* ``conversation``: notes for one conversation only.

A key is unique within its scope's owner: (agent) for agent memory, (agent, user) for user
memory (and end user), (conversation) for conversation memory; storing under an existing key replaces it.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q

from agents.models import Agent, Conversation
from agents.models.conversations import END_USER_MAX_CHARS
from agentsite.models import Team


class MemoryEntry(models.Model):
    class Scope(models.TextChoices):
        AGENT = "agent", "Agent (everyone)"
        USER = "user", "User"
        CONVERSATION = "conversation", "Conversation"

    class Category(models.TextChoices):
        CORE = "core", "Core"
        DAILY = "daily", "Daily"
        CONVERSATION = "conversation", "Conversation"
        CUSTOM = "custom", "Custom"

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memories")
    scope = models.CharField(max_length=16, choices=Scope.choices, default=Scope.USER)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="memories")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True,
                             blank=True, related_name="agent_memories",
                             help_text="Whom the entry is about (user memory), or who spoke "
                                       "(conversation memory).")
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, null=True,
                                     blank=True, related_name="memories")
    end_user = models.CharField(max_length=END_USER_MAX_CHARS, blank=True, default="",
                                help_text="The end user of the user's API key it is about; empty: "
                                          "the user themself.")
    key = models.CharField(max_length=200, help_text="A short name; storing again under the same "
                                                     "key replaces the entry.")
    content = models.TextField()
    category = models.CharField(max_length=16, choices=Category.choices, default=Category.CORE)
    # The turn that stored it (empty for entries written in the admin).
    source_trace = models.ForeignKey("traces.Trace", on_delete=models.SET_NULL, null=True,
                                     blank=True, related_name="memories")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at", "-id"]
        verbose_name = "memory entry"
        verbose_name_plural = "memory entries"
        constraints = [
            models.UniqueConstraint(fields=["team", "agent", "key"], condition=Q(scope="agent"),
                                    name="memory_unique_agent_key"),
            models.UniqueConstraint(fields=["team", "agent", "user", "end_user", "key"],
                                    condition=Q(scope="user"), name="memory_unique_user_key"),
            models.UniqueConstraint(fields=["team", "conversation", "key"],
                                    condition=Q(scope="conversation"),
                                    name="memory_unique_conversation_key"),
            models.CheckConstraint(
                condition=(Q(scope="agent")
                           | Q(scope="user", user__isnull=False)
                           | Q(scope="conversation", conversation__isnull=False)),
                name="memory_scope_has_owner",
                violation_error_message="User memory needs a user, and conversation memory a "
                                        "conversation."),
        ]
        indexes = [
            models.Index(fields=["team", "agent", "user", "end_user", "-updated_at"],
                         name="memory_team_agent_end_user"),
            models.Index(fields=["team", "-updated_at"], name="memory_team_recent"),
        ]

    def __str__(self) -> str:
        return self.key
