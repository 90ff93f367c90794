"""Actions on teams, memberships and invitations. Every change goes through here, checks who
may make it, and announces itself to the team's live group after commit."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from .audit import audit_record, snapshot
from .models import AuditEvent, Invitation, Membership, Team

logger = logging.getLogger(__name__)
Role = Membership.Role
User = get_user_model()


class TeamActionError(ValidationError):
    """A refused team action, with a message meant for the person who tried it."""


def team_broadcast(*, team: Team, event: str, data: dict[str, Any] | None = None) -> None:
    """Announce ``event`` on the team's group once the current transaction commits.

    The channel layer is a notification only: a failure to deliver is logged, never raised."""

    message = {"type": "team.event", "event": event, "data": data or {}}

    def send() -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        try:
            async_to_sync(layer.group_send)(team.group_name, message)
        except Exception:  # noqa: BLE001 - live updates must never break the action itself
            logger.warning("could not announce %s to team %s", event, team.pk, exc_info=True)

    transaction.on_commit(send)


# -- teams ----------------------------------------------------------------------------------------
@transaction.atomic
def team_create(*, name: str, owner: AbstractBaseUser) -> Team:
    name = name.strip()
    if not name:
        raise TeamActionError("A team needs a name.")
    team = Team.objects.create(name=name[:100])
    Membership.objects.create(team=team, user=owner, role=Role.OWNER)
    return team


@transaction.atomic



# -- memberships ----------------------------------------------------------------------------------
def _owner_count(team: Team) -> int:
    return Membership.objects.filter(team=team, role=Role.OWNER).count()


def _require_manager(actor: Membership, target: Membership) -> None:
    if actor.team_id != target.team_id:
        raise PermissionDenied("That person is not in your team.")
    if not actor.can_manage_members:
        raise PermissionDenied("Only a team owner can change roles or remove members.")


@transaction.atomic
def membership_change_role(*, actor: Membership, membership: Membership, role: str) -> Membership:
    if role not in Role.values:
        raise TeamActionError(f"Unknown role {role!r}.")
    _require_manager(actor, membership)
    # Lock the team's owner rows so two owners demoting each other cannot leave none.
    list(Membership.objects.select_for_update().filter(team_id=membership.team_id, role=Role.OWNER))
    membership.refresh_from_db()
    if membership.role == Role.OWNER and role != Role.OWNER and _owner_count(membership.team) <= 1:
        raise TeamActionError("A team needs at least one owner. Make someone else an owner first.")
    before = snapshot(membership)
    membership.role = role
    membership.save(update_fields=["role"])
    audit_record(actor=actor.user, action=AuditEvent.Action.UPDATE, instance=membership, before=before, after=snapshot(membership))
    team_broadcast(team=membership.team, event="members.changed", data={"user": membership.user_id})
    return membership


@transaction.atomic
def membership_set_limits(*, actor: Membership, membership: Membership, rpm_limit: int | None,
                          tpm_limit: int | None) -> Membership:
    """Set how many requests and tokens a minute the person may start (None: no limit), in the
    chat and through every key they use. Team admins and owners. Audited."""
    if actor.team_id != membership.team_id:
        raise PermissionDenied("That person is not in your team.")
    if not actor.can_configure:
        raise PermissionDenied("Only a team admin or owner can set people's limits.")
    membership.refresh_from_db()
    before = snapshot(membership)
    membership.rpm_limit = rpm_limit or None
    membership.tpm_limit = tpm_limit or None
    membership.save(update_fields=["rpm_limit", "tpm_limit"])
    audit_record(actor=actor.user, action=AuditEvent.Action.UPDATE, instance=membership, before=before,
                 after=snapshot(membership))
    team_broadcast(team=membership.team, event="members.changed", data={"user": membership.user_id})
    return membership


@transaction.atomic
def membership_remove(*, actor: Membership, membership: Membership) -> None:
    if actor.pk != membership.pk:
        _require_manager(actor, membership)
    list(Membership.objects.select_for_update().filter(team_id=membership.team_id, role=Role.OWNER))
    if membership.role == Role.OWNER and _owner_count(membership.team) <= 1:
        raise TeamActionError("The last owner cannot leave or be removed. Make someone else an owner first.")
    team = membership.team
    user_id = membership.user_id
    audit_record(actor=actor.user, action=AuditEvent.Action.DELETE, instance=membership, before=snapshot(membership))
    membership.delete()
    team_broadcast(team=team, event="members.changed", data={"user": user_id})


# -- invitations ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class IssuedInvitation:
    invitation: Invitation
    token: str  # shown once; only its hash is stored


def invitation_create(*, actor: Membership, role: str, email: str = "", ttl_hours: int | None = None) -> IssuedInvitation:
    if not actor.can_invite:
        raise PermissionDenied("Only a team admin or owner can invite people.")
    if role not in Role.values:
        raise TeamActionError(f"Unknown role {role!r}.")
    if Membership.rank(role) > Membership.rank(actor.role):
        raise PermissionDenied("You cannot invite someone with a higher role than your own.")
    token, token_hash = Invitation.new_token()
    hours = ttl_hours or settings.INVITATION_TTL_HOURS
    invitation = Invitation.objects.create(
        team=actor.team,
        role=role,
        email=email.strip(),
        token_hash=token_hash,
        created_by=actor.user,
        expires_at=timezone.now() + timedelta(hours=hours),
    )
    team_broadcast(team=actor.team, event="invitations.changed")
    return IssuedInvitation(invitation, token)


def invitation_revoke(*, actor: Membership, invitation: Invitation) -> None:
    if not actor.can_invite or actor.team_id != invitation.team_id:
        raise PermissionDenied("Only a team admin or owner can revoke invitations.")
    Invitation.objects.filter(pk=invitation.pk, accepted_at__isnull=True).update(revoked_at=timezone.now())
    team_broadcast(team=invitation.team, event="invitations.changed")


def invitation_for_token(token: str) -> Invitation | None:
    """The invitation behind a link, whatever its state (the page explains expired/used)."""
    if not token or len(token) > 200:
        return None
    return Invitation.objects.select_related("team").filter(token_hash=Invitation.hash_token(token)).first()


@transaction.atomic
def invitation_accept(*, token: str, user: AbstractBaseUser) -> Membership:
    """Join the invitation's team. Single use: the conditional update lets exactly one
    acceptance through even when two arrive at once."""
    invitation = invitation_for_token(token)
    if invitation is None:
        raise TeamActionError("This invitation link is not valid.")
    if invitation.state != "pending":
        raise TeamActionError(f"This invitation link has {_STATE_WORDS[invitation.state]}. Ask a team admin for a new one.")
    existing = Membership.objects.filter(team=invitation.team, user=user).first()
    if existing is not None:
        raise TeamActionError(f"You are already a member of {invitation.team.name}.")
    claimed = Invitation.objects.pending().filter(pk=invitation.pk).update(accepted_at=timezone.now(), accepted_by=user)
    if claimed != 1:
        raise TeamActionError("This invitation link has just been used. Ask a team admin for a new one.")
    try:
        with transaction.atomic():
            membership = Membership.objects.create(team=invitation.team, user=user, role=invitation.role)
    except IntegrityError as exc:
        raise TeamActionError(f"You are already a member of {invitation.team.name}.") from exc
    audit_record(actor=user, action=AuditEvent.Action.CREATE, instance=membership, after=snapshot(membership))
    team_broadcast(team=invitation.team, event="members.changed", data={"user": user.pk})
    return membership


_STATE_WORDS = {"accepted": "already been used", "revoked": "been revoked", "expired": "expired"}


@transaction.atomic
def user_signup_with_invitation(*, token: str, username: str, password: str, email: str = "") -> tuple[AbstractBaseUser, Membership]:
    """Create an account and join through an invitation in one step (all or nothing)."""
    user = User.objects.create_user(username=username, email=email, password=password)
    membership = invitation_accept(token=token, user=user)
    return user, membership


@transaction.atomic
def user_signup_with_team(*, username: str, password: str, email: str = "") -> tuple[AbstractBaseUser, Team]:
    """Open sign-up: a new account and a team of its own, which it owns."""
    user = User.objects.create_user(username=username, email=email, password=password)
    team = team_create(name=f"{username}'s team", owner=user)
    return user, team
