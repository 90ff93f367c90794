"""The cost ledger: daily roll-ups of model requests, kept exact.

A finished model request (an ``llm_request`` step that is ``ok`` or ``error``) has a *share*:
its day (in ``TIME_ZONE``), provider, model, one call, whether it was unpriced, whether its
tokens are an estimate, its cost and its tokens. Whenever a step is written or corrected, the difference between its share before and
after is added, in the same transaction, to its trace's totals and to the two roll-up tables
(``CostRollup`` per agent/user/provider/model, ``ConversationCostRollup`` per conversation). So
at every commit: sum of step costs = trace cost = roll-up total, to the 1e-10 USD.

Roll-ups are a ledger of spend: deleting a conversation (whose traces go with it) leaves its
spend in them, so budgets do not reset when someone deletes a chat. ``rollups_rebuild``
recomputes them from the steps that exist (a maintenance task, and the migration that created
them).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import date
from decimal import Decimal
from typing import Any

from django.db import connection, transaction
from django.db.models import BigIntegerField, Count, F, Q, Sum
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce, Round, TruncDate
from django.utils import timezone

from agents.runtime.pricing import TOKEN_FIELDS
from agentsite.db.returning import update_returning

from ..models import ConversationCostRollup, CostRollup, Step, Trace
from .pricing import cost_units

FINISHED = ("ok", "error")


@dataclass(frozen=True, kw_only=True)
class LedgerAmounts:
    """What model requests used and cost, as both roll-up tables keep it (the columns of
    ``CostAmounts``; ``cost_units`` in 1e-10 USD)."""

    calls: int = 0
    unpriced_calls: int = 0
    estimated_calls: int = 0
    cost_units: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    reasoning_tokens: int = 0
    # What cache misses cost, recorded on the step (``meta["cache_lost_units"]``) when it was
    # priced: the costs page reads it here instead of comparing requests.
    cache_lost_units: int = 0


AMOUNT_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(LedgerAmounts))
# What a step's share moves: the ledger's amounts, and the trace's count of prefix-priced calls.
SHARE_FIELDS = (*AMOUNT_FIELDS, "prefix_calls")


@dataclass(frozen=True, kw_only=True)
class Share(LedgerAmounts):
    """One finished model request's part of the ledger."""

    day: date
    provider: str
    model: str
    calls: int = 1
    prefix_calls: int = 0

    @property
    def key(self) -> tuple[date, str, str]:
        return (self.day, self.provider, self.model)

    def amounts(self, sign: int = 1) -> dict[str, int]:
        return {name: sign * getattr(self, name) for name in SHARE_FIELDS}


def step_share(step: Step) -> Share | None:
    if step.kind != Step.Kind.LLM_REQUEST or step.status not in FINISHED:
        return None
    meta = step.meta if isinstance(step.meta, dict) else {}
    return Share(
        day=timezone.localdate(step.started_at), provider=step.provider or "",
        model=step.model or "", unpriced_calls=1 if meta.get("unpriced") else 0,
        estimated_calls=1 if meta.get("usage_estimated") else 0,
        prefix_calls=1 if step.price_match == "prefix" else 0, cost_units=cost_units(step.cost_usd),
        cache_lost_units=int(meta.get("cache_lost_units") or 0),
        **{name: int(getattr(step, name) or 0) for name in TOKEN_FIELDS})


def differences(before: Share | None, after: Share | None) -> dict[tuple[date, str, str], dict[str, int]]:
    """What a step's change of share moves in the ledger, per (day, provider, model)."""
    moves: dict[tuple[date, str, str], dict[str, int]] = {}
    for share, sign in ((before, -1), (after, 1)):
        if share is None:
            continue
        bucket = moves.setdefault(share.key, dict.fromkeys(SHARE_FIELDS, 0))
        for name, value in share.amounts(sign).items():
            bucket[name] += value
    return {key: amounts for key, amounts in moves.items() if any(amounts.values())}


@dataclass(frozen=True)
class TraceDims:
    team_id: int
    agent_id: int
    user_id: int
    conversation_id: int
    event_seq: int = 0
    api_key_id: int = 0


def _totals_changes(total: dict[str, int]) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    if total["cost_units"]:
        changes["cost_usd"] = F("cost_usd") + Decimal(total["cost_units"]) * Decimal("1e-10")
    for name in TOKEN_FIELDS:
        if total[name]:
            changes[name] = F(name) + total[name]
    if total["unpriced_calls"]:
        changes["unpriced_calls"] = F("unpriced_calls") + total["unpriced_calls"]
    if total["estimated_calls"]:
        changes["estimated_calls"] = F("estimated_calls") + total["estimated_calls"]
    if total["prefix_calls"]:
        changes["prefix_priced_calls"] = F("prefix_priced_calls") + total["prefix_calls"]
    return changes


