"""Hooks: code outside the loop that a team sets to see tool calls and messages."""

from __future__ import annotations

import uuid

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from agents.models.agents import Agent
from agentsite.crypto import decrypt, encrypt
from agentsite.models import Stamped, Team


class Hook(Stamped):
    """Code outside the loop that sees a tool call before and after it runs (Claw Code's
    PreToolUse / PostToolUse) or a message as it arrives and before a reply is sent (ZeroClaw's
    ``on_message_received`` / ``on_message_sending``).

    A webhook is the team's: an HTTPS POST of the event's JSON, signed with the hook's secret
    (HMAC-SHA256), under the outbound-network policy. A command is the site operator's, named in
    ``settings.HOOK_COMMANDS`` by ``operator_key``; a team admin only chooses one of those."""

    class Event(models.TextChoices):
        PRE_TOOL_USE = "PreToolUse", "Before a tool call"
        POST_TOOL_USE = "PostToolUse", "After a tool call"
        MESSAGE_RECEIVED = "on_message_received", "A message arrives"
        MESSAGE_SENDING = "on_message_sending", "A reply is about to be sent"

    class Kind(models.TextChoices):
        WEBHOOK = "webhook", "Webhook"
        COMMAND = "command", "Command (operator-defined)"

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="hooks")
    name = models.CharField(max_length=100)
    event = models.CharField(max_length=24, choices=Event.choices)
    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.WEBHOOK)
    url = models.CharField(max_length=2000, blank=True, help_text="Webhook: the HTTPS URL it posts to.")
    secret_encrypted = models.TextField(blank=True, editable=False)
    operator_key = models.CharField(
        max_length=64, blank=True, help_text="Command: the name of a command the site operator set up.")
    matcher = models.CharField(
        max_length=200, blank=True,
        help_text="Tool hooks: which tools (names separated by | or ,; * wildcards). Empty: all.")
    agents = models.ManyToManyField(Agent, blank=True, related_name="hooks",
                                    help_text="Empty: every agent of the team.")
    position = models.PositiveSmallIntegerField(default=0, help_text="Hooks run in this order.")
    enabled = models.BooleanField(default=True)
    timeout_s = models.FloatField(default=5.0, validators=[MinValueValidator(0.5), MaxValueValidator(60)])
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["position", "id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.get_event_display()})"

    def secret(self) -> str:
        return decrypt(self.secret_encrypted) if self.secret_encrypted else ""

    def set_secret(self, secret: str) -> None:
        self.secret_encrypted = encrypt(secret) if secret else ""
