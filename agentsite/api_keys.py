"""API keys: make one (shown once), revoke it, and find who a presented key acts as.

A key acts as one person of its team with that person's *current* role (a member demoted to
viewer cannot chat through their key any more; a person who leaves the team takes their keys'
power with them), narrowed to the key's scopes. Another team's object is a 404 for a key exactly
as for a session: the API resolves objects through the same ``agentsite.access`` helpers, with
``request.user`` and ``request.team`` set from the key.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection, transaction
from django.utils import timezone

from .access import require_role
from .audit import audit_record, snapshot
from .models import ApiKey, AuditEvent, Membership, Team

logger = logging.getLogger("agentsite.api")

Role = Membership.Role
Scope = ApiKey.Scope
# last_used_at is written at most this often per key (not on every request).
LAST_USED_EVERY = timedelta(seconds=60)
# The scopes a key may carry, by the role of the person it acts as.
SCOPES_BY_ROLE = {
    Role.VIEWER: {Scope.TRACES, Scope.COSTS},
    Role.MEMBER: {Scope.CHAT, Scope.TRACES, Scope.COSTS},
    Role.ADMIN: set(Scope),
    Role.OWNER: set(Scope),
}


class ApiKeyRefused(Exception):
    """A key that cannot be used: missing, unknown, revoked, expired, or its person left the
    team (401); or one without the scope an endpoint needs (403)."""

    def __init__(self, message: str, *, status: int = 401, code: str = "invalid_api_key") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code


@dataclass(frozen=True)
class Caller:
    """Who a request with a key acts as."""

    key: ApiKey
    team: Team
    membership: Membership

    @property
    def user(self) -> Any:
        return self.membership.user


def _clean_scopes(scopes: Iterable[str], membership: Membership) -> list[str]:
    chosen = sorted({str(s) for s in scopes})
    if not chosen:
        raise ValidationError("Choose at least one scope for the key.")
    unknown = [s for s in chosen if s not in Scope.values]
    if unknown:
        raise ValidationError(f"Unknown scope {unknown[0]!r}; the scopes are {', '.join(Scope.values)}.")
    allowed = {str(s) for s in SCOPES_BY_ROLE[Role(membership.role)]}
    beyond = [s for s in chosen if s not in allowed]
    if beyond:
        raise PermissionDenied(f"A key acting as a team {membership.get_role_display().lower()} "
                               f"cannot have the {beyond[0]!r} scope.")
    return chosen


def api_key_create(*, membership: Membership | None, name: str, scopes: Iterable[str],
                   kind: str = ApiKey.Kind.PERSONAL, expires_at: datetime | None = None,
                   rpm_limit: int | None = None, tpm_limit: int | None = None,
                   require_end_user: bool = False, end_user_rpm_limit: int | None = None,
                   end_user_tpm_limit: int | None = None) -> tuple[ApiKey, str]:
    """A new key of ``membership``'s team and its secret (to show once; only its hash is
    kept). A personal key acts as ``membership``'s person; a team key (admins only) acts as the
    admin who made it. Audited."""
    if kind == ApiKey.Kind.TEAM:
        require_role(membership, Role.ADMIN, "create team API keys")
    else:
        require_role(membership, Role.VIEWER, "create API keys")
    assert membership is not None
    name = " ".join((name or "").split())[:100]
    if not name:
        raise ValidationError("Give the key a name that says where it is used.")
    if expires_at is not None and expires_at <= timezone.now():
        raise ValidationError("The expiry date is in the past.")
    chosen = _clean_scopes(scopes, membership)
    secret, prefix, digest = ApiKey.new_secret()
    with transaction.atomic():
        actor = membership.user
        key = ApiKey.objects.create(
            team_id=membership.team_id, user=actor, created_by=actor, name=name, kind=kind, prefix=prefix,
            key_hash=digest, scopes=chosen, expires_at=expires_at, rpm_limit=rpm_limit or None,
            tpm_limit=tpm_limit or None, require_end_user=require_end_user,
            end_user_rpm_limit=end_user_rpm_limit or None, end_user_tpm_limit=end_user_tpm_limit or None)
        audit_record(actor=actor, action=AuditEvent.Action.CREATE, instance=key, after=snapshot(key))
    return key, secret


def api_key_may_manage(key: ApiKey, membership: Membership | None) -> bool:
    """Its owner, or the team's admins and owners."""
    return membership is not None and membership.team_id == key.team_id and (
        key.user_id == membership.user_id or membership.can_configure)


def api_key_revoke(*, key: ApiKey, membership: Membership | None) -> ApiKey:
    """Revoke a key (its owner or a team admin). Revoking twice does nothing. Audited."""
    if not api_key_may_manage(key, membership):
        raise PermissionDenied("Only the key's owner or a team admin can revoke it.")
    if key.revoked_at is not None:
        return key
    before = snapshot(key)
    key.revoked_at = timezone.now()
    key.save(update_fields=["revoked_at"])
    audit_record(actor=membership.user, action=AuditEvent.Action.UPDATE, instance=key, before=before,
                 after=snapshot(key))
    return key