TOTAL_FIELDS = ("cost_usd", *TOKEN_FIELDS, "unpriced_calls", "prefix_priced_calls", "estimated_calls")
DIM_FIELDS = ("team_id", "agent_id", "user_id", "conversation_id", "api_key_id")


def share_moved(*, trace_id: int, before: Share | None, after: Share | None,
                bump: bool = True) -> TraceDims | None:
    """Apply a step's change of share to its trace's totals and to the roll-ups. Call inside
    the transaction that wrote the step. When the trace's totals change and ``bump`` is set,
    the trace's event number is bumped (the totals are a change live clients see) and returned
    as ``event_seq``; otherwise ``event_seq`` is 0. None when nothing moved."""
    moves = differences(before, after)
    if not moves:
        return None
    changes = _totals_changes(_summed(moves))
    bumped = bool(changes) and bump
    if bumped:
        changes["event_seq"] = F("event_seq") + 1
    if changes:
        Trace.objects.filter(pk=trace_id).update(**changes)
    row = Trace.objects.filter(pk=trace_id).values(*DIM_FIELDS, "event_seq").get()
    dims = _dims(row, event_seq=row["event_seq"] if bumped else 0)
    ledger_apply(dims, moves)
    return dims


def moves_apply(*, trace_id: int, attempt: int | None, moves: dict[tuple[date, str, str], dict[str, int]],
                new_steps: int = 0) -> tuple[int, dict[str, Any] | None]:
    """A step's write that moves the ledger (``differences``): the trace's totals, its event
    number and step count in one update, only while ``attempt`` owns the trace (else
    ``LookupError``), then the roll-ups. The step's write is one event; the totals' change, a
    change live clients see, is a second one. Returns the last event number taken and the
    trace's totals after it (None when they did not change). Call inside the step's
    transaction."""
    changes = _totals_changes(_summed(moves))
    moved = bool(changes)
    changes["event_seq"] = F("event_seq") + (2 if moved else 1)
    if new_steps:
        changes["step_count"] = F("step_count") + new_steps
    where: dict[str, Any] = {"pk": trace_id}
    if attempt is not None:
        where.update(status=Trace.Status.RUNNING, attempts=attempt)
    row = update_returning(Trace, where, changes, [*DIM_FIELDS, "event_seq", *TOTAL_FIELDS])
    if row is None:
        raise LookupError(f"trace {trace_id} is not owned by attempt {attempt}")
    ledger_apply(_dims(row, event_seq=row["event_seq"] if moved else 0), moves)
    return row["event_seq"], {name: row[name] for name in TOTAL_FIELDS} if moved else None


def _summed(moves: dict[tuple[date, str, str], dict[str, int]]) -> dict[str, int]:
    total = dict.fromkeys(SHARE_FIELDS, 0)
    for amounts in moves.values():
        for name, value in amounts.items():
            total[name] += value
    return total


def _dims(row: dict[str, Any], *, event_seq: int) -> TraceDims:
    return TraceDims(row["team_id"], row["agent_id"] or 0, row["user_id"] or 0,
                     row["conversation_id"] or 0, event_seq, row["api_key_id"] or 0)


def ledger_apply(dims: TraceDims, moves: dict[tuple[date, str, str], dict[str, int]]) -> None:
    """Add amounts per (day, provider, model) of one trace to both roll-up tables."""
    for (day, provider, model), amounts in moves.items():
        ledger = {name: amounts[name] for name in AMOUNT_FIELDS}
        _add(CostRollup, {"team_id": dims.team_id, "day": day, "agent_id": dims.agent_id,
                          "user_id": dims.user_id, "api_key_id": dims.api_key_id,
                          "provider": provider[:100], "model": model[:200]}, ledger)
        _add(ConversationCostRollup, {"team_id": dims.team_id, "day": day,
                                      "conversation_id": dims.conversation_id,
                                      "agent_id": dims.agent_id, "user_id": dims.user_id,
                                      "provider": provider[:100], "model": model[:200]}, ledger)


def moves_of(changes: list[tuple[Share | None, Share | None]]) -> dict[tuple[date, str, str], dict[str, int]]:
    """The summed ledger moves of several steps' (before, after) shares."""
    total: dict[tuple[date, str, str], dict[str, int]] = {}
    for before, after in changes:
        for key, amounts in differences(before, after).items():
            bucket = total.setdefault(key, dict.fromkeys(SHARE_FIELDS, 0))
            for name, value in amounts.items():
                bucket[name] += value
    return {k: v for k, v in total.items() if any(v.values())}


