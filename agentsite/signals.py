"""Receivers that keep open websockets in step with access (``agentsite.live``): a membership
removed or changed, an account deactivated. Senders are named lazily ("agentsite.Membership"),
so this module loads before the models do; ``connect()`` runs in the app's ``ready()``."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models.signals import post_delete, post_save

from .live import recheck_sockets_on_commit


def membership_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    recheck_sockets_on_commit([instance.user_id])


def membership_saved(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
    if not created:  # a new membership takes nothing away
        recheck_sockets_on_commit([instance.user_id])


def user_saved(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
    if not created and not instance.is_active:
        recheck_sockets_on_commit([instance.pk])


def connect() -> None:
    post_delete.connect(membership_deleted, sender="agentsite.Membership",
                        dispatch_uid="agentsite.membership_deleted")
    post_save.connect(membership_saved, sender="agentsite.Membership",
                      dispatch_uid="agentsite.membership_saved")
    post_save.connect(user_saved, sender=settings.AUTH_USER_MODEL, dispatch_uid="agentsite.user_saved")
