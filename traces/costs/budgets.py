"""Budgets: how much a team, or one of its people, has spent in the current day or month, and
what that means for the next model request (ZeroClaw's cost ledger, §13 of the runtime spec).

Spend comes from the cost roll-ups, which already hold every finished request of the running
turn (the recorder writes each one before the loop goes on), so "spent" is the period's spend
including this turn's; the check adds an estimate of the next request. As in ZeroClaw:

* ``spent + estimate > limit`` is *exceeded* (the day is checked before the month);
* ``spent + estimate >= warn_at_percent`` of the limit is a *warning* (a banner in the site,
  a note on the trace).

What an exceeded budget does depends on its mode: ``warn`` lets the request go, ``block``
refuses it with a message saying what was spent of which budget (and what to do), ``route_down`` sends it and the rest of the
turn to the budget's cheaper route.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Any

from django.db.models import BigIntegerField, OuterRef, Q, QuerySet, Subquery, Sum
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce
from django.utils import timezone

from agentsite.db.prepared import Prepared

from ..models import Budget, CostRollup
from .pricing import units_usd

Mode = Budget.Mode
Period = Budget.Period


@dataclass
class BudgetState:
    """A budget and what has been spent against it in its current period."""

    budget: Budget
    spent: Decimal

    @property
    def limit(self) -> Decimal:
        return Decimal(self.budget.limit_usd)

    @property
    def percent(self) -> int:
        return int(self.spent * 100 / self.limit) if self.limit > 0 else 0

    def level(self, estimate: Decimal = Decimal(0)) -> str:
        """"exceeded", "warning" or "ok" for a request estimated at ``estimate``."""
        projected = self.spent + max(estimate, Decimal(0))
        if projected > self.limit:
            return "exceeded"
        warn = Decimal(min(max(self.budget.warn_at_percent, 0), 100)) / 100
        return "warning" if projected >= self.limit * warn else "ok"

    @property
    def is_user(self) -> bool:
        return self.budget.user_id is not None

    @property
    def is_key(self) -> bool:
        return self.budget.api_key_id is not None

    @property
    def scope(self) -> str:
        return "key" if self.is_key else "user" if self.is_user else "team"

    @property
    def whose(self) -> str:
        if self.is_key:
            return f"This API key's ({self.budget.api_key.prefix}…)"
        return "Your" if self.is_user else "The team's"

    @property
    def period_word(self) -> str:
        return self.budget.period_adjective

    @property
    def resets(self) -> str:
        zone = timezone.get_current_timezone_name()
        if self.budget.period == Period.DAY:
            return f"after midnight ({zone})"
        return f"on the 1st of next month ({zone})"

    def exceeded_message(self, estimate: Decimal = Decimal(0)) -> str:
        """What was spent against which limit, and what the person can do. ZeroClaw's sentence
        (``budget_exceeded_message``) rounds the limit to cents, so a $0.001 budget reads
        "$0.00"; the amounts here keep their digits. When the spend alone is still under the
        limit, it is the next request's estimate that would cross it, and the sentence says so
        (never "exceeded: $0.029832 of $0.03")."""
        if self.spent <= self.limit and estimate > 0:
            return (f"Budget reached: {money(self.spent)} spent of {self.whose.lower()} "
                    f"{self.period_word} budget of {money(self.limit)}, and the next model request "
                    f"(about {money(estimate)}) would go over it, so it was not made. Ask a team "
                    f"admin to raise it, or try again {self.resets}.")
        return (f"Budget exceeded: {money(self.spent)} spent of {self.whose.lower()} "
                f"{self.period_word} budget of {money(self.limit)}, so no further model requests "
                f"are made. Ask a team admin to raise it, or try again {self.resets}.")

    def banner(self) -> str:
        """The site's banner line from the warning threshold on."""
        amounts = f"{money(self.spent)} of {money(self.limit)}"
        what = {Mode.BLOCK: "then new requests are refused until it resets",
                Mode.ROUTE_DOWN: "then turns switch to a cheaper model",
                Mode.WARN: "this is a warning only"}[Mode(self.budget.mode)]
        used = "used up" if self.spent >= self.limit else f"{self.percent}% used"
        return f"{self.whose} {self.period_word} budget is {used} ({amounts}); {what}."

    def note(self, *, status: str, estimate: Decimal) -> dict[str, Any]:
        """What the trace records about this budget (``routing["budget"]``)."""
        return {"status": status, "budget": str(self.budget.uuid),
                "scope": self.scope, "period": self.budget.period,
                "mode": self.budget.mode, "spent_usd": str(self.spent),
                "limit_usd": str(self.limit), "estimate_usd": str(estimate)}