def _add(model: Any, key: dict[str, Any], amounts: dict[str, int]) -> None:
    """Add ``amounts`` to the roll-up row of ``key``, creating it: one statement (an upsert
    on the row's unique key, atomic on both databases), never a read-modify-write."""
    if not any(amounts.values()):
        return
    table = connection.ops.quote_name(model._meta.db_table)
    columns = [model._meta.get_field(name).column for name in key] + list(amounts)
    conflict = [model._meta.get_field(name).column for name in key]
    quote = connection.ops.quote_name
    added = ", ".join(f"{quote(name)} = {table}.{quote(name)} + excluded.{quote(name)}"
                      for name, value in amounts.items() if value)
    values = [connection.ops.adapt_datefield_value(v) if isinstance(v, date) else v
              for v in (*key.values(), *amounts.values())]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(quote(c) for c in columns)}) "  # noqa: S608 - model table and column names, values as parameters
            f"VALUES ({', '.join(['%s'] * len(values))}) "
            f"ON CONFLICT ({', '.join(quote(c) for c in conflict)}) DO UPDATE SET {added}", values)


# -- rebuild ----------------------------------------------------------------------------------------
def _ledger_rows(steps: Any, dims: tuple[str, ...]) -> Any:
    units = Cast(Round(F("cost_usd") * Decimal(10) ** 10), BigIntegerField())
    return (steps.annotate(day=TruncDate("started_at", tzinfo=timezone.get_current_timezone()))
            .values(*dims, "day").order_by()
            .annotate(n_calls=Count("id"),
                      n_unpriced=Count("id", filter=Q(meta__unpriced=True)),
                      n_estimated=Count("id", filter=Q(meta__usage_estimated=True)),
                      n_units=Coalesce(Sum(units), 0),
                      n_cache_lost=Coalesce(Sum(Cast(KT("meta__cache_lost_units"), BigIntegerField())), 0),
                      **{f"n_{name}": Coalesce(Sum(name), 0) for name in TOKEN_FIELDS}))


def _amounts(row: dict[str, Any], model: Any) -> dict[str, int]:
    """A rebuilt row's amounts, as the columns of ``model`` (maybe a migration's historical
    class, without the later ones) hold them."""
    amounts = {"calls": row["n_calls"], "unpriced_calls": row["n_unpriced"],
               "estimated_calls": row["n_estimated"],
               "cost_units": int(row["n_units"]),
               **{name: int(row[f"n_{name}"]) for name in TOKEN_FIELDS}}
    if _has_field(model, "cache_lost_units"):
        amounts["cache_lost_units"] = int(row["n_cache_lost"])
    return amounts


def _has_field(model: Any, name: str) -> bool:
    """Whether ``model`` (maybe a migration's historical class) has the field ``name``."""
    return any(f.name == name for f in model._meta.get_fields())


@transaction.atomic
def rollups_rebuild(*, team_id: int | None = None, models: tuple[Any, Any, Any] | None = None) -> int:
    """Recompute the roll-ups (of one team, or all) from the steps; returns the rows written.
    (A deleted agent or user groups as 0, as the live ledger records it.) ``models`` are the
    Step, CostRollup and ConversationCostRollup classes (a migration passes its own)."""
    step_model, rollup_model, conversation_model = models or (Step, CostRollup, ConversationCostRollup)
    steps = step_model.objects.filter(kind="llm_request", status__in=FINISHED)
    rollups, conversations = rollup_model.objects.all(), conversation_model.objects.all()
    if team_id is not None:
        steps = steps.filter(trace__team_id=team_id)
        rollups, conversations = rollups.filter(team_id=team_id), conversations.filter(team_id=team_id)
    rollups.delete()
    conversations.delete()
    key_dim = ("trace__api_key_id",) if _has_field(rollup_model, "api_key_id") else ()
    rows = [rollup_model(team_id=r["trace__team_id"], day=r["day"], agent_id=r["trace__agent_id"] or 0,
                       user_id=r["trace__user_id"] or 0, provider=r["provider"][:100],
                       model=r["model"][:200], **_amounts(r, rollup_model),
                       **({"api_key_id": r["trace__api_key_id"] or 0} if key_dim else {}))
            for r in _ledger_rows(steps, ("trace__team_id", "trace__agent_id", "trace__user_id",
                                          *key_dim, "provider", "model"))]
    rollup_model.objects.bulk_create(rows, batch_size=2000)
    conv_rows = [conversation_model(
        team_id=r["trace__team_id"], day=r["day"], conversation_id=r["trace__conversation_id"] or 0,
        agent_id=r["trace__agent_id"] or 0, user_id=r["trace__user_id"] or 0,
        provider=r["provider"][:100], model=r["model"][:200], **_amounts(r, conversation_model))
        for r in _ledger_rows(steps, ("trace__team_id", "trace__conversation_id", "trace__agent_id",
                                      "trace__user_id", "provider", "model"))]
    conversation_model.objects.bulk_create(conv_rows, batch_size=2000)
    return len(rows) + len(conv_rows)


