"""What agents are made of (providers, agents, tools, routing) and what they say (conversations
and messages). Everything belongs to a team."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models.functions import Lower
from django.utils.text import slugify

from agents.runtime.providers.base import PER_MODEL_OVERRIDES
from agentsite.crypto import decrypt, encrypt
from agentsite.models import Membership, Stamped, Team

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


# -- moving context windows out of the capabilities JSON (migration agents 0004) -------------------
@dataclass
class LegacyWindows:
    """``capabilities["context_window"]`` read apart: the provider's window (an int, or a
    per-model dict's "*"), each model's, and the capabilities without what was moved (a value
    that is not a positive whole number stays where it was: nothing is lost)."""

    provider: int | None
    per_model: dict[str, int]
    capabilities: dict[str, Any]


def _window(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    return value if isinstance(value, int) and value > 0 else None


def legacy_windows_split(capabilities: Any) -> LegacyWindows:
    caps = dict(capabilities) if isinstance(capabilities, dict) else {}
    if "context_window" not in caps:
        return LegacyWindows(None, {}, caps)
    value = caps.pop("context_window")
    if not isinstance(value, dict):
        window = _window(value)
        if window is None:
            caps["context_window"] = value
        return LegacyWindows(window, {}, caps)
    provider, per_model, kept = None, {}, {}
    for name, size in value.items():
        window = _window(size)
        if window is None or not str(name).strip():
            kept[name] = size
        elif str(name).strip() == "*":
            provider = window
        else:
            per_model[str(name).strip()[:200]] = window
    if kept:
        caps["context_window"] = kept
    return LegacyWindows(provider, per_model, caps)


def legacy_windows_move(*, provider_model: Any, model_row_model: Any) -> int:
    """Move every provider's ``capabilities["context_window"]`` into ``context_window`` and
    per-model rows (a model's existing row keeps its own window). ``provider_model`` and
    ``model_row_model`` are the Provider and ProviderModel classes (a migration passes its
    historical ones). Returns the providers changed."""
    changed = 0
    for provider in provider_model.objects.exclude(capabilities={}).iterator():
        split = legacy_windows_split(provider.capabilities)
        if split.provider is None and not split.per_model:
            continue
        if split.provider is not None and provider.context_window is None:
            provider.context_window = split.provider
        existing = {m.model.strip().lower(): m for m in model_row_model.objects.filter(provider=provider)}
        for name, window in split.per_model.items():
            row = existing.get(name.lower())
            if row is None:
                existing[name.lower()] = model_row_model.objects.create(
                    provider=provider, model=name, context_window=window)
            elif row.context_window is None:
                row.context_window = window
                row.save(update_fields=["context_window"])
        provider.capabilities = split.capabilities
        provider.save(update_fields=["capabilities", "context_window"])
        changed += 1
    return changed


def legacy_windows_restore(*, provider_model: Any, model_row_model: Any) -> None:
    """The reverse: windows back into ``capabilities["context_window"]``."""
    for provider in provider_model.objects.all().iterator():
        windows = {m.model: m.context_window
                   for m in model_row_model.objects.filter(provider=provider, context_window__isnull=False)}
        if not windows and provider.context_window is None:
            continue
        caps = dict(provider.capabilities) if isinstance(provider.capabilities, dict) else {}
        if windows:
            if provider.context_window is not None:
                windows["*"] = provider.context_window
            caps["context_window"] = windows
        else:
            caps["context_window"] = provider.context_window
        provider.capabilities = caps
        provider.save(update_fields=["capabilities"])


class ToolPolicy(models.TextChoices):
    """What happens when the model calls a tool: it runs, a person is asked first, or it never
    runs (the model reads ``Permission denied: <reason>``)."""

    ALLOW = "allow", "Allow"
    ASK = "ask", "Ask a person"
    DENY = "deny", "Deny"


class McpServer(Stamped):
    """A Model Context Protocol server whose tools a team's agents may use.

    Streamable-HTTP servers are added by team admins (URL and headers; headers encrypted and
    write-only, the URL under the outbound-network policy). A stdio server is a process the
    worker starts: its command is the site operator's, named in ``settings.MCP_STDIO_SERVERS``
    by ``operator_key``; a team admin only chooses one of those names."""

    class Transport(models.TextChoices):
        HTTP = "http", "Streamable HTTP"
        STDIO = "stdio", "stdio (operator-defined)"

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="mcp_servers")
    name = models.SlugField(
        max_length=32,
        help_text="Short name (letters, digits, _ and -); the server's tools are offered to the "
                  "model as “name_tool” (a server “time” offers “time_get_current_time”).")
    transport = models.CharField(max_length=8, choices=Transport.choices, default=Transport.HTTP)
    url = models.CharField(max_length=2000, blank=True, help_text="Streamable-HTTP endpoint.")
    headers_encrypted = models.TextField(blank=True, editable=False)
    operator_key = models.CharField(
        max_length=64, blank=True, help_text="stdio: the name of a server the site operator set up.")
    enabled = models.BooleanField(default=True)
    default_policy = models.CharField(
        max_length=8, choices=ToolPolicy.choices, default=ToolPolicy.ASK,
        help_text="The policy a newly discovered tool of this server starts with.")
    timeout_s = models.FloatField(default=30.0, validators=[MinValueValidator(0.5), MaxValueValidator(300)],
                                  help_text="Longest wait for one call or listing.")
    max_result_bytes = models.PositiveIntegerField(default=200_000, validators=[MaxValueValidator(10_000_000)])
    ttl_s = models.PositiveIntegerField(
        default=3600, help_text="How long a tool list is trusted before it is fetched again (a "
                                "server may ask for less).")
    # What the last discovery found.
    protocol_version = models.CharField(max_length=32, blank=True)
    server_info = models.JSONField(default=dict, blank=True)
    instructions = models.TextField(blank=True)
    last_refreshed_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "MCP server"
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="mcpserver_unique_name_per_team")]

    def __str__(self) -> str:
        return self.name

    def headers(self) -> dict[str, str]:
        return json.loads(decrypt(self.headers_encrypted)) if self.headers_encrypted else {}

    def set_headers(self, headers: dict[str, str]) -> None:
        self.headers_encrypted = encrypt(json.dumps(headers)) if headers else ""


class Tool(Stamped):
    """A tool a team's agents may use: a built-in (code), an HTTP tool defined in the admin, or a
    tool an MCP server offers (discovered, never edited by hand)."""

    class Kind(models.TextChoices):
        BUILTIN = "builtin", "Built-in"
        HTTP = "http", "HTTP"
        MCP = "mcp", "MCP"

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="tools")
    name = models.SlugField(max_length=64, help_text="The name the model calls (letters, digits, _ and -).")
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.BUILTIN)
    description = models.TextField(blank=True)
    enabled = models.BooleanField(default=True)
    policy = models.CharField(
        max_length=8, choices=ToolPolicy.choices, default=ToolPolicy.ALLOW,
        help_text="The team's default for this tool; an agent may set its own.")
    min_role = models.CharField(
        max_length=8, choices=Membership.Role.choices, default=Membership.Role.VIEWER,
        help_text="The least role whose turns may run this tool; below it every call is denied. "
                  "Tools that ask a person are never run for a viewer's turn.")
    idempotent = models.BooleanField(
        default=False,
        help_text="Safe to run twice with the same arguments (reads only). A call that was running "
                  "when its worker stopped is run again when the turn resumes only if this is set "
                  "(HTTP GET tools always are); otherwise the model is told it was interrupted.")
    parameters = models.JSONField(default=dict, blank=True, help_text="JSON schema of the arguments.")
    # HTTP tools
    http_method = models.CharField(max_length=8, default="GET", blank=True)
    url_template = models.CharField(max_length=2000, blank=True)
    headers_encrypted = models.TextField(blank=True, editable=False)
    timeout_s = models.FloatField(default=15.0, validators=[MinValueValidator(0.5), MaxValueValidator(300)])
    max_response_bytes = models.PositiveIntegerField(default=200_000)
    # MCP tools: the server and the name the server knows the tool by (``name`` is what the
    # model calls, prefixed with the server's name so it never collides with another tool).
    mcp_server = models.ForeignKey(McpServer, on_delete=models.CASCADE, null=True, blank=True,
                                   related_name="tools")
    remote_name = models.CharField(max_length=200, blank=True)
    annotations = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="tool_unique_name_per_team")]

    def __str__(self) -> str:
        return self.name

    @property
    def requires_approval(self) -> bool:
        return self.policy == ToolPolicy.ASK


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
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]
        indexes = [models.Index(fields=["team", "created_by", "-updated_at"], name="conversation_team_user")]

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



class TurnWorker(models.Model):
    """A worker process that runs turns, and when it last said it was alive. A running trace
    whose worker (``Trace.worker``, this ``name``) stopped beating is picked up by the reaper
    and resumed on another worker."""

    name = models.CharField(max_length=200, unique=True)
    pid = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField(auto_now_add=True)
    beat_at = models.DateTimeField(db_index=True)
    # When this process's reaper last ran (``/healthz`` reports the newest).
    reaped_at = models.DateTimeField(null=True, blank=True)
    # Set when the process began a warm shutdown (SIGTERM): its turns are handed back.
    stopping_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


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
