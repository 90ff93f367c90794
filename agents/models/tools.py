"""The tools a team's agents may use, the MCP servers that offer some of them, and the policy
that says whether a call runs."""

from __future__ import annotations

import json
import uuid

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from agentsite.crypto import decrypt, encrypt
from agentsite.models import Membership, Stamped, Team


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

    class SignIn(models.TextChoices):
        NONE = "", "None (or a fixed header)"
        TEAM = "team", "One sign-in for the team"
        PERSON = "person", "Each person signs in"

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
    use_instructions = models.BooleanField(
        default=False, verbose_name="Add its instructions to the system prompt",
        help_text="The instructions the server gives for its tools (below, from the last "
                  "discovery) are added to the system prompt of every agent that uses one of its "
                  "tools. They are the server's text: tick only for a server you trust as you "
                  "trust your own prompt.")
    # What the last discovery found.
    protocol_version = models.CharField(max_length=32, blank=True)
    server_info = models.JSONField(default=dict, blank=True)
    instructions = models.TextField(blank=True)
    # Its prompts (``RemotePrompt`` as dictionaries): the chat's "/" commands and starters.
    prompts = models.JSONField(default=list, blank=True)
    # Its resources and templates (``RemoteResource`` as dictionaries): attached from the chat.
    resources = models.JSONField(default=list, blank=True)
    last_refreshed_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    # OAuth (the MCP authorization spec), for servers that need sign-in.
    sign_in = models.CharField(
        max_length=8, choices=SignIn.choices, default=SignIn.NONE, blank=True,
        help_text="Servers that need sign-in (OAuth): one account for the whole team (a team "
                  "admin signs in), or each person's own account (each person signs in once "
                  "and their calls carry their own token).")
    oauth_scope = models.CharField(
        max_length=500, blank=True, verbose_name="OAuth scope",
        help_text="Scopes to ask for, separated by spaces; empty: what the server asks for.")
    # The OAuth client this site is at the server's authorization server: registered
    # dynamically at the first sign-in, or entered by an admin (pre-registered); a Fernet token
    # of the SDK's ``OAuthClientInformationFull`` as JSON (it may hold a client secret).
    oauth_client_encrypted = models.TextField(blank=True, editable=False)
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


class McpSignIn(models.Model):
    """One OAuth sign-in to an MCP server: the team's (``user`` empty) or one person's. The
    tokens are encrypted (a Fernet token of the SDK's ``OAuthToken`` as JSON), never shown,
    traced, exported or logged. While a sign-in is under way, ``state`` is the authorization
    request's and ``code_encrypted`` receives the code the authorization server sent back."""

    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="sign_ins")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True,
                             blank=True, related_name="mcp_sign_ins")
    tokens_encrypted = models.TextField(blank=True, editable=False)
    expires_at = models.DateTimeField(null=True, blank=True)  # of the access token
    scope = models.CharField(max_length=500, blank=True)
    signed_in_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL,
                                     null=True, blank=True, related_name="+")
    signed_in_at = models.DateTimeField(null=True, blank=True)
    refreshed_at = models.DateTimeField(null=True, blank=True)
    # A sign-in under way.
    state = models.CharField(max_length=200, blank=True, db_index=True)
    started_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL,
                                   null=True, blank=True, related_name="+")
    started_at = models.DateTimeField(null=True, blank=True)
    code_encrypted = models.TextField(blank=True, editable=False)
    last_error = models.TextField(blank=True)

    class Meta:
        verbose_name = "MCP sign-in"
        constraints = [
            models.UniqueConstraint(fields=["server", "user"], name="mcpsignin_one_per_person"),
            models.UniqueConstraint(fields=["server"], condition=models.Q(user__isnull=True),
                                    name="mcpsignin_one_per_team"),
        ]

    def __str__(self) -> str:
        return f"{self.server} ({self.user or 'team'})"

    @property
    def signed_in(self) -> bool:
        return bool(self.tokens_encrypted)

    def tokens_json(self) -> str:
        return decrypt(self.tokens_encrypted) if self.tokens_encrypted else ""


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