def money(amount: Decimal) -> str:
    """Dollars as people read them: $12.50, and small amounts with their digits, as the
    chat's meter shows them (the ``usd`` filter): $0.2151, $0.0004."""
    if amount >= 1 or amount == amount.quantize(Decimal("0.01")):
        return f"${amount:,.2f}"
    text = f"{amount:.4f}"
    if amount < Decimal("0.01") or Decimal(text) == Decimal(text).quantize(Decimal("0.01")):
        text = f"{amount:.6f}"  # rounding would hide it: $0.029998 is not $0.03
    whole, _, digits = text.rstrip("0").partition(".")
    return f"${whole}.{digits.ljust(2, '0')}"


def _spent(since: date, until: date, *, by: str = "") -> Coalesce:
    """The team's spend in the period, or only its person's (``by="user_id"``) or its API
    key's (``by="api_key_id"``)."""
    rows = CostRollup.objects.filter(team_id=OuterRef("team_id"), day__gte=since, day__lte=until)
    if by:
        rows = rows.filter(**{by: OuterRef(by)})
    total = rows.order_by().values("team_id").annotate(s=Sum("cost_units")).values("s")[:1]
    return Coalesce(Subquery(total, output_field=BigIntegerField()), 0)


def with_spend(budgets: QuerySet[Budget], *, today: date | None = None) -> QuerySet[Budget]:
    """``budgets`` with what their team and user spent today and this month (from the
    roll-ups, as subqueries: one query for any number of budgets)."""
    today = today or timezone.localdate()
    month = today.replace(day=1)
    return budgets.annotate(team_day=_spent(today, today), team_month=_spent(month, today),
                            user_day=_spent(today, today, by="user_id"),
                            user_month=_spent(month, today, by="user_id"),
                            key_day=_spent(today, today, by="api_key_id"),
                            key_month=_spent(month, today, by="api_key_id"))


def spent_of(budget: Budget) -> Decimal:
    """The spend of a budget annotated by ``with_spend``, in its scope and period."""
    prefix = "key" if budget.api_key_id else "user" if budget.user_id else "team"
    return units_usd(getattr(budget, f"{prefix}_{budget.period}", 0))


def budget_scope(*, user_id: int | None, api_key_id: int | None = None) -> Q:
    """The budgets that apply to a turn of ``user_id`` through ``api_key_id``: the team's own,
    the person's, the key's."""
    scope = Q(user__isnull=True, api_key__isnull=True)
    if user_id:
        scope |= Q(user_id=user_id)
    if api_key_id:
        scope |= Q(api_key_id=api_key_id)
    return scope


def budget_states(*, team_id: int, user_id: int | None, api_key_id: int | None = None,
                  today: date | None = None, related: bool = True) -> list[BudgetState]:
    """The enabled budgets that apply to ``user_id`` in the team, through ``api_key_id`` when
    the turn came through a key (``budget_scope``), with the spend of their current period:
    one query (each budget's spend a subquery over the month's roll-ups). ``related``: with
    the rows a turn acts on (the key, the cheaper route's provider, the person); a page that
    only shows the budgets goes without."""
    today = today or timezone.localdate()
    budgets = _states_read(team_id, user_id or 0, api_key_id or 0, today.replace(day=1), today,
                           of_user=bool(user_id), of_key=bool(api_key_id), related=related)
    return [BudgetState(budget, units_usd(budget.spent_units)) for budget in budgets]


