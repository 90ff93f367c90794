from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from .costs.budgets import banner_lines, request_budget_states


def budget_banner(request: HttpRequest) -> dict[str, Any]:
    """The budget banner's lines for the active team and user: one query without budgets, and
    only on pages that show it (the value is computed when the template reads it); a page that
    shows the budgets too reads them once (``request_budget_states``)."""
    team = getattr(request, "team", None)
    user = getattr(request, "user", None)
    if team is None or not getattr(user, "is_authenticated", False):
        return {"budget_banner": []}
    return {"budget_banner": SimpleLazyObject(lambda: banner_lines(request_budget_states(request)))}
