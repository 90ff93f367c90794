"""Helpers of the cost, re-pricing and budget tests: a team price for the demo model, turns run
through the real task, recorder and roll-ups, and the ledger's totals."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from django.db.models import Sum

from tests.members import member_of
from traces.models import ConversationCostRollup, CostRollup, ModelPrice, Step, Trace

EARLY = datetime(2020, 1, 1, tzinfo=UTC)
STEP_TOKENS = ("input_tokens", "output_tokens", "cache_write_tokens", "cache_read_tokens", "reasoning_tokens")


def priced_demo(team, *, model: str = "demo", inp: str = "3", out: str = "15", prefix: bool = False,
                aliases: tuple[str, ...] = ("demo-fast", "demo-careful"), since=EARLY) -> ModelPrice:
    """The team pays for the demo model (so its turns cost something)."""
    version = ModelPrice.objects.filter(team=team, provider_kind="demo", model=model).count() + 1
    return ModelPrice.objects.create(team=team, provider_kind="demo", model=model, aliases=list(aliases),
                                     prefix=prefix, input_per_mtok=Decimal(inp),
                                     output_per_mtok=Decimal(out), effective_from=since, version=version)


def run(conversation, user, text: str = "call the current_time tool 2 times") -> Trace:
    from agents.turns.services import turn_start
    from agents.turns.tasks import turn_run

    trace = turn_start(conversation=conversation, membership=member_of(user, conversation), text=text)
    turn_run(trace.pk)
    trace.refresh_from_db()
    return trace


def steps_total(**filters) -> Decimal:
    return sum((s.cost_usd or Decimal(0) for s in Step.objects.filter(kind="llm_request", **filters)), Decimal(0))


def ledger_total(model=CostRollup, **filters) -> Decimal:
    units = model.objects.filter(**filters).aggregate(s=Sum("cost_units"))["s"] or 0
    return Decimal(units) * Decimal("1e-10")


def ledger_rows(model=CostRollup) -> list[tuple]:
    names = [f.name for f in model._meta.concrete_fields if f.name != "id"]
    return sorted(tuple(getattr(r, n if n != "team" else "team_id") for n in names) for r in model.objects.all())


def conversation_ledger_total(**filters) -> Decimal:
    return ledger_total(ConversationCostRollup, **filters)