def _states(team_id: int, user_id: int, api_key_id: int, month: date, today: date, *,
            of_user: bool, of_key: bool, related: bool) -> QuerySet[Budget]:
    budgets = (Budget.objects.filter(team_id=team_id, enabled=True)
               .filter(budget_scope(user_id=user_id if of_user else None, api_key_id=api_key_id if of_key else None))
               .annotate(spent_units=_spent_in_scope(month, today))
               .order_by("period", "-user_id"))
    if related:
        budgets = budgets.select_related("user", "api_key", "route_down_provider")
    return budgets


# Every page reads it for the banner, and every turn's start: compiled once per process.
_states_read = Prepared(_states)


def _spent_in_scope(month: date, today: date) -> RawSQL:
    """A budget's spend in its scope (its API key's, else its person's, else the team's) and
    its current period (today, or this month from ``month``, its first day), as ``with_spend``
    counts it: a correlated sum over the month's roll-ups. Written out: building it from the
    ORM's expressions cost four times what running it does."""
    budget, rollup = f'"{Budget._meta.db_table}"', f'"{CostRollup._meta.db_table}"'
    return RawSQL(  # noqa: S611 - the models' table names, values as parameters
        f"COALESCE((SELECT SUM(r.cost_units) FROM {rollup} r"  # noqa: S608 - the same
        f" WHERE r.team_id = {budget}.team_id AND r.day >= %s AND r.day <= %s"
        f" AND (r.day = %s OR {budget}.period <> %s)"
        f" AND ({budget}.api_key_id IS NULL OR r.api_key_id = {budget}.api_key_id)"
        f" AND ({budget}.user_id IS NULL OR {budget}.api_key_id IS NOT NULL"
        f" OR r.user_id = {budget}.user_id)), 0)",
        (month, today, today, Period.DAY), output_field=BigIntegerField())


def request_budget_states(request: Any) -> list[BudgetState]:
    """``budget_states`` of the person asking in the request's active team, read once per
    request: the page's own figures and the site's banner share them."""
    team, user = getattr(request, "team", None), getattr(request, "user", None)
    if team is None or not getattr(user, "is_authenticated", False):
        return []
    key = (team.pk, user.pk)
    read = getattr(request, "_budget_states", None)
    if read is None or read[0] != key:
        # A page's budgets are the team's and the person's (never a key's): nothing related
        # to read with them.
        read = request._budget_states = (key, budget_states(team_id=team.pk, user_id=user.pk, related=False))
    return read[1]


@dataclass
class Verdict:
    """What the budgets say about the next request."""

    action: str  # "allow", "warn", "block" or "route_down"
    state: BudgetState | None = None
    warnings: tuple[BudgetState, ...] = ()
    estimate: Decimal = Decimal(0)

    @property
    def message(self) -> str:
        return self.state.exceeded_message(self.estimate) if self.state is not None else ""


def budget_decide(states: list[BudgetState], *, estimate: Decimal) -> Verdict:
    """Day budgets before month budgets, a key's and a person's before the team's: the first exceeded
    ``block`` budget blocks; otherwise the first exceeded ``route_down`` one routes down;
    warnings are every budget at or past its threshold."""
    ordered = sorted(states, key=lambda s: (s.budget.period != Period.DAY, not s.is_key, not s.is_user))
    levels = [(s, s.level(estimate)) for s in ordered]
    warnings = tuple(s for s, level in levels if level != "ok")
    for mode in (Mode.BLOCK, Mode.ROUTE_DOWN):
        for state, level in levels:
            if level == "exceeded" and state.budget.mode == mode:
                return Verdict("block" if mode == Mode.BLOCK else "route_down", state, warnings,
                               estimate)
    return Verdict("warn" if warnings else "allow", warnings[0] if warnings else None, warnings,
                   estimate)


def banner_lines(states: list[BudgetState]) -> list[str]:
    """Lines for the site's banner: the budgets of ``states`` from their warning threshold on."""
    return [s.banner() for s in states if s.level() != "ok"]
