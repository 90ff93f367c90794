"""Before a turn starts: the rate limits of the person and of the API key it comes through
(``agentsite.ratelimit``), and the budgets (``traces.costs.budgets``) of the team, the person and
the key. One path for every scope and every way in (the chat and the API), with the budgets' own
comparison; inside the turn, ``agents.turns.budgets`` keeps checking the same budgets before every
model request.
"""

from __future__ import annotations

import hashlib
import math
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.utils import timezone

from agents.team_config import kept
from agentsite.models import ApiKey, Membership
from agentsite.ratelimit import LimiterUnavailable, Window, limits_admit, limits_settle
from traces.costs.budgets import budget_decide, budget_scope, budget_states
from traces.models import Budget

LIMITER_DOWN_RETRY_S = 5


class QuotaExceeded(ValidationError):
    """A turn refused before it started: a rate limit or a blocking budget. ``retry_after_s``
    is when trying again can help (None: it cannot, without a change). A ``ValidationError``, so
    the chat shows its message where it shows any refused message; the API answers 429."""

    def __init__(self, message: str, *, retry_after_s: int | None, code: str) -> None:
        super().__init__(message, code=code)
        self.message = message
        self.retry_after_s = retry_after_s
        self.code = code


def quota_windows(*, membership: Membership | None, api_key: ApiKey | None,
                  end_user: str = "") -> list[Window]:
    """The windows a turn falls under: its end user's within the key (when the key sets one),
    its key's, then its person's."""
    windows = []
    if api_key is not None and end_user and (api_key.end_user_rpm_limit or api_key.end_user_tpm_limit):
        # The end user's id is the caller's; its hash keeps it out of Redis's key names.
        digest = hashlib.sha256(end_user.encode()).hexdigest()[:24]
        windows.append(Window(f"key:{api_key.uuid.hex}:end-user:{digest}", "This end user's",
                              api_key.end_user_rpm_limit, api_key.end_user_tpm_limit))
    if api_key is not None:
        # Public ids, not row ids: a row id can come back (a restored database, a test's
        # rolled-back rows) while Redis still holds the old window.
        windows.append(Window(f"key:{api_key.uuid.hex}", f"This API key's ({api_key.prefix}…)",
                              api_key.rpm_limit, api_key.tpm_limit))
    if membership is not None:
        windows.append(Window(f"member:{membership.uuid.hex}", "Your",
                              membership.rpm_limit, membership.tpm_limit))
    return windows


def turn_admit(*, membership: Membership | None, api_key: ApiKey | None, request_id: str,
               tokens: int, end_user: str = "") -> list[str]:
    """Take this turn's place in its rate-limit windows, or raise ``QuotaExceeded``. Returns the
    scopes that hold a token reservation (to settle when the turn ends)."""
    windows = quota_windows(membership=membership, api_key=api_key, end_user=end_user)
    try:
        refusal = limits_admit(windows, request_id=request_id, tokens=tokens)
    except LimiterUnavailable as exc:
        raise QuotaExceeded("The rate limiter cannot be reached right now, so the request was "
                            "not started. Try again in a few seconds.",
                            retry_after_s=LIMITER_DOWN_RETRY_S, code="rate_limiter_unavailable") from exc
    if refusal is not None:
        raise QuotaExceeded(refusal.message, retry_after_s=refusal.retry_after_s,
                            code=f"rate_limit_{refusal.kind}")
    return [w.scope for w in windows if w.tpm]


def turn_settle(*, scopes: list[str], request_id: str, tokens: int) -> None:
    limits_settle(scopes, request_id=request_id, tokens=tokens)


def _reset_in_s(period: str, now: datetime) -> int:
    local = timezone.localtime(now)
    midnight = (local + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == Budget.Period.DAY:
        until = midnight
    else:
        until = (local.replace(day=1) + timedelta(days=32)).replace(day=1, hour=0, minute=0,
                                                                     second=0, microsecond=0)
    return max(1, math.ceil((until - local).total_seconds()))


def budgets_admit(*, team_id: int, user_id: int | None, api_key_id: int | None,
                  estimate: Decimal = Decimal(0), now: Any = None) -> None:
    """Refuse (``QuotaExceeded``) a turn a blocking budget would refuse at its first model
    request: the same states and the same comparison as inside the turn. ``route_down`` and
    ``warn`` budgets let it start (the turn routes or warns itself)."""
    applies = kept(team_id, ("budgets apply", user_id, api_key_id), lambda: Budget.objects.filter(
        team_id=team_id, enabled=True).filter(budget_scope(user_id=user_id, api_key_id=api_key_id)).exists())
    if not applies:
        return  # most teams: no budget, no spend to add up
    states = budget_states(team_id=team_id, user_id=user_id, api_key_id=api_key_id)
    verdict = budget_decide(states, estimate=estimate)
    if verdict.action != "block" or verdict.state is None:
        return
    raise QuotaExceeded(verdict.message,
                        retry_after_s=_reset_in_s(verdict.state.budget.period, now or timezone.now()),
                        code="budget_exceeded")
