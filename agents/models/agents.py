"""Agents: what a team configures (its model, tools, loop and limits) and the snapshot of each
version."""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils.text import slugify

from agents.models.providers import Provider
from agents.models.tools import Tool
from agentsite.models import Stamped, Team


class Agent(Stamped):
    class Dispatcher(models.TextChoices):
        AUTO = "auto", "Auto (native when the model supports it)"
        NATIVE = "native", "Native tool calls"
        XML = "xml", "Prompt-guided (<tool_call> tags)"

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="agents")
    name = models.CharField(max_length=100)
    # How code names the agent: the ``model`` of an OpenAI-compatible request, the API's paths.
    slug = models.SlugField(max_length=100, blank=True,
                            help_text="The agent's name in the API (the model of /v1/chat/completions). "
                                      "Empty: made from its name.")
    description = models.TextField(blank=True)
    # Clickable starters on a new conversation with the agent (one prompt each).
    suggested_prompts = models.JSONField(default=list, blank=True)
    provider = models.ForeignKey(Provider, on_delete=models.PROTECT, related_name="agents")
    model = models.CharField(max_length=200)
    fallbacks = models.JSONField(
        default=list, blank=True,
        help_text='Ordered fallbacks tried when the model fails: [{"provider": "<provider name>", "model": "..."}].',
    )
    temperature = models.FloatField(null=True, blank=True, validators=[MinValueValidator(0), MaxValueValidator(2)])
    max_output_tokens = models.PositiveIntegerField(null=True, blank=True)
    allow_request_params = models.BooleanField(
        default=True, verbose_name="Callers may set model parameters",
        help_text="Let an API request set max_tokens, temperature, top_p, stop, seed and the penalties "
                  "for its turn (a response format is always allowed). Off: such a request is refused "
                  "with a 400 naming the field.")
    system_prompt = models.TextField(blank=True)
    tools = models.ManyToManyField(Tool, blank=True, related_name="agents")
    # Per-tool policies of this agent over the team's ({tool name: "allow" | "ask" | "deny"}).
    tool_policies = models.JSONField(default=dict, blank=True)
    # The loop
    max_tool_iterations = models.PositiveSmallIntegerField(default=10, validators=[MinValueValidator(1), MaxValueValidator(100)])
    parallel_tools = models.BooleanField(default=True)
    tool_dispatcher = models.CharField(max_length=8, choices=Dispatcher.choices, default=Dispatcher.AUTO)
    history_max_messages = models.PositiveIntegerField(default=50, validators=[MinValueValidator(2)])
    compaction_enabled = models.BooleanField(default=True)
    compaction_threshold_tokens = models.PositiveIntegerField(default=10_000)
    compaction_preserve_recent = models.PositiveSmallIntegerField(default=4)
    trajectory_states = models.BooleanField(default=True)
    inject_trajectory_state = models.BooleanField(
        default=False, help_text="Also send each iteration's state to the model as a system block."
    )
    # Memory
    memory_auto_save = models.BooleanField(default=False)
    memory_recall_limit = models.PositiveSmallIntegerField(default=5)
    memory_min_relevance = models.FloatField(default=0.4)
    # Limits
    approval_timeout_s = models.PositiveIntegerField(default=300)
    step_timeout_s = models.PositiveIntegerField(default=120, help_text="Longest wait for one model request.")
    turn_time_limit_s = models.PositiveIntegerField(default=600, validators=[MinValueValidator(5), MaxValueValidator(3600)])
    max_tokens_per_turn = models.PositiveIntegerField(null=True, blank=True)
    max_cost_per_turn = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    interrupt_on_new_message = models.BooleanField(
        default=False, help_text="A new message stops the running turn instead of waiting for it."
    )
    allowed_models = models.JSONField(default=list, blank=True, help_text="Models /model may switch to.")
    version = models.PositiveIntegerField(default=1, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="agent_unique_name_per_team"),
                       models.UniqueConstraint(fields=["team", "slug"], name="agent_unique_slug_per_team")]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self.slug:
            self.slug = agent_slug_free(self.team_id, self.name, exclude=self.pk)
            if kwargs.get("update_fields") is not None:
                kwargs["update_fields"] = {*kwargs["update_fields"], "slug"}
        super().save(*args, **kwargs)

    def model_choices(self) -> list[str]:
        """The models a conversation with the agent may use (``/model``, the chat's picker, the
        API's ``<slug>/<model>``): its own first, then its allowed ones."""
        extra = [str(m).strip() for m in self.allowed_models or [] if str(m).strip()]
        return [self.model, *[m for m in extra if m != self.model]]

    @property
    def hard_time_limit_s(self) -> int:
        """The soft limit ends the turn cleanly; the hard one is the backstop after it."""
        return self.turn_time_limit_s + 30


def agent_slug_free(team_id: int, name: str, *, exclude: int | None = None, model: Any = None) -> str:
    """A slug for an agent called ``name`` that no other agent of the team has: its name
    slugified ("Support bot" -> "support-bot"), with -2, -3 … on a clash."""
    model = model or Agent
    base = (slugify(name) or "agent")[:90]
    taken = set(model.objects.filter(team_id=team_id, slug__startswith=base).exclude(pk=exclude)
                .values_list("slug", flat=True))
    slug, n = base, 2
    while slug in taken:
        slug, n = f"{base}-{n}", n + 1
    return slug


class AgentVersion(models.Model):
    """An immutable snapshot of an agent's configuration, kept on every save."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    snapshot = models.JSONField()
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["agent_id", "-number"]
        constraints = [models.UniqueConstraint(fields=["agent", "number"], name="agentversion_unique_number")]

    def __str__(self) -> str:
        return f"{self.agent} v{self.number}"
