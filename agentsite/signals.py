"""Receivers that keep open websockets in step with access (``agentsite.live``): a membership
removed or changed, an account deactivated."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from .live import recheck_sockets_on_commit
from .models import Membership


@receiver(post_delete, sender=Membership, dispatch_uid="agentsite.membership_deleted")
def membership_deleted(sender: Any, instance: Membership, **kwargs: Any) -> None:
    recheck_sockets_on_commit([instance.user_id])


@receiver(post_save, sender=Membership, dispatch_uid="agentsite.membership_saved")
def membership_saved(sender: Any, instance: Membership, created: bool, **kwargs: Any) -> None:
    if not created:  # a new membership takes nothing away
        recheck_sockets_on_commit([instance.user_id])


@receiver(post_save, sender=settings.AUTH_USER_MODEL, dispatch_uid="agentsite.user_saved")
def user_saved(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
    if not created and not instance.is_active:
        recheck_sockets_on_commit([instance.pk])
