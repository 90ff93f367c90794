"""The named people of the tests and the throwaway stacks (CONVENTIONS.md: personas).

alice owns Team A, bob is a member of Team A, vera a viewer of Team A, charlie owns Team B.
The unit tests' fixtures and ``agentsite.stack.seed`` (browser tests, benchmarks) both create
them here, so a persona means the same everywhere. Platform-level: teams and accounts only,
nothing of ``agents`` or ``traces``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib.auth import get_user_model

from .models import Membership, Team

TEAM_A = "Team A"
TEAM_B = "Team B"
# username -> (team, role)
PERSONAS: dict[str, tuple[str, str]] = {
    "alice": (TEAM_A, Membership.Role.OWNER),
    "bob": (TEAM_A, Membership.Role.MEMBER),
    "vera": (TEAM_A, Membership.Role.VIEWER),
    "charlie": (TEAM_B, Membership.Role.OWNER),
}


def persona_password(username: str) -> str:
    """The password a persona gets unless the caller chooses one for everybody."""
    return f"{username}-pass-123"


def team_get_or_create(*, name: str) -> Team:
    """The (oldest) team called ``name``; created when there is none."""
    return Team.objects.filter(name=name).order_by("pk").first() or Team.objects.create(name=name)


def member_add(*, team: Team, username: str, role: str = Membership.Role.MEMBER,
               password: str | None = None) -> Any:
    """``username`` (created if missing, with ``password`` or ``persona_password``) holds
    ``role`` in ``team``. An existing account keeps its password."""
    user_model = get_user_model()
    user = user_model.objects.filter(username=username).first() or user_model.objects.create_user(
        username=username, password=password or persona_password(username), email=f"{username}@example.com")
    Membership.objects.update_or_create(team=team, user=user, defaults={"role": role})
    return user


def personas_seed(*, names: Iterable[str] = tuple(PERSONAS), password: str | None = None) -> dict[str, Any]:
    """Create the personas ``names`` with their teams and memberships (idempotent); returns
    ``{username: user}``. ``password`` is everybody's; without it each has ``persona_password``."""
    people = {}
    for username in names:
        team_name, role = PERSONAS[username]
        people[username] = member_add(team=team_get_or_create(name=team_name), username=username, role=role,
                                      password=password)
    return people
