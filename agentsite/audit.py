"""The audit trail of configuration changes: ``audit_record`` writes one row per create, update
or delete; ``snapshot`` turns a model instance into the JSON stored as before/after; the admin
mixin ``AuditedAdmin`` records every change made through an admin page.

Secrets never reach the trail: fields named in ``SECRET_FIELDS`` or ending in ``_encrypted``
are stored as "set"/"" so a reader sees that a key was changed, not the key."""

from __future__ import annotations

import json
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.http import HttpRequest

from .models import AuditEvent, Team

SECRET_FIELDS = {"api_key_encrypted", "headers_encrypted", "token_hash", "key_hash", "password"}
SKIPPED_FIELDS = {"created_at", "updated_at"}


def snapshot(instance: models.Model) -> dict[str, Any]:
    """The instance's fields (many-to-many as sorted ids), JSON-safe, secrets masked."""
    data: dict[str, Any] = {}
    opts = instance._meta
    for field in opts.concrete_fields:
        if field.name in SKIPPED_FIELDS:
            continue
        value = field.value_from_object(instance)
        if field.name in SECRET_FIELDS or field.name.endswith("_encrypted"):
            value = "set" if value else ""
        data[field.name] = value
    if instance.pk is not None:
        for field in opts.many_to_many:
            data[field.name] = sorted(getattr(instance, field.name).values_list("pk", flat=True))
    return json.loads(json.dumps(data, cls=DjangoJSONEncoder))


def _team_of(instance: models.Model) -> Team | None:
    if isinstance(instance, Team):
        return instance
    team = getattr(instance, "team", None)
    return team if isinstance(team, Team) else None


def audit_record(*, actor: Any, action: str, instance: models.Model, before: dict | None = None,
                 after: dict | None = None, team: Team | None = None) -> AuditEvent | None:
    """Write one audit row. For updates that changed nothing, nothing is written."""
    team = team or _team_of(instance)
    if team is None:
        return None
    if action == AuditEvent.Action.UPDATE and before == after:
        return None
    authenticated = getattr(actor, "is_authenticated", False)
    return AuditEvent.objects.create(
        team=team,
        actor=actor if authenticated else None,
        actor_name=actor.get_username() if authenticated else "",
        action=action,
        object_type=instance._meta.label,
        object_id=str(instance.pk),
        object_repr=str(instance)[:200],
        before=before,
        after=after,
    )


class AuditedAdmin:
    """Admin mixin: records creates, changes and deletes (single and bulk) with before/after.

    Django calls ``log_addition``/``log_change`` after the object *and* its many-to-many
    relations are saved, so the "after" snapshot is complete; the "before" snapshot is taken
    when the change form loads the object."""

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None):
        obj = super().get_object(request, object_id, from_field)
        if obj is not None and request.method == "POST":
            request._audit_before = snapshot(obj)
        return obj

    def log_addition(self, request: HttpRequest, obj: models.Model, message: Any):
        audit_record(actor=request.user, action=AuditEvent.Action.CREATE, instance=obj, after=snapshot(obj))
        return super().log_addition(request, obj, message)

    def log_change(self, request: HttpRequest, obj: models.Model, message: Any):
        audit_record(actor=request.user, action=AuditEvent.Action.UPDATE, instance=obj,
                     before=getattr(request, "_audit_before", None), after=snapshot(obj))
        return super().log_change(request, obj, message)

    def log_deletions(self, request: HttpRequest, queryset: models.QuerySet):
        for obj in queryset:
            audit_record(actor=request.user, action=AuditEvent.Action.DELETE, instance=obj, before=snapshot(obj))
        return super().log_deletions(request, queryset)
