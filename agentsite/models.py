"""Teams and accounts: every object in agentsite belongs to a Team; people act in it through a
Membership with a role. Invitations are how new people join."""

from __future__ import annotations

import hashlib
import secrets
import uuid
from datetime import timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone


class StampedQuerySet(models.QuerySet):
    """Updates in bulk move ``updated_at`` too (``Stamped``)."""

    def update(self, **kwargs):
        kwargs.setdefault("updated_at", timezone.now())
        return super().update(**kwargs)

    def bulk_update(self, objs, fields, *args, **kwargs):
        now = timezone.now()
        for obj in objs:
            obj.updated_at = now
        return super().bulk_update(objs, [*fields, "updated_at"] if "updated_at" not in fields else fields,
                                   *args, **kwargs)


class Stamped(models.Model):
    """A row whose every change moves ``updated_at``: a save of some fields only, an update or a
    bulk update of its queryset included. Processes keep configuration they read until a row's
    ``updated_at`` (or the rows' count) says it changed (``agents.team_config``,
    ``traces.costs.pricing``), so no write may leave it behind."""

    updated_at = models.DateTimeField(auto_now=True)

    objects = StampedQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args, **kwargs):
        fields = kwargs.get("update_fields")
        if fields is not None and "updated_at" not in fields:
            kwargs["update_fields"] = [*fields, "updated_at"]
        super().save(*args, **kwargs)


class Team(models.Model):
    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    name = models.CharField(max_length=100)
    # The policy new tools of the team start with (HTTP tools, and each MCP server's default for
    # the tools it offers): "allow", "ask" (a person approves each call) or "deny".
    tool_policy_default = models.CharField(
        max_length=8, default="ask",
        choices=[("allow", "Allow"), ("ask", "Ask a person"), ("deny", "Deny")],
        help_text="The policy a new tool (HTTP or from an MCP server) starts with.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "id"]

    def __str__(self) -> str:
        return self.name

    @property
    def group_name(self) -> str:
        """The channel-layer group for live team events."""
        return f"team_{self.uuid.hex}"


class Membership(models.Model):
    class Role(models.TextChoices):
        # Ordered from least to most privileged; see ``RANKS``.
        VIEWER = "viewer", "Viewer"
        MEMBER = "member", "Member"
        ADMIN = "admin", "Admin"
        OWNER = "owner", "Owner"

    RANKS = {Role.VIEWER: 0, Role.MEMBER: 1, Role.ADMIN: 2, Role.OWNER: 3}
    ROLE_HELP = {
        Role.VIEWER: "can read shared conversations and their traces, and costs",
        Role.MEMBER: "can also chat with the team's agents",
        Role.ADMIN: "can also edit agents, tools, providers and routing, and invite people",
        Role.OWNER: "can also manage members, roles and billing",
    }

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    # Limits on what this person may start in a minute, through the chat and every key they
    # use (empty: no limit). Keys have limits of their own on top (``ApiKey``).
    rpm_limit = models.PositiveIntegerField("requests per minute", null=True, blank=True)
    tpm_limit = models.PositiveIntegerField("tokens per minute", null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "user"], name="membership_unique_team_user")]
        indexes = [models.Index(fields=["user", "team"], name="membership_user_team")]
        ordering = ["team_id", "user_id"]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"

    @classmethod
    def rank(cls, role: str) -> int:
        return cls.RANKS[cls.Role(role)]

    def has_role(self, minimum: str) -> bool:
        return self.rank(self.role) >= self.rank(minimum)

    @property
    def can_chat(self) -> bool:
        return self.has_role(self.Role.MEMBER)

    @property
    def can_configure(self) -> bool:
        return self.has_role(self.Role.ADMIN)

    @property
    def can_invite(self) -> bool:
        return self.has_role(self.Role.ADMIN)

    @property
    def can_manage_members(self) -> bool:
        return self.has_role(self.Role.OWNER)



def _hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _default_expiry():
    return timezone.now() + timedelta(hours=settings.INVITATION_TTL_HOURS)


class InvitationQuerySet(models.QuerySet):
    def pending(self):
        return self.filter(accepted_at__isnull=True, revoked_at__isnull=True, expires_at__gt=timezone.now())


