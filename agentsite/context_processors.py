from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest


def teams(request: HttpRequest) -> dict[str, Any]:
    """The active team, the user's role in it, and their other teams (for the switcher)."""
    return {
        "team": getattr(request, "team", None),
        "membership": getattr(request, "membership", None),
        "memberships": getattr(request, "memberships", []),
        "open_signup": settings.OPEN_SIGNUP,
        "password_reset": settings.PASSWORD_RESET_BY_EMAIL,
    }
