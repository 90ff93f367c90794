"""Routing: rules that pick a hint for a message, and the model each hint is sent to."""

from __future__ import annotations

import uuid

from django.db import models

from agents.models.agents import Agent
from agents.models.providers import Provider
from agentsite.models import Stamped, Team


class RoutingRule(Stamped):
    """Keyword and pattern rules that pick a model route by hint (per agent, or team-wide)."""

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="routing_rules")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, null=True, blank=True, related_name="routing_rules",
                              help_text="Empty: applies to every agent of the team.")
    hint = models.CharField(max_length=64)
    keywords = models.JSONField(default=list, blank=True)
    patterns = models.JSONField(default=list, blank=True, help_text="Regular expressions.")
    min_length = models.PositiveIntegerField(null=True, blank=True)
    max_length = models.PositiveIntegerField(null=True, blank=True)
    priority = models.IntegerField(default=0)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-priority", "id"]

    def __str__(self) -> str:
        return f"{self.hint} (priority {self.priority})"


class ModelRoute(Stamped):
    """Where a routing hint sends a message: a provider and a model."""

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="model_routes")
    hint = models.CharField(max_length=64)
    provider = models.ForeignKey(Provider, on_delete=models.CASCADE, related_name="routes")
    model = models.CharField(max_length=200)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["hint", "id"]

    def __str__(self) -> str:
        return f"{self.hint} → {self.model}"