class Invitation(models.Model):
    """A single-use, expiring link to join a team with a role.

    Only a SHA-256 of the token is stored: the link is shown once, to the admin who made it."""

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="invitations")
    role = models.CharField(max_length=16, choices=Membership.Role.choices, default=Membership.Role.MEMBER)
    email = models.EmailField(blank=True, help_text="Optional: who the link is for (not checked).")
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(default=_default_expiry)
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = InvitationQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["team", "-created_at"], name="invitation_team_created")]

    def __str__(self) -> str:
        return f"Invitation to {self.team} as {self.role}"

    @staticmethod
    def new_token() -> tuple[str, str]:
        """A fresh (token, hash) pair."""
        token = secrets.token_urlsafe(32)
        return token, _hash_token(token)

    @staticmethod
    def hash_token(token: str) -> str:
        return _hash_token(token)

    @property
    def state(self) -> str:
        if self.accepted_at:
            return "accepted"
        if self.revoked_at:
            return "revoked"
        if self.expires_at <= timezone.now():
            return "expired"
        return "pending"

    @property
    def is_usable(self) -> bool:
        return self.state == "pending"


class AuditEvent(models.Model):
    """Who changed what in a team's configuration, when, and how (before/after). Append-only:
    the app offers no way to edit or delete a row. Secret values are never stored, only whether
    they were set or changed."""

    class Action(models.TextChoices):
        CREATE = "create", "Created"
        UPDATE = "update", "Changed"
        DELETE = "delete", "Deleted"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="audit_events")
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    actor_name = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=8, choices=Action.choices)
    object_type = models.CharField(max_length=100)
    object_id = models.CharField(max_length=64)
    object_repr = models.CharField(max_length=200)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["team", "-created_at"], name="audit_team_created")]

    def __str__(self) -> str:
        return f"{self.actor_name or 'someone'} {self.get_action_display().lower()} {self.object_type} {self.object_repr}"

    @property
    def changes(self) -> dict[str, tuple]:
        """Field -> (before, after) for the fields that differ."""
        before, after = self.before or {}, self.after or {}
        return {k: (before.get(k), after.get(k)) for k in sorted(set(before) | set(after)) if before.get(k) != after.get(k)}


class ApiKeyQuerySet(models.QuerySet):
    def active(self):
        now = timezone.now()
        return self.filter(revoked_at__isnull=True).filter(
            models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=now))


class ApiKey(models.Model):
    """A key for calling a team's agents and reading its traces and costs from code.

    It acts as one person of the team (``user``), with that person's current role, narrowed to
    its ``scopes``: a personal key is made by a member for themselves; a team key by an admin,
    and it acts as that admin. Only a SHA-256 of the secret is stored; the full key is shown
    once. ``prefix`` (the key's first characters, never secret on their own) is how people
    recognise it in lists and logs."""

    class Kind(models.TextChoices):
        TEAM = "team", "Team key"
        PERSONAL = "personal", "Personal key"

    class Scope(models.TextChoices):
        CHAT = "chat", "Chat with agents"
        TRACES = "traces:read", "Read traces"
        COSTS = "costs:read", "Read costs"
        CONFIG = "config:admin", "Read and change configuration"

    PREFIX = "ask_"

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="api_keys")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_keys",
                             help_text="The person the key acts as.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True,
                                   related_name="+")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.PERSONAL)
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    scopes = models.JSONField(default=list)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    rpm_limit = models.PositiveIntegerField("requests per minute", null=True, blank=True)
    tpm_limit = models.PositiveIntegerField("tokens per minute", null=True, blank=True)
    # Every call through the key must name the end user of its application it is for
    # (``user`` / ``X-Agentsite-End-User``), so that none shares another's memory by omission.
    require_end_user = models.BooleanField(default=False)
    # Each end user's own window within the key (``user`` / ``X-Agentsite-End-User``): one
    # end user of the application cannot use up the key's whole limit.
    end_user_rpm_limit = models.PositiveIntegerField("requests per minute per end user", null=True, blank=True)
    end_user_tpm_limit = models.PositiveIntegerField("tokens per minute per end user", null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = ApiKeyQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["team", "-created_at"], name="apikey_team_created")]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @staticmethod
    def new_secret() -> tuple[str, str, str]:
        """A fresh (key, prefix, hash): the key is ``ask_<8 characters>_<secret>``."""
        head = secrets.token_hex(4)
        key = f"{ApiKey.PREFIX}{head}_{secrets.token_urlsafe(32)}"
        return key, f"{ApiKey.PREFIX}{head}", _hash_token(key)

    @staticmethod
    def hash_key(key: str) -> str:
        return _hash_token(key)

    @property
    def state(self) -> str:
        if self.revoked_at:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= timezone.now():
            return "expired"
        return "active"

    def has_scope(self, scope: str) -> bool:
        return scope in (self.scopes or [])
