"""The demo's team and its owner, so a newcomer can log in at once (the demo agent comes from
``agents.config.seed``, which builds on this). Idempotent."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction

from .config import read
from .models import Membership, Team

DEMO_TEAM = "Demo team"
DEMO_USERNAME = "demo"


@dataclass(frozen=True)
class SeedResult:
    team: Team
    user: Any
    username: str
    created_user: bool
    # Set only when this run chose or changed the password: it is printed once, never stored.
    password: str | None


@transaction.atomic
def demo_owner_seed(*, password: str | None = None) -> SeedResult:
    """Create the demo team and its owner if missing.

    The password comes from ``password`` or ``DEMO_PASSWORD``; without either, a new account
    gets a random one (returned here, to be printed once) and an existing account keeps its own.
    """
    password = password or read("DEMO_PASSWORD") or None
    User = get_user_model()
    user = User.objects.filter(username=DEMO_USERNAME).first()
    created_user = user is None
    if created_user:
        password = password or secrets.token_urlsafe(9)
        user = User.objects.create_user(username=DEMO_USERNAME, password=password)
    elif password:
        user.set_password(password)
        user.save(update_fields=["password"])

    team = Team.objects.filter(memberships__user=user, name=DEMO_TEAM).first()
    if team is None:
        team = Team.objects.create(name=DEMO_TEAM)
    Membership.objects.update_or_create(team=team, user=user, defaults={"role": Membership.Role.OWNER})
    return SeedResult(team=team, user=user, username=DEMO_USERNAME, created_user=created_user, password=password)