def bearer_token(header: str) -> str:
    scheme, _, token = (header or "").strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def api_key_authenticate(token: str) -> Caller:
    """The caller a presented key acts as; ``ApiKeyRefused`` (401) says why it cannot be used."""
    token = (token or "").strip()
    if not token:
        raise ApiKeyRefused("No API key was sent. Send it as 'Authorization: Bearer <key>'.",
                            code="missing_api_key")
    key_hash = ApiKey.hash_key(token)
    row = _key_row(key_hash)
    if row is None:
        raise ApiKeyRefused("This API key is not valid. Check that it was copied whole; keys "
                            "start with 'ask_'.")
    known = _CALLERS.get(key_hash)
    if known is not None and known[0] == row:
        key, membership = copy.copy(known[1].key), copy.copy(known[1].membership)
    else:
        key, membership = _caller_read(key_hash)
        if key is None:  # removed in between
            raise ApiKeyRefused("This API key is not valid. Check that it was copied whole; "
                                "keys start with 'ask_'.")
        with _CALLERS_LOCK:
            if len(_CALLERS) >= CALLERS_KEPT:
                _CALLERS.clear()
            _CALLERS[key_hash] = (row, Caller(key=key, team=key.team, membership=membership))  # type: ignore[arg-type]
        key, membership = copy.copy(key), copy.copy(membership)
    state = key.state
    if state == "revoked":
        raise ApiKeyRefused(f"This API key ({key.prefix}…) was revoked on "
                            f"{key.revoked_at:%Y-%m-%d %H:%M} UTC. Create a new one.",
                            code="revoked_api_key")
    if state == "expired":
        raise ApiKeyRefused(f"This API key ({key.prefix}…) expired on "
                            f"{key.expires_at:%Y-%m-%d %H:%M} UTC. Create a new one.",
                            code="expired_api_key")
    if membership is None or not key.user.is_active:
        raise ApiKeyRefused(f"The person this API key ({key.prefix}…) acts as is no longer in "
                            "the team, so the key cannot be used.")
    now = timezone.now()
    if key.last_used_at is None or now - key.last_used_at >= LAST_USED_EVERY:
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
        key.last_used_at = now
        kept = _CALLERS.get(key_hash)
        if kept is not None:
            kept[1].key.last_used_at = now  # the process's copy: written again in a minute
    return Caller(key=key, team=key.team, membership=membership)


# Each process keeps the callers it built, by key hash, beside the row of the key, its team,
# its person and their membership they were built from: a request reads that row (one query of
# plain columns) and builds the caller again only when any of it changed.
_CALLERS: dict[str, tuple[tuple[Any, ...], Caller]] = {}
_CALLERS_LOCK = threading.Lock()
CALLERS_KEPT = 4096
_KEY_SQL: list[str] = []


def _key_sql() -> str:
    if not _KEY_SQL:
        quote = connection.ops.quote_name
        key_columns = [f"k.{quote(f.column)}" for f in ApiKey._meta.concrete_fields
                       if f.name != "last_used_at"]  # moved by use, not a change of the caller
        member_columns = [f"m.{quote(f.column)}" for f in Membership._meta.concrete_fields]
        user, team = get_user_model()._meta, Team._meta
        _KEY_SQL.append(
            f"SELECT {', '.join(key_columns + member_columns)}, t.{quote('name')}, "  # noqa: S608 - model table and column names
            f"u.{quote(user.get_field('is_active').column)}, u.{quote(user.get_field(user.model.USERNAME_FIELD).column)} "
            f"FROM {quote(ApiKey._meta.db_table)} k "
            f"JOIN {quote(team.db_table)} t ON t.id = k.team_id "
            f"JOIN {quote(user.db_table)} u ON u.{quote(user.pk.column)} = k.user_id "
            f"LEFT JOIN {quote(Membership._meta.db_table)} m ON m.team_id = k.team_id AND m.user_id = k.user_id "
            "WHERE k.key_hash = %s")
    return _KEY_SQL[0]


def _key_row(key_hash: str) -> tuple[Any, ...] | None:
    with connection.cursor() as cursor:
        cursor.execute(_key_sql(), [key_hash])
        row = cursor.fetchone()
    return tuple(row) if row is not None else None


def _caller_read(key_hash: str) -> tuple[ApiKey | None, Membership | None]:
    key = ApiKey.objects.select_related("team", "user").filter(key_hash=key_hash).first()
    if key is None:
        return None, None
    membership = Membership.objects.filter(team_id=key.team_id, user_id=key.user_id).first()
    if membership is not None:
        membership.team, membership.user = key.team, key.user
    return key, membership


def scope_required(caller: Caller, scope: str) -> None:
    """403 unless the key carries ``scope``."""
    if not caller.key.has_scope(scope):
        raise ApiKeyRefused(f"This API key ({caller.key.prefix}…) does not have the '{scope}' "
                            "scope. Create a key with it.", status=403, code="insufficient_scope")