@transaction.atomic
def estimated_calls_backfill(*, models: tuple[Any, Any, Any, Any]) -> None:
    """Count the model requests with estimated tokens into their traces and the roll-ups they
    are already in (the migration that added the counts; the rest of the ledger is left as it
    is). ``models``: the Trace, Step, CostRollup and ConversationCostRollup classes."""
    trace_model, step_model, rollup_model, conversation_model = models
    steps = step_model.objects.filter(kind="llm_request", status__in=FINISHED,
                                      meta__usage_estimated=True)
    for row in steps.values("trace_id").order_by().annotate(n=Count("id")):
        trace_model.objects.filter(pk=row["trace_id"]).update(estimated_calls=row["n"])
    dims = ("trace__team_id", "trace__agent_id", "trace__user_id", "provider", "model")
    for r in _ledger_rows(steps, dims):
        rollup_model.objects.filter(
            team_id=r["trace__team_id"], day=r["day"], agent_id=r["trace__agent_id"] or 0,
            user_id=r["trace__user_id"] or 0, provider=r["provider"][:100], model=r["model"][:200],
        ).update(estimated_calls=r["n_estimated"])
    for r in _ledger_rows(steps, ("trace__conversation_id", *dims)):
        conversation_model.objects.filter(
            team_id=r["trace__team_id"], day=r["day"], conversation_id=r["trace__conversation_id"] or 0,
            agent_id=r["trace__agent_id"] or 0, user_id=r["trace__user_id"] or 0,
            provider=r["provider"][:100], model=r["model"][:200],
        ).update(estimated_calls=r["n_estimated"])


@transaction.atomic
def cache_lost_backfill(*, models: tuple[Any, Any, Any]) -> None:
    """Add the cache losses recorded on steps stored before the ledger kept them
    (``cache_selectors.losses_backfill``) to the roll-ups those steps are already in (the
    migration that added the column; the rest of the ledger is left as it is, deleted
    conversations' spend included). ``models``: the Step, CostRollup and
    ConversationCostRollup classes."""
    step_model, rollup_model, conversation_model = models
    steps = step_model.objects.filter(kind="llm_request", status__in=FINISHED,
                                      meta__cache_lost_units__gt=0)
    dims = ("trace__team_id", "trace__agent_id", "trace__user_id", "provider", "model")
    for r in _ledger_rows(steps, (*dims, "trace__api_key_id")):
        rollup_model.objects.filter(
            team_id=r["trace__team_id"], day=r["day"], agent_id=r["trace__agent_id"] or 0,
            user_id=r["trace__user_id"] or 0, api_key_id=r["trace__api_key_id"] or 0,
            provider=r["provider"][:100], model=r["model"][:200],
        ).update(cache_lost_units=F("cache_lost_units") + r["n_cache_lost"])
    for r in _ledger_rows(steps, ("trace__conversation_id", *dims)):
        conversation_model.objects.filter(
            team_id=r["trace__team_id"], day=r["day"], conversation_id=r["trace__conversation_id"] or 0,
            agent_id=r["trace__agent_id"] or 0, user_id=r["trace__user_id"] or 0,
            provider=r["provider"][:100], model=r["model"][:200],
        ).update(cache_lost_units=F("cache_lost_units") + r["n_cache_lost"])


def trace_totals_from_steps(trace_id: int) -> dict[str, Any]:
    """The totals a trace must show: the sums of its steps (used when a trace ends or is
    corrected)."""
    data = Step.objects.filter(trace_id=trace_id).aggregate(
        **{name: Coalesce(Sum(name), 0) for name in TOKEN_FIELDS},
        cost=Sum("cost_usd"), count=Count("id"),
        unpriced=Count("id", filter=Q(kind=Step.Kind.LLM_REQUEST, status__in=FINISHED,
                                      meta__unpriced=True)),
        prefix=Count("id", filter=Q(kind=Step.Kind.LLM_REQUEST, status__in=FINISHED,
                                    price_match="prefix")),
        estimated=Count("id", filter=Q(kind=Step.Kind.LLM_REQUEST, status__in=FINISHED,
                                       meta__usage_estimated=True)))
    return {
        **{name: int(data[name]) for name in TOKEN_FIELDS},
        "cost_usd": data["cost"] or Decimal(0), "step_count": data["count"],
        "unpriced_calls": data["unpriced"], "prefix_priced_calls": data["prefix"],
        "estimated_calls": data["estimated"],
    }
