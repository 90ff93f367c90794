"""Model API endpoints and their credentials, and the settings of each model they serve."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models.functions import Lower

from agents.runtime.providers.base import PER_MODEL_OVERRIDES
from agentsite.crypto import decrypt, encrypt
from agentsite.models import Stamped, Team

# The capabilities a provider or one of its models can be told it has or lacks (the runtime's
# ``Capabilities``); anything else in ``Provider.capabilities`` is kept but not used.
CAPABILITY_NAMES = ("native_tool_calling", "vision", "prompt_caching", "streaming")


@dataclass(frozen=True)
class ModelSettings:
    """What is configured for one model of a provider: its own row over the provider's
    values. None: nothing configured (the model's own limit, or the catalogue's)."""

    context_window: int | None = None
    max_output_tokens: int | None = None
    # Capability overrides only (on/off); a capability not named keeps the kind's default.
    capabilities: dict[str, bool] = field(default_factory=dict)


class Provider(Stamped):
    """A model API endpoint and its credentials."""

    class Kind(models.TextChoices):
        OPENAI = "openai", "OpenAI-compatible (OpenAI, OpenRouter, Ollama, vLLM, llama.cpp, LM Studio)"
        ANTHROPIC = "anthropic", "Anthropic"
        DEMO = "demo", "Offline demo model"

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="providers")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    base_url = models.URLField(blank=True, help_text="Leave empty for the provider's default endpoint.")
    # Fernet token of the API key; never rendered, logged or traced.
    api_key_encrypted = models.TextField(blank=True, editable=False)
    capabilities = models.JSONField(
        default=dict, blank=True,
        help_text='Overrides of what the model can do, e.g. {"native_tool_calling": false, "vision": true}.',
    )
    context_window = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)],
        help_text="Tokens the models of this provider read at most. Empty: the model's own, "
                  "from the catalogue.")
    max_output_tokens = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)],
        help_text="Longest answer per model request, unless the agent sets its own. Empty: the "
                  "server's default.")
    # Extra HTTP headers: the values encrypted (a Fernet token of a JSON object), write-only like
    # the API key; their names kept in clear, for the admin to show.
    extra_headers_encrypted = models.TextField(blank=True, editable=False)
    extra_header_names = models.JSONField(default=list, blank=True, editable=False)
    options = models.JSONField(
        default=dict, blank=True,
        help_text='Kind-specific options, e.g. for the demo model {"token_delay_s": 0.02}.',
    )
    timeout_s = models.FloatField(default=120.0, validators=[MinValueValidator(1), MaxValueValidator(3600)])
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="provider_unique_name_per_team")]

    def __str__(self) -> str:
        return self.name

    @property
    def has_api_key(self) -> bool:
        return bool(self.api_key_encrypted)

    def extra_headers(self) -> dict[str, str]:
        """The extra headers in clear, for the outgoing request only (never render, log or
        trace them); ``agentsite.crypto.SecretUnreadable`` when the encryption key changed."""
        if not self.extra_headers_encrypted:
            return {}
        data = json.loads(decrypt(self.extra_headers_encrypted))
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def set_extra_headers(self, headers: dict[str, str]) -> None:
        self.extra_header_names = sorted(headers)
        self.extra_headers_encrypted = encrypt(json.dumps(headers)) if headers else ""

    def capability_overrides(self) -> dict[str, bool]:
        """The capabilities set on or off for every model of the provider."""
        caps = self.capabilities if isinstance(self.capabilities, dict) else {}
        return {name: bool(caps[name]) for name in CAPABILITY_NAMES if caps.get(name) is not None}

    def model_row(self, model: str) -> ProviderModel | None:
        """The settings row of ``model`` (names compare without case). Reads
        ``model_settings.all()``, so a prefetch serves it without a query."""
        name = (model or "").strip().lower()
        return next((row for row in self.model_settings.all() if row.model.strip().lower() == name),
                    None)

    def settings_for(self, model: str) -> ModelSettings:
        """What is configured for ``model``: its row's values over the provider's."""
        row = self.model_row(model)
        capabilities = self.capability_overrides()
        if row is None:
            return ModelSettings(self.context_window, self.max_output_tokens, capabilities)
        capabilities.update(row.capability_overrides())
        return ModelSettings(row.context_window or self.context_window,
                             row.max_output_tokens or self.max_output_tokens, capabilities)

    def runtime_capabilities(self) -> dict[str, Any]:
        """The capability overrides the runtime provider is built with: the provider's, and
        each model row's under ``PER_MODEL_OVERRIDES``."""
        overrides: dict[str, Any] = self.capability_overrides()
        per_model = {row.model.strip().lower(): row.capability_overrides()
                     for row in self.model_settings.all()}
        per_model = {name: caps for name, caps in per_model.items() if caps}
        if per_model:
            overrides[PER_MODEL_OVERRIDES] = per_model
        return overrides


class ProviderModel(Stamped):
    """Settings of one model a provider serves, over the provider's own: its context window,
    its longest answer and what it can do."""

    provider = models.ForeignKey(Provider, on_delete=models.CASCADE, related_name="model_settings")
    model = models.CharField(max_length=200, help_text="The model name, as the agents use it.")
    context_window = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)],
        help_text="Tokens the model reads at most. Empty: the provider's setting.")
    max_output_tokens = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)],
        help_text="Longest answer per request. Empty: the provider's setting.")
    # Capabilities: None keeps the provider's (or the kind's) default.
    native_tool_calling = models.BooleanField(null=True, blank=True)
    vision = models.BooleanField(null=True, blank=True)
    prompt_caching = models.BooleanField(null=True, blank=True)
    streaming = models.BooleanField(null=True, blank=True)
    # Every change moves it: turns keep the team's configuration they read until it does
    # (``agents.turns.team_config``).
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["provider_id", "model"]
        constraints = [models.UniqueConstraint(Lower("model"), "provider",
                                               name="providermodel_unique_model")]

    def __str__(self) -> str:
        return f"{self.model} on {self.provider}" if self.provider_id else self.model

    @property
    def team(self) -> Any:
        return self.provider.team

    def capability_overrides(self) -> dict[str, bool]:
        return {name: getattr(self, name) for name in CAPABILITY_NAMES
                if getattr(self, name) is not None}
